"""Fixtures for the tests of the experiment scripts, which ``make test`` does not collect (it runs ``tests/``):
``pytest experiments/tests`` runs them. The scripts and the benchmarks they import go on the import path;
the tiny random model, the toy task folders and the training data are the package tests' own fixtures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for folder in (REPO / "benchmarks", REPO / "experiments"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def _fixtures(relative: str):
    """A conftest of the package tests, loaded by its path (the ``tests`` folders are not packages)."""
    path = REPO / "tests" / relative
    spec = importlib.util.spec_from_file_location(f"package_tests.{relative[:-3].replace('/', '.')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_root = _fixtures("conftest.py")
_one_thread_per_test_process, _tiny_backbone, tiny, tiny_model = (
    _root._one_thread_per_test_process,
    _root._tiny_backbone,
    _root.tiny,
    _root.tiny_model,
)
toy_tasks = _fixtures("eval/conftest.py").toy_tasks
assets = _fixtures("training/conftest.py").assets

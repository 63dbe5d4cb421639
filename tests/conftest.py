"""Shared fixtures: a tiny random Llama built once per session (each test gets a deep copy) and,
for tests marked ``slow``, the real default model."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

# genembed.load() defaults to bfloat16 on CPUs that compute it natively; the tests compare against
# float32 references with tight tolerances, so they load float32 unless a test asks otherwise
# (tests/backbone/test_loading.py checks the automatic choice itself). Subprocesses inherit it.
os.environ["GENEMBED_DTYPE"] = "float32"


@pytest.fixture(scope="session", autouse=True)
def _one_thread_per_test_process():
    # Tests run on shared 2-core machines; tiny models are fastest single-threaded.
    torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _centre_cache(tmp_path_factory):
    # centres the tests compute are cached in a folder of the session, not the user's cache
    os.environ["GENEMBED_CENTRE_CACHE"] = str(tmp_path_factory.mktemp("centre-cache"))


@pytest.fixture(scope="session")
def _tiny_backbone():
    from genembed.backbone import tiny_backbone

    return tiny_backbone(seed=0)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory, _tiny_backbone) -> Path:
    """The session's tiny model written as an HF folder (so ``genembed.load`` and the CLI read it back)."""
    folder = tmp_path_factory.mktemp("tiny-model")
    _tiny_backbone.model.save_pretrained(folder)
    _tiny_backbone.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def tiny(_tiny_backbone):
    """A fresh copy of the tiny backbone (tests may modify it)."""
    return copy.deepcopy(_tiny_backbone)


@pytest.fixture
def tiny_model(tiny):
    from genembed.model import GenerativeEmbedder

    return GenerativeEmbedder(tiny)


@pytest.fixture(scope="session")
def real_model():
    """The bundled backbone (SmolLM2-135M-Instruct) without an adapter, loaded once; do not modify it."""
    import genembed

    return genembed.load(adapter=False)


@pytest.fixture(scope="session")
def default_model():
    """What ``genembed.load()`` gives: the bundled backbone plus the shipped GIRCSE adapter."""
    import genembed
    from genembed.loading import default_adapter

    if default_adapter() is None:
        pytest.fail("this checkout ships no default adapter (src/genembed/adapters/)")
    return genembed.load()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = SHARED / "data"
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path}")
    return path

"""Where genembed keeps converted models and other derived files, and how it writes them safely."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_directory", "cache_root"]


def cache_root() -> Path:
    """The cache directory: ``$GENEMBED_CACHE``, else ``~/.cache/genembed``."""
    root = os.environ.get("GENEMBED_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "genembed")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``target`` and rename it to ``target`` when the block succeeds.

    A crash inside the block leaves no half-written ``target``. If another process created ``target``
    meanwhile, its copy wins and ours is discarded (both are complete).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)

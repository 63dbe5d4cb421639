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
def atomic_directory(target: Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside ``target`` and rename it to ``target`` when the block succeeds.

    A crash inside the block leaves no half-written ``target``. If another process created ``target``
    meanwhile, its copy wins and ours is discarded (both are complete). With ``replace``, an existing
    ``target`` is swapped for ours instead (moved aside, then deleted once ours is in place).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    old = None
    try:
        yield tmp
        if replace and target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.rename(target, old / target.name)
        try:
            os.rename(tmp, target)
        except OSError:
            if old is not None:  # put the previous copy back rather than leave nothing
                os.rename(old / target.name, target)
            if not target.exists() or old is not None:
                raise
    finally:
        for leftover in (tmp, old):
            if leftover is not None and leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)

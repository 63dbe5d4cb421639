"""Centers on disk: the file a model folder stores its named instructions' centers in, and the bounded
cache of the others.

A center (:mod:`genembed.encoders.centering`) is identified by its key: the instruction, whether it
holds one center per step, and the settings that change embeddings (:func:`key_fields`). Both stores
also depend on the bundled calibration texts, through their digest.

- ``centers.safetensors`` (:data:`CENTERS_FILE`) beside a model's weights (a folder written by
  ``model.save``, or an adapter folder such as the shipped ones): one tensor per center, named by its
  key as JSON, with the calibration digest in the file's metadata. A file made from other calibration
  texts is ignored with a warning.
- The disk cache (:func:`cache_folder`): one small safetensors file per center, named by a digest of
  the model's weights, the key and the calibration digest; at most :data:`CACHE_FILES` files, the
  least recently used removed first. ``$GENEMBED_CENTER_CACHE`` moves it (a folder) or turns it off
  (``off``); by default it is ``<genembed cache>/centers`` (``$GENEMBED_CACHE``, else
  ``~/.cache/genembed``).

Every file is written atomically (a temporary file renamed into place).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from .._files import DamagedFileError, atomic_write_text

__all__ = [
    "CACHE_ENV",
    "CACHE_FILES",
    "CENTERS_FILE",
    "cache_folder",
    "read_cached",
    "read_centers",
    "write_cached",
    "write_centers",
]

logger = logging.getLogger(__name__)

CENTERS_FILE = "centers.safetensors"
CACHE_ENV = "GENEMBED_CENTER_CACHE"
CACHE_FILES = 4096  # centers the disk cache keeps (a few KB each), least recently used dropped first
_OFF = {"off", "0", "false", "none"}
_FORMAT = "1"


def key_name(key: dict[str, Any]) -> str:
    """A center's key as the name it is stored under (sorted JSON)."""
    return json.dumps(key, sort_keys=True)


def write_centers(path: str | os.PathLike, centers: dict[str, torch.Tensor], calibration: str) -> None:
    """Write ``{key name: center}`` to ``path`` atomically, recording the calibration texts' digest."""
    from safetensors.torch import save

    tensors = {name: t.detach().float().cpu().contiguous() for name, t in centers.items()}
    metadata = {"format": _FORMAT, "calibration_sha256": calibration}
    atomic_write_text(path, save(tensors, metadata=metadata))


def read_centers(path: str | os.PathLike, calibration: str) -> dict[str, torch.Tensor]:
    """The centers in ``path`` by key name; ``{}`` (with a warning) when they come from other
    calibration texts or another format.

    Raises:
        DamagedFileError: ``path`` is not a readable safetensors file (the message names it).
    """
    from safetensors import safe_open

    fix = "Delete it: the centers are then computed when first needed (and model.save writes them again)."
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            centers = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (not a dict)
    except Exception as exc:
        raise DamagedFileError(f"{path} is not a readable centers file ({exc}). {fix}") from exc
    if metadata.get("format") != _FORMAT or metadata.get("calibration_sha256") != calibration:
        logger.warning("%s was made from other calibration texts or by another genembed: not used", path)
        return {}
    return centers


def cache_folder() -> Path | None:
    """The disk cache's folder (``$GENEMBED_CENTER_CACHE``, else ``<genembed cache>/centers``), or None
    when that variable turns it off."""
    chosen = os.environ.get(CACHE_ENV, "").strip()
    if chosen.lower() in _OFF:
        return None
    if chosen:
        return Path(os.path.expanduser(chosen))
    from ..backbone.cache import cache_root

    return cache_root() / "centers"


def _entry(folder: Path, model_id: str, name: str, calibration: str) -> Path:
    digest = hashlib.sha256(f"{model_id}\n{name}\n{calibration}".encode()).hexdigest()[:40]
    return folder / f"{digest}.safetensors"


def read_cached(model_id: str, name: str, calibration: str) -> torch.Tensor | None:
    """The cached center of ``name`` for the model ``model_id``, or None (a damaged entry is removed)."""
    folder = cache_folder()
    if folder is None:
        return None
    path = _entry(folder, model_id, name, calibration)
    if not path.is_file():
        return None
    try:
        found = read_centers(path, calibration).get(name)
    except DamagedFileError:
        found = None
    if found is None:
        path.unlink(missing_ok=True)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: kept longest
    return found


def write_cached(model_id: str, name: str, calibration: str, value: torch.Tensor) -> None:
    """Store a center in the disk cache, then drop the least recently used entries over :data:`CACHE_FILES`.

    A cache that cannot be written (a read-only home, a full disk) is skipped with a warning."""
    folder = cache_folder()
    if folder is None:
        return
    try:
        write_centers(_entry(folder, model_id, name, calibration), {name: value}, calibration)
        entries = list(folder.glob("*.safetensors"))
        if len(entries) > CACHE_FILES:
            entries.sort(key=lambda p: p.stat().st_mtime_ns)
            for old in entries[: len(entries) - CACHE_FILES]:
                old.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("cannot write the center cache in %s (%s); set %s=off to skip it", folder, exc, CACHE_ENV)

"""Stable fingerprints of what determines an embedding: weights, files and the encoding code."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["code_fingerprint", "digest", "folder_fingerprint", "tensors_fingerprint"]

_APPLIED_AFTER_CACHE = {"centering.py", "center_files.py"}


def digest(obj: Any, size: int = 12) -> str:
    """Hex digest (``2 * size`` characters) of a JSON-serialisable object."""
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()


def folder_fingerprint(folder: str | Path) -> str:
    """Digest of the names, sizes and modification times of the files directly in ``folder``."""
    folder = Path(folder)
    entries = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file())
    return digest([str(folder.resolve()), entries])


def tensors_fingerprint(named_tensors: Any) -> str:
    """Digest of ``(name, tensor)`` pairs: names, dtypes, shapes and raw bytes."""
    import torch

    h = hashlib.blake2b(digest_size=12)
    for name, tensor in named_tensors:
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Digest of genembed's backbone and encoder sources, so a code change invalidates cached embeddings.

    ``encoders/centering.py`` and ``encoders/center_files.py`` are left out: the cache holds raw
    embeddings and centering is applied after lookup (:class:`genembed.eval.encoding.TextEmbedder`).
    """
    root = Path(__file__).resolve().parents[1]
    h = hashlib.blake2b(digest_size=8)
    for sub in ("backbone", "encoders"):
        for file in sorted((root / sub).glob("*.py")):
            if file.name in _APPLIED_AFTER_CACHE:
                continue
            h.update(file.name.encode())
            h.update(file.read_bytes())
    return h.hexdigest()

"""genembed: generative text embeddings (GIRCSE soft-token refinement, GRIT embedding + generation).

>>> import genembed
>>> model = genembed.load()               # SmolLM2-135M-Instruct, bundled
>>> model.encode(["a text", "another"], instruction="Retrieve semantically similar text.")

Importing the package does no work; heavy modules load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "load": "genembed.models.load",
    "DamagedFileError": "genembed._files",
    "GenerativeEmbedder": "genembed.model",
    "DEFAULT_QUERY_INSTRUCTION": "genembed.encoders.instructions",
    "MissingModelError": "genembed.backbone.default_model",
    "InsufficientMemoryError": "genembed.backbone.memory",
    "tiny_backbone": "genembed.backbone.tiny",
    "train": "genembed.training.loop",
    "losses": "genembed.training",
}

__all__ = [
    "DEFAULT_QUERY_INSTRUCTION",
    "DamagedFileError",
    "GenerativeEmbedder",
    "InsufficientMemoryError",
    "MissingModelError",
    "load",
    "losses",
    "tiny_backbone",
    "train",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'genembed' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)

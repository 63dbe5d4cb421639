"""Training: ICR (GIRCSE) and joint GRIT objectives, LoRA or full fine-tuning, single or multi-process.

>>> from genembed.training import train
>>> result = train("configs/tiny-gircse.yaml", ["train.max_steps=30"])

Importing this package stays light: the loop, peft and accelerate load when ``train`` is called.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import losses
from .config import ConfigError, RunConfig, load_config
from .data.jsonl import DataError

__all__ = ["ConfigError", "DataError", "RunConfig", "TrainResult", "load_config", "losses", "train"]

_LAZY = {"train": "genembed.training.loop", "TrainResult": "genembed.training.loop"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'genembed.training' has no attribute {name!r}")

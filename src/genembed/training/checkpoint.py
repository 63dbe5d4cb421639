"""Atomic, resumable training checkpoints: trainable weights, optimizer, scheduler, step and RNG states.

A checkpoint is a folder ``checkpoints/step-0000050`` written under a temporary name and renamed
when complete, so a crash never leaves a half-written one. Only the trainable weights are stored
(a LoRA adapter is a few MB; the frozen backbone is reloaded from its source).
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..backbone.cache import atomic_directory

__all__ = ["capture_rng", "latest_checkpoint", "load_checkpoint", "restore_rng", "save_checkpoint"]

_NAME = re.compile(r"^step-(\d+)$")


def capture_rng() -> dict[str, Any]:
    """Python, numpy and torch (CPU and CUDA) RNG states of this process."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(folder: str | Path, step: int, state: dict[str, Any], *, keep: int) -> Path:
    """Write ``state`` as ``folder/step-<step>`` atomically and keep only the newest ``keep`` checkpoints."""
    folder = Path(folder)
    target = folder / f"step-{step:07d}"
    if target.exists():  # a rerun of the same step (e.g. after resuming from an older checkpoint)
        shutil.rmtree(target)
    with atomic_directory(target) as tmp:
        torch.save({"step": step, **state}, tmp / "state.pt")
    for old in _checkpoints(folder)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def latest_checkpoint(folder: str | Path) -> Path | None:
    """The newest complete checkpoint in ``folder``, or None."""
    found = _checkpoints(Path(folder))
    return found[-1] if found else None


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint` (includes ``step``)."""
    # weights_only=False: the state holds Python and numpy RNG states next to the tensors
    return torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)


def _checkpoints(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    found = [
        (int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name)) and (p / "state.pt").is_file()
    ]
    return [p for _, p in sorted(found)]

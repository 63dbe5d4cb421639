"""Atomic, resumable training checkpoints: trainable weights, optimizer, scheduler, step and RNG states.

A checkpoint is a folder ``checkpoints/step-0000050`` written under a temporary name and renamed
when complete, so a crash never leaves a half-written one. Only the trainable weights are stored
(a LoRA adapter is a few MB; the frozen backbone is reloaded from its source). Nothing is pickled:

    tensors.safetensors   every tensor of the state: weights, optimizer moments and step counts,
                          torch (and CUDA) RNG states
    state.json            everything else (step, Python and numpy RNG states, optimizer
                          hyperparameters, scheduler counters), with each tensor replaced by a
                          reference to its name, and the size and SHA-256 of tensors.safetensors

A checkpoint of an older genembed (``state.pt``, a pickle) is refused, never unpickled.

:func:`genembed.training.run.save_run_checkpoint` and :func:`genembed.training.run.resume_run` write and
restore a training run's state through these files.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._files import DamagedFileError, file_digest, read_json, read_safetensors
from ..backbone.cache import atomic_directory
from .config import ConfigError

__all__ = [
    "capture_rng",
    "latest_checkpoint",
    "load_checkpoint",
    "restore_rng",
    "save_checkpoint",
]

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^step-(\d+)$")
_STATE, _TENSORS, _PICKLED = "state.json", "tensors.safetensors", "state.pt"
_FORMAT, _VERSION = "genembed-checkpoint", 1


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
    """Write ``state`` as ``folder/step-<step>`` atomically and keep only the newest ``keep`` checkpoints.

    ``state`` holds tensors, numpy arrays, tuples, lists, dicts (string or integer keys) and JSON scalars.
    """
    folder = Path(folder)
    target = folder / f"step-{step:07d}"
    tensors: dict[str, torch.Tensor] = {}
    encoded = _encode(state, "", tensors)
    if target.exists():  # a rerun of the same step (e.g. after resuming from an older checkpoint)
        shutil.rmtree(target)
    with atomic_directory(target) as tmp:
        from safetensors.torch import save_file

        save_file(tensors, str(tmp / _TENSORS))
        document = {
            "format": _FORMAT,
            "format_version": _VERSION,
            "step": step,
            "tensors": {"file": _TENSORS, **file_digest(tmp / _TENSORS)},
            "state": encoded,
        }
        (tmp / _STATE).write_text(json.dumps(document, indent=1), encoding="utf-8")
    for old in _checkpoints(folder)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def latest_checkpoint(folder: str | Path) -> Path | None:
    """The newest complete checkpoint in ``folder`` (of any format; :func:`load_checkpoint` judges it), or None."""
    found = _checkpoints(Path(folder))
    return found[-1] if found else None


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint` (includes ``step``), checked against its checksums.

    Raises:
        ConfigError: an old-format (pickled) checkpoint, which is never loaded.
        DamagedFileError: a file of the checkpoint is missing, truncated or altered.
    """
    path = Path(path)
    if not (path / _STATE).is_file() and (path / _PICKLED).is_file():
        raise ConfigError(
            f"checkpoint {path} was written by an older genembed as a pickle ({_PICKLED}), which this version "
            "does not load (unpickling can run arbitrary code). Delete that checkpoint folder and resume from a "
            "newer one, or start the run again without --resume (train.overwrite=true)."
        )
    fix = (
        f"Delete the folder {path} and rerun with --resume to continue from the checkpoint before it "
        "(or start again without --resume)."
    )
    document = read_json(path / _STATE, fix=fix)
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise DamagedFileError(f"{path / _STATE} is not a genembed checkpoint. {fix}")
    if document.get("format_version") != _VERSION:
        raise ConfigError(
            f"checkpoint {path} has format version {document.get('format_version')}; this genembed reads "
            f"version {_VERSION}. Resume it with the genembed that wrote it, or start again without --resume."
        )
    meta = document["tensors"]
    tensors = read_safetensors(path / meta["file"], meta, fix=fix)
    try:
        state = _decode(document["state"], tensors)
    except (KeyError, TypeError, ValueError) as exc:
        raise DamagedFileError(f"{path / _STATE} does not match {meta['file']} ({exc!r}). {fix}") from exc
    return {"step": document["step"], **state}


def _encode(value: Any, name: str, tensors: dict[str, torch.Tensor]) -> Any:
    """``value`` as JSON, its tensors moved into ``tensors`` under their path (``optimizer/state/0/exp_avg``)."""
    if isinstance(value, torch.Tensor):
        tensors[name] = value.detach().cpu().contiguous()
        return {"__tensor__": name}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, f"{name}/{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{name}/{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: _encode(v, f"{name}/{k}".lstrip("/"), tensors) for k, v in value.items()}
        if all(isinstance(k, str | int) for k in value):  # e.g. the optimizer's per-parameter state
            return {"__items__": [[k, _encode(v, f"{name}/{k}".lstrip("/"), tensors)] for k, v in value.items()]}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot store {type(value).__name__} at {name!r} in a checkpoint")


def _decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tensor__" in value:
        return tensors[value["__tensor__"]]
    if "__ndarray__" in value:
        return np.asarray(value["__ndarray__"], dtype=value["dtype"])
    if "__tuple__" in value:
        return tuple(_decode(v, tensors) for v in value["__tuple__"])
    if "__items__" in value:
        return {k: _decode(v, tensors) for k, v in value["__items__"]}
    return {k: _decode(v, tensors) for k, v in value.items()}


def _checkpoints(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    found = [
        (int(m.group(1)), p)
        for p in folder.iterdir()
        if (m := _NAME.match(p.name)) and ((p / _STATE).is_file() or (p / _PICKLED).is_file())
    ]
    return [p for _, p in sorted(found)]

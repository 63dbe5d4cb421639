"""Turn a training checkpoint into an adapter folder that ``genembed.load`` and ``genembed eval`` read.

A run writes its adapter only when it finishes; its checkpoints (``checkpoints/step-N``) hold the
trainable weights with the optimizer state. Exporting one lets a long run be scored on the way
(choosing between checkpoints as between finished runs) without stopping or changing it:

    genembed export-checkpoint runs/gircse-smollm2-v2 --step 60 --out runs/v2-step60
    genembed eval ../shared/data/dev --adapter runs/v2-step60

The folder gets the adapter files a finished run writes and the run's ``genembed_train.yaml`` (so the
adapter says what it was trained for, :mod:`genembed.models.trained_for`), with ``step`` recorded in
``exported_from.json``. ``dtype="bfloat16"`` stores the weights at half the size (how the shipped adapters
are kept); they load into a model of any dtype, cast on load.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .._files import atomic_write_json
from ..backbone.cache import atomic_directory
from ..models.trained_for import TRAIN_CONFIG
from .checkpoint import latest_checkpoint, load_checkpoint
from .config import ConfigError, load_config
from .lora import load_trainable_state, save_trained, trained_settings

__all__ = ["STORAGE_DTYPES", "export_checkpoint"]

STORAGE_DTYPES = ("float32", "bfloat16", "float16")


def export_checkpoint(
    run_dir: str | os.PathLike, out: str | os.PathLike, *, step: int | None = None, dtype: str = "float32"
) -> Path:
    """Write the weights of checkpoint ``step`` (default: the newest) of the run in ``run_dir`` to ``out``.

    ``dtype`` is the dtype the weights are stored in (one of :data:`STORAGE_DTYPES`).

    Returns:
        The output folder, loadable with ``genembed.load(base, adapter=out)`` (LoRA runs) or
        ``genembed.load(out)`` (full fine-tuning).

    Raises:
        ConfigError: ``run_dir`` holds no run config or no such checkpoint, ``out`` already exists, or
            ``dtype`` is not a storage dtype.
        DamagedFileError: the checkpoint's files do not match what its ``state.json`` recorded.
    """
    import torch

    from .setup import init_adapter, load_run_backbone, trainable_model

    run_dir, out = Path(run_dir), Path(out)
    if dtype not in STORAGE_DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(STORAGE_DTYPES)}, got {dtype!r}")
    if not (run_dir / TRAIN_CONFIG).is_file():
        raise ConfigError(f"{run_dir} is not a training run folder: it has no {TRAIN_CONFIG}")
    checkpoint = _find(run_dir / "checkpoints", step)
    if out.exists():
        raise ConfigError(f"{out} already exists: choose another --out or delete it")
    cfg = load_config(run_dir / TRAIN_CONFIG)
    saved = load_checkpoint(checkpoint)  # checked (size, digest) before the model is loaded
    backbone = load_run_backbone(cfg)
    model = trainable_model(cfg, backbone.model, init_adapter(cfg.lora.init_from))
    load_trainable_state(model, saved["weights"])
    model.to(getattr(torch, dtype))  # the weights are saved in the dtype they have
    with atomic_directory(out) as tmp:
        save_trained(model.eval(), backbone.tokenizer, tmp, settings=trained_settings(cfg, backbone, out))
        shutil.copyfile(run_dir / TRAIN_CONFIG, tmp / TRAIN_CONFIG)
        atomic_write_json(tmp / "exported_from.json", {"run": str(run_dir.resolve()), "step": saved["step"]})
    return out


def _find(folder: Path, step: int | None) -> Path:
    if step is None:
        found = latest_checkpoint(folder)
        if found is None:
            raise ConfigError(f"{folder} holds no checkpoint (a run writes one every train.save_every steps)")
        return found
    path = folder / f"step-{step:07d}"
    if not path.is_dir():
        have = sorted(p.name for p in folder.glob("step-*")) if folder.is_dir() else []
        raise ConfigError(f"no checkpoint for step {step} in {folder} (there are: {', '.join(have) or 'none'})")
    return path

"""``train``: the training loop, one readable function.

    result = genembed.train("configs/tiny-gircse.yaml", ["train.max_steps=30"])

Single process: ``genembed train CONFIG.yaml``. Several processes (data parallel through accelerate,
gloo on CPU, NCCL on GPUs): ``accelerate launch --multi_gpu --num_processes 2 $(which genembed) train
CONFIG.yaml``. Every process draws the same global batch and trains on its slice.

The output folder receives the adapter (or the full model), ``genembed_train.yaml`` (the resolved
config), ``metrics.jsonl`` (one record per step), ``metrics.png``, ``summary.json`` and
``checkpoints/``; ``resume=True`` continues from the newest checkpoint with the same data order,
optimizer, scheduler and RNG states.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import RunConfig, apply_overrides, config_from_dict, config_to_dict, load_config
from .run import resume_run, save_run_checkpoint
from .setup import build_run
from .step import train_step
from .summary import finish_run
from .teacher_map import save_teacher_map

__all__ = ["TrainResult", "train"]


@dataclass
class TrainResult:
    """What :func:`train` returns."""

    output_dir: Path
    model: Any  # the trained model (a peft model with LoRA), in eval mode
    tokenizer: Any
    steps: int
    final_loss: float
    seconds: float  # wall time of this call


def train(
    config: RunConfig | str | os.PathLike, overrides: list[str] | tuple[str, ...] = (), *, resume: bool = False
) -> TrainResult:
    """Train an embedding model (GIRCSE with ICR, or GRIT jointly with a generative loss).

    Args:
        config: a :class:`RunConfig` or a YAML file.
        overrides: ``section.key=value`` strings applied on top.
        resume: continue from the newest checkpoint in ``train.output_dir`` (start fresh if none).

    Returns:
        A :class:`TrainResult` with the trained model and the output folder.

    Raises:
        ConfigError: a bad config, or an output folder holding another run.
        DataError: a bad data file (raised before the model is loaded).
    """
    t_start = time.perf_counter()
    cfg = load_config(config, overrides) if not isinstance(config, RunConfig) else _with_overrides(config, overrides)
    run, saved = build_run(cfg, resume)
    start = resume_run(run, saved) if saved is not None else 0
    from tqdm.auto import tqdm

    tc, main = cfg.train, run.accelerator.is_main_process
    bar = tqdm(total=tc.max_steps, initial=start, desc="train", disable=not (main and tc.progress), unit="step")
    last_loss = math.nan
    for step in range(start + 1, tc.max_steps + 1):
        record = train_step(run, step)
        last_loss = record["loss"]
        if main:
            run.metrics.append(record)
        bar.set_postfix(loss=f"{last_loss:.4f}", lr=f"{record['lr']:.2e}")
        bar.update(1)
        if step == tc.max_steps or (tc.save_every and step % tc.save_every == 0):
            save_run_checkpoint(run, step)
    bar.close()

    accelerator = run.accelerator
    objective = accelerator.unwrap_model(run.objective)
    model = objective.model.eval()
    accelerator.wait_for_everyone()
    if main:
        seconds = time.perf_counter() - t_start
        data = [*(run.contrastive.summary() if run.contrastive else []), *(run.single.summary() if run.single else [])]
        finish_run(
            run.out, cfg, model, run.tokenizer, run.metrics, data, run.world, seconds, run.precision, run.backbone
        )
        for term in objective.trained_terms().values():  # e.g. the teacher map, for a later stage
            save_teacher_map(term, run.out)
    accelerator.wait_for_everyone()
    if run.world > 1:
        accelerator.end_training()  # tears down the process group (gloo aborts at exit otherwise)
    return TrainResult(run.out, model, run.tokenizer, tc.max_steps, last_loss, time.perf_counter() - t_start)


def _with_overrides(config: RunConfig, overrides: list[str] | tuple[str, ...]) -> RunConfig:
    return apply_overrides(config_from_dict(config_to_dict(config)), overrides)

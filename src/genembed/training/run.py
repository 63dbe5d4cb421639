"""One training run's shared state (:class:`Run`) and its checkpoints: :func:`save_run_checkpoint` and
:func:`resume_run` write and restore the trainable weights, the weights of the objective's own terms,
optimizer, scheduler, every process's RNG and the data position (through
:mod:`genembed.training.checkpoint`'s files). The set-up that builds a run is :mod:`genembed.training.setup`."""

from __future__ import annotations

import functools
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .checkpoint import capture_rng, restore_rng, save_checkpoint
from .config import RunConfig
from .data.streams import ContrastiveStream, GenerativeStream, SingleStream
from .lora import load_trainable_state, trainable_state
from .metrics import MetricsLog
from .teacher import Teacher
from .teacher_targets import TargetStore

__all__ = ["Run", "resume_run", "save_run_checkpoint", "training_precision"]

logger = logging.getLogger(__name__)


@dataclass
class Run:
    """What the steps of one run share: the process group, the model and its optimizer, the data."""

    cfg: RunConfig
    accelerator: Any
    out: Path
    checkpoint: Path | None  # the checkpoint resumed from
    tokenizer: Any
    model: Any  # the trainable model (a peft model for LoRA)
    objective: Any  # the Objective as prepared by accelerate (DDP-wrapped with several processes)
    optimizer: Any
    scheduler: Any
    params: list[torch.nn.Parameter]
    contrastive: ContrastiveStream | None  # None when every step is a single-text step
    generative: GenerativeStream | None
    metrics: MetricsLog
    prompt_format: str
    teacher: Teacher | None  # scores each batch for the terms that need its scores (e.g. loss.distill_weight > 0)
    targets: TargetStore | None = None  # the teacher's cached vectors (loss.distill_targets), replacing it
    single: SingleStream | None = None  # single-text batches (single.share > 0)
    plan: list[str] | None = None  # each step's objective, "contrastive" or "single" (single.share)
    backbone: Any = None  # the loaded backbone: its name and source go into the adapter's genembed.json

    def source(self, step: int) -> str:
        """The objective of step ``step`` (1-based)."""
        return self.plan[step - 1] if self.plan else "contrastive"

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    @functools.cached_property
    def precision(self) -> str:
        """The precision the steps run in: ``train.precision`` with ``auto`` resolved for this device (once:
        every forward asks, through :meth:`autocast`)."""
        return training_precision(self.cfg.train.precision, self.accelerator.device)

    def autocast(self) -> Any:
        device = self.accelerator.device
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16")


def training_precision(precision: str, device: Any) -> str:
    """``train.precision`` as run on ``device``: ``auto`` is ``bf16`` on a CUDA GPU that computes bfloat16
    natively (:func:`genembed.backbone.loading.default_dtype`), else ``fp32``; ``fp32``/``bf16`` as given.

    Not on a CPU, even one with AVX512-BF16 or AMX: CPU autocast casts the frozen base weights again at
    every call and keeps each copy for the backward pass (it caches casts of trainable weights only), and a
    GIRCSE forward calls every weight once per soft-token step and per instruction group. A single-text step
    of 128 short texts under 10 instructions held 21.6 GB after two of its eight chunks, where float32
    peaked at 4.5 GB for the whole step (docs/training.md)."""
    if precision != "auto":
        return precision
    from ..backbone.loading import default_dtype

    on_cuda = str(device).startswith("cuda")
    return "bf16" if on_cuda and default_dtype(str(device)) == "bfloat16" else "fp32"


def resume_run(run: Run, saved: dict[str, Any]) -> int:
    """Restore weights, optimizer, scheduler, RNG and data position from a checkpoint; return its step."""
    load_trainable_state(run.model, saved["weights"])
    run.optimizer.load_state_dict(saved["optimizer"])
    run.scheduler.load_state_dict(saved["scheduler"])
    rng = saved["rng"]
    restore_rng(rng[run.rank] if run.rank < len(rng) else rng[0])
    start = saved["step"]
    accum = run.cfg.train.grad_accum
    done = Counter(run.source(step) for step in range(1, start + 1))
    if run.contrastive is not None:
        run.contrastive.skip(done["contrastive"] * accum)
    if run.generative is not None:  # drawn with each contrastive micro-batch (and single one: every_step)
        drawn = done["contrastive"] + (done["single"] if run.cfg.generative.every_step else 0)
        run.generative.skip(drawn * accum)
    if run.single is not None:
        run.single.skip(done["single"] * accum)
    # checkpoints written before the loss registry kept the one trained term, the teacher map, apart
    states = saved.get("terms", {"regress": saved.get("teacher_map")})
    for name, term in run.accelerator.unwrap_model(run.objective).trained_terms().items():
        term.load_state_dict(states[name])
    if run.accelerator.is_main_process:
        run.metrics.truncate(start)
        logger.info("resuming from %s (step %d)", run.checkpoint, start)
    return start


def save_run_checkpoint(run: Run, step: int) -> None:
    """Checkpoint ``run`` after ``step`` (the main process writes; every process takes part)."""
    from accelerate.utils import gather_object

    rng = gather_object([capture_rng()])  # every process's RNG state, so dropout continues identically
    if run.accelerator.is_main_process:
        state = {
            "weights": trainable_state(run.model),
            "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(),
            "rng": rng,
        }
        terms = run.accelerator.unwrap_model(run.objective).trained_terms()
        if terms:
            state["terms"] = {name: term.state_dict() for name, term in terms.items()}
        save_checkpoint(run.out / "checkpoints", step, state, keep=run.cfg.train.keep_checkpoints)
    run.accelerator.wait_for_everyone()

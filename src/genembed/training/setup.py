"""Run set-up: the process group, the data streams, the teacher, the model, the objective and its
optimizer, read from a config into one :class:`Run` that the steps share."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import torch

from .checkpoint import load_checkpoint
from .config import ConfigError, RunConfig
from .data.sampler import ShareSchedule
from .data.streams import ContrastiveStream, GenerativeStream, SingleStream, expand_files
from .lora import freeze_lower_layers, make_trainable
from .losses import LossContext, build_generative_loss, build_losses
from .losses.registry import teacher_needs
from .metrics import MetricsLog
from .objective import Objective
from .output import check_output, prepare_output
from .run import Run
from .teacher import Teacher
from .teacher_map import load_teacher_map
from .teacher_targets import (
    STORE,
    TargetStore,
    build_targets,
    load_teacher_encoder,
    targets_folder,
    targets_root,
    teacher_encoder,
)

__all__ = [
    "build_objective",
    "build_run",
    "init_adapter",
    "load_run_backbone",
    "trainable_model",
]

logger = logging.getLogger(__name__)


def _warn_if_slow_bf16(precision: str, device: Any) -> None:
    """bf16 autocast on a device without native bf16 (a CPU without AVX512-BF16 or AMX) emulates every
    matmul: a step measured 15-20x slower than in fp32 on an AVX2-only CPU."""
    from ..backbone.loading import default_dtype

    if precision == "bf16" and default_dtype(str(device)) != "bfloat16":
        logger.warning(
            "train.precision=bf16 on %s, which does not compute bfloat16 natively: steps run many times slower "
            "than in fp32; set train.precision to auto or fp32",
            device,
        )


def build_run(cfg: RunConfig, resume: bool) -> tuple[Run, dict[str, Any] | None]:
    """Check the output folder, read the data and the checkpoint, load the model: a run ready to step.

    Returns the run and the checkpoint's state to resume from (None for a fresh start).
    """
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    tc = cfg.train
    # bf16 autocast is applied around the forward rather than through accelerate's process-wide
    # mixed-precision state, so that successive train() calls in one process may differ in precision
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    world, main = accelerator.num_processes, accelerator.is_main_process
    _warn_if_single_process_launch(world)
    _warn_if_slow_bf16(tc.precision, accelerator.device)
    if tc.grad_cache_chunk and world > 1:
        raise ConfigError("train.grad_cache_chunk works in a single process; set it to 0 for a multi-process run")
    if tc.threads:
        torch.set_num_threads(tc.threads)
    out = Path(tc.output_dir)
    checkpoint = check_output(out, cfg, resume)  # every process checks, so all fail alike
    # read (and check) the checkpoint before anything is loaded or the folder is touched
    saved = load_checkpoint(checkpoint) if checkpoint is not None else None
    accelerator.wait_for_everyone()  # before the main process writes into the folder
    if main:
        prepare_output(out, cfg, resume, checkpoint)
    accelerator.wait_for_everyone()

    # data first: a bad file fails in seconds, before a model is loaded
    share = cfg.single.share
    contrastive = ContrastiveStream.from_config(cfg, world) if share < 1 else None
    single = None
    if share > 0:
        single = SingleStream(
            expand_files(cfg.single.files),
            batch_size=cfg.single.batch_size * world,
            seed=tc.seed,
            instruction=cfg.single.instruction,
            doc_instruction=cfg.data.doc_instruction,
            pairs=cfg.single.pairs,
            file_order=cfg.single.file_order,
        )
    init_from = init_adapter(cfg.lora.init_from)  # a missing adapter fails before the model loads too
    # the teacher too (it is small; or its cached vectors); every process scores the batch whose targets it holds
    targets = _open_targets(cfg, contrastive, single, world, str(accelerator.device))
    scores = "scores" in teacher_needs(cfg.loss) and targets is None  # no cache: the teacher runs each batch
    teacher = Teacher.load(cfg.loss.distill_teacher, accelerator.device) if scores else None
    set_seed(tc.seed)
    backbone = load_run_backbone(cfg)
    generative = None
    if cfg.generative.files:
        generative = GenerativeStream(
            expand_files(cfg.generative.files),
            batch_size=cfg.generative.batch_size * world,
            seed=tc.seed,
            tokenizer=backbone.tokenizer,
            max_length=cfg.generative.max_length,
        )
    model = trainable_model(cfg, backbone.model, init_from)
    objective = build_objective(cfg, model, has_generative=generative is not None, targets=targets)
    terms = objective.trained_terms()
    for term in terms.values():
        if init_from is not None:
            load_teacher_map(term, init_from)  # a stage continues the previous stage's weights (e.g. the teacher map)
    params = [p for p in objective.parameters() if p.requires_grad]  # the model's and the terms'
    groups: list[dict[str, Any]] = [{"params": [p for p in model.parameters() if p.requires_grad]}]
    # a term's weights start random: they learn at their own rate
    groups += [{"params": list(term.parameters()), "lr": term.lr} for term in terms.values()]
    optimizer = torch.optim.AdamW(groups, lr=tc.lr, weight_decay=tc.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(tc.schedule, tc.warmup_steps, tc.max_steps))
    objective, optimizer = accelerator.prepare(objective, optimizer)
    prompt_format = cfg.embedding.settings().prompt_format
    run = Run(
        cfg, accelerator, out, checkpoint, backbone.tokenizer, model, objective, optimizer, scheduler, params,
        contrastive, generative, MetricsLog(out / "metrics.jsonl"), prompt_format, teacher, targets, single,
        _objective_plan(share, tc.max_steps), backbone,
    )  # fmt: skip
    return run, saved


def _objective_plan(single_share: float, steps: int) -> list[str] | None:
    """Each step's objective with ``single.share`` of single-text steps (None: every step contrastive)."""
    if single_share == 0:
        return None
    shares = {"contrastive": 1 - single_share, "single": single_share}
    return ShareSchedule({name: share for name, share in shares.items() if share > 0}).plan(steps)


def _open_targets(
    cfg: RunConfig, contrastive: ContrastiveStream | None, single: SingleStream | None, world: int, device: str
) -> TargetStore | None:
    """The teacher's cached vectors (``loss.distill_targets``) of every text the run's losses ask the teacher
    about. Texts the store lacks are computed by the teacher as batches draw them and added to the store
    (single process); a multi-process run needs a complete store, so a missing text fails now rather than
    hours into the run."""
    if cfg.loss.distill_targets is None:
        return None
    root, teacher, length = (
        targets_root(cfg.loss.distill_targets),
        cfg.loss.distill_teacher,
        cfg.loss.distill_max_length,
    )
    loaded = None
    if world == 1 and not (targets_folder(root, teacher) / STORE).is_file():  # an empty store, to fill as it goes
        loaded, dimension, read = load_teacher_encoder(teacher, device=device, max_length=length)
        build_targets([], root, teacher, encode=loaded, dimension=dimension, max_length=read, progress=False)
    store = TargetStore.open(root, teacher)
    if length is not None and store.max_length != length:
        raise ConfigError(
            f"loss.distill_max_length is {length}, but {store.folder} holds targets read at {store.max_length} "
            "tokens: set it to that, or give another loss.distill_targets"
        )
    queries: list[str] = []
    documents: list[str] = []
    if contrastive is not None and teacher_needs(cfg.loss):
        queries = [row.query for rows in contrastive.rows for row in rows]
        documents = [text for rows in contrastive.rows for row in rows for text in (*row.pos, *row.neg)]
    if single is not None:
        documents += [text for file in single.texts for text in file]
    if world > 1:
        store.check_covers(queries, documents)
        return store
    texts = dict.fromkeys([*(store.prefix + q for q in queries), *documents])
    missing = len(store.missing(texts))
    if missing:
        logger.warning(
            "%d of the %d training texts have no cached target of %s in %s: the teacher computes them as batches "
            "draw them and adds them to the store (`genembed teacher-targets` computes them all beforehand)",
            missing, len(texts), teacher, store.folder,
        )  # fmt: skip
    return store.fill_with(loaded or teacher_encoder(teacher, device=device, max_length=store.max_length))


def _warn_if_single_process_launch(world: int) -> None:
    # `accelerate launch --num_processes N` without --multi_gpu starts ONE process on a machine without GPUs
    if world == 1 and "ACCELERATE_MIXED_PRECISION" in os.environ and "MASTER_ADDR" in os.environ:
        logger.warning(
            "accelerate started a single process; on CPU pass --multi_gpu to `accelerate launch` to start "
            "--num_processes processes (it selects the torchrun launcher; the gloo backend is used)"
        )


def trainable_model(cfg: RunConfig, model: Any, init_from: Path | None) -> Any:
    """``model`` made trainable as ``cfg.lora`` says: a fresh LoRA adapter, the adapter in ``init_from``
    continued, or every weight (the names a checkpoint's weights are stored under)."""
    lora = cfg.lora
    model = make_trainable(
        model,
        lora=lora.enabled,
        init_from=init_from,
        r=lora.r,
        alpha=lora.alpha,
        dropout=lora.dropout,
        target_modules=lora.target_modules,
    )
    if lora.frozen_layers:
        try:
            freeze_lower_layers(model, lora.frozen_layers)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    return model


def init_adapter(init_from: str | None) -> Path | None:
    """The adapter folder training starts from (checked): ``"default"`` is the adapter shipped with genembed."""
    from ..models.adapters import adapter_folder, default_adapter

    if init_from is None:
        return None
    if init_from != "default":
        return adapter_folder(init_from, "lora.init_from:")
    folder = default_adapter()
    if folder is None:
        raise ConfigError("lora.init_from=default, but this install ships no default adapter")
    return folder


def load_run_backbone(cfg: RunConfig) -> Any:
    if cfg.model.name == "tiny":
        from ..backbone.tiny import tiny_backbone

        return tiny_backbone(seed=cfg.model.tiny_seed)
    from ..backbone.loading import load_backbone

    return load_backbone(cfg.model.name, dtype=cfg.model.dtype)


def build_objective(
    cfg: RunConfig, model: Any, *, has_generative: bool, targets: TargetStore | None = None
) -> Objective:
    """The objective the config names: the registered losses (training/losses/registry.py) and the
    generative loss when there is generative data."""
    settings = cfg.embedding.settings()
    context = LossContext(model.config.hidden_size, None if targets is None else targets.dimension)
    rep, terms = build_losses(cfg.loss, settings.rules.loss, context)
    gen_cfg = cfg.generative
    gen = None
    if has_generative:
        gen = build_generative_loss(gen_cfg.loss, gen_cfg.aggregation, gen_cfg.temperature, gen_cfg.text_loss)
    chunk = cfg.train.checkpoint_chunk if cfg.train.gradient_checkpointing else 0
    return Objective(
        model,
        settings,
        rep,
        gen,
        cfg.generative.weight,
        cfg.loss.cross_device_negatives,
        terms,
        checkpoint_chunk=chunk,
        share_prefix=cfg.embedding.run_options().share_prefix,
    )


def _schedule(kind: str, warmup: int, total: int) -> Any:
    """Learning-rate factor for the step about to run (0-based): linear warmup, then constant/linear/cosine."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if kind == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 1.0 - progress) if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor

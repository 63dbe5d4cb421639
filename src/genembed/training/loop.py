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

import contextlib
import functools
import json
import logging
import math
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from .._files import atomic_write_files, atomic_write_text, remove_temp_files
from .checkpoint import capture_rng, latest_checkpoint, load_checkpoint, restore_rng, save_checkpoint
from .config import ConfigError, RunConfig, config_to_dict, load_config
from .data.sampler import ShareSchedule
from .data.streams import ContrastiveStream, GenerativeStream, SingleStream, expand_files
from .forward import tokenize_texts
from .grad_cache import grad_cache_single, grad_cache_step
from .lora import load_trainable_state, make_trainable, save_trained, trainable_state
from .losses import LossContext, NextTokenLoss, TrainedTerm, build_losses
from .losses.registry import term_names
from .metrics import MetricsLog, plot_metrics
from .objective import Objective
from .teacher import Teacher
from .teacher_targets import TargetStore, targets_root

__all__ = ["TrainResult", "train"]

logger = logging.getLogger(__name__)

CONFIG_NAME = "genembed_train.yaml"
# keys that may change between a run and its resumption without changing what is trained
# (gradient_checkpointing, checkpoint_chunk and grad_cache_chunk are memory settings: the same computation,
# except that with lora.dropout > 0 the dropout draws differ, being made per chunk)
_RESUME_FREE = {
    "train.max_steps",
    "train.save_every",
    "train.keep_checkpoints",
    "train.threads",
    "train.progress",
    "train.gradient_checkpointing",
    "train.checkpoint_chunk",
    "train.grad_cache_chunk",
    "train.precision",  # the same computation up to rounding: a run may resume on a machine without native bf16
}


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
    run, saved = _build(cfg, resume)
    start = _resume(run, saved) if saved is not None else 0
    from tqdm.auto import tqdm

    tc, main = cfg.train, run.accelerator.is_main_process
    bar = tqdm(total=tc.max_steps, initial=start, desc="train", disable=not (main and tc.progress), unit="step")
    last_loss = math.nan
    for step in range(start + 1, tc.max_steps + 1):
        record = _train_step(run, step)
        last_loss = record["loss"]
        if main:
            run.metrics.append(record)
        bar.set_postfix(loss=f"{last_loss:.4f}", lr=f"{record['lr']:.2e}")
        bar.update(1)
        if step == tc.max_steps or (tc.save_every and step % tc.save_every == 0):
            _checkpoint(run, step)
    bar.close()

    accelerator = run.accelerator
    objective = accelerator.unwrap_model(run.objective)
    model = objective.model.eval()
    accelerator.wait_for_everyone()
    if main:
        seconds = time.perf_counter() - t_start
        data = [*(run.contrastive.summary() if run.contrastive else []), *(run.single.summary() if run.single else [])]
        _finish(run.out, cfg, model, run.tokenizer, run.metrics, data, run.world, seconds, run.precision)
        for term in trained_terms(objective).values():  # e.g. the teacher map, for a later stage
            term.save(run.out)
    accelerator.wait_for_everyone()
    if run.world > 1:
        accelerator.end_training()  # tears down the process group (gloo aborts at exit otherwise)
    return TrainResult(run.out, model, run.tokenizer, tc.max_steps, last_loss, time.perf_counter() - t_start)


@dataclass
class _Run:
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
    teacher: Teacher | None  # scores each batch for similarity distillation (loss.distill_weight > 0)
    targets: TargetStore | None = None  # the teacher's cached vectors (loss.distill_targets), replacing it
    single: SingleStream | None = None  # single-text batches (single.share > 0)
    plan: list[str] | None = None  # each step's objective, "contrastive" or "single" (single.share)

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
    """``train.precision`` as run on ``device``: ``auto`` is ``bf16`` where the device computes bfloat16
    natively (:func:`genembed.backbone.loading.default_dtype`), else ``fp32``; ``fp32``/``bf16`` as given."""
    if precision != "auto":
        return precision
    from ..backbone.loading import default_dtype

    return "bf16" if default_dtype(str(device)) == "bfloat16" else "fp32"


def _warn_if_slow_bf16(precision: str, device: Any) -> None:
    """bf16 autocast on a device without native bf16 (a CPU without AVX512-BF16 or AMX) emulates every
    matmul: a step measured 15-20x slower than in fp32 on an AVX2-only CPU."""
    if precision == "bf16" and training_precision("auto", device) != "bf16":
        logger.warning(
            "train.precision=bf16 on %s, which does not compute bfloat16 natively: steps run many times slower "
            "than in fp32; set train.precision to auto (bf16 only where it is native) or fp32",
            device,
        )


def _build(cfg: RunConfig, resume: bool) -> tuple[_Run, dict[str, Any] | None]:
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
    checkpoint = _check_output(out, cfg, resume)  # every process checks, so all fail alike
    # read (and check) the checkpoint before anything is loaded or the folder is touched
    saved = load_checkpoint(checkpoint) if checkpoint is not None else None
    accelerator.wait_for_everyone()  # before the main process writes into the folder
    if main:
        _prepare_output(out, cfg, resume, checkpoint)
    accelerator.wait_for_everyone()

    # data first: a bad file fails in seconds, before a model is loaded
    share = cfg.single.share
    contrastive = ContrastiveStream.from_config(cfg, world) if share < 1 else None
    single = None
    if share > 0:
        single = SingleStream(expand_files(cfg.single.files), batch_size=cfg.single.batch_size * world, seed=tc.seed)
    init_from = _init_adapter(cfg.lora.init_from)  # a missing adapter fails before the model loads too
    # the teacher too (it is small; or its cached vectors); every process scores the batch whose targets it holds
    targets = _open_targets(cfg, contrastive, single)
    distills = cfg.loss.distill_weight > 0 and targets is None
    teacher = Teacher.load(cfg.loss.distill_teacher, accelerator.device) if distills else None
    set_seed(tc.seed)
    backbone = _load_backbone(cfg)
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
    objective = _build_objective(cfg, model, has_generative=generative is not None, targets=targets)
    terms = trained_terms(objective)
    for term in terms.values():
        if init_from is not None:
            term.load(init_from)  # a stage continues the previous stage's weights (e.g. the teacher map)
    params = [p for p in objective.parameters() if p.requires_grad]  # the model's and the terms'
    groups: list[dict[str, Any]] = [{"params": [p for p in model.parameters() if p.requires_grad]}]
    # a term's weights start random: they learn at their own rate
    groups += [{"params": list(term.parameters()), "lr": term.lr} for term in terms.values()]
    optimizer = torch.optim.AdamW(groups, lr=tc.lr, weight_decay=tc.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(tc.schedule, tc.warmup_steps, tc.max_steps))
    objective, optimizer = accelerator.prepare(objective, optimizer)
    prompt_format = cfg.embedding.settings().prompt_format
    run = _Run(
        cfg, accelerator, out, checkpoint, backbone.tokenizer, model, objective, optimizer, scheduler, params,
        contrastive, generative, MetricsLog(out / "metrics.jsonl"), prompt_format, teacher, targets, single,
        _objective_plan(share, tc.max_steps),
    )  # fmt: skip
    return run, saved


def _objective_plan(single_share: float, steps: int) -> list[str] | None:
    """Each step's objective with ``single.share`` of single-text steps (None: every step contrastive)."""
    if single_share == 0:
        return None
    shares = {"contrastive": 1 - single_share, "single": single_share}
    return ShareSchedule({name: share for name, share in shares.items() if share > 0}).plan(steps)


def _open_targets(
    cfg: RunConfig, contrastive: ContrastiveStream | None, single: SingleStream | None
) -> TargetStore | None:
    """The teacher's cached vectors (``loss.distill_targets``), checked to cover every text the run's losses
    ask the teacher about, so a missing one fails now rather than hours into the run."""
    if cfg.loss.distill_targets is None:
        return None
    store = TargetStore.open(targets_root(cfg.loss.distill_targets), cfg.loss.distill_teacher)
    queries: list[str] = []
    documents: list[str] = []
    if contrastive is not None and (cfg.loss.distill_weight > 0 or cfg.loss.regress_weight > 0):
        queries = [row.query for rows in contrastive.rows for row in rows]
        documents = [text for rows in contrastive.rows for row in rows for text in (*row.pos, *row.neg)]
    if single is not None:
        documents += [text for file in single.texts for text in file]
    store.check_covers(queries, documents)
    return store


def _resume(run: _Run, saved: dict[str, Any]) -> int:
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
    if run.generative is not None:  # drawn with each contrastive micro-batch
        run.generative.skip(done["contrastive"] * accum)
    if run.single is not None:
        run.single.skip(done["single"] * accum)
    # checkpoints written before the loss registry kept the one trained term, the teacher map, apart
    states = saved.get("terms", {"regress": saved.get("teacher_map")})
    for name, term in trained_terms(run.accelerator.unwrap_model(run.objective)).items():
        term.load_state_dict(states[name])
    if run.accelerator.is_main_process:
        run.metrics.truncate(start)
        logger.info("resuming from %s (step %d)", run.checkpoint, start)
    return start


def _train_step(run: _Run, step: int) -> dict[str, Any]:
    """One optimizer step over ``grad_accum`` micro-batches; returns its metrics record."""
    tc, accelerator = run.cfg.train, run.accelerator
    device, rank, world = accelerator.device, run.rank, run.world
    gathered = run.cfg.loss.cross_device_negatives and world > 1
    t_step = time.perf_counter()
    sums: dict[str, torch.Tensor] = {}
    sources: Counter[str] = Counter()
    kind = run.source(step)
    for micro in range(tc.grad_accum):
        if kind == "single":
            terms = _single_micro_step(run, micro == tc.grad_accum - 1)
            sources.update(run.single.last_rows)
            for key, value in terms.items():
                if key != "objective":
                    sums[key] = sums.get(key, 0) + value.detach().float() / tc.grad_accum
            continue
        batch = run.contrastive.next()
        sources.update(run.contrastive.last_rows)
        local = batch.shard(rank, world)
        targets = batch if gathered else local
        queries, documents = _tokenize(run.tokenizer, local, run.prompt_format, run.cfg.embedding)
        gen_batch = None
        if run.generative is not None:
            rows = run.generative.next_rows()
            per = len(rows) // world
            gen_batch = run.generative.collate(rows[rank * per : (rank + 1) * per])
        mask = targets.mask_tensor()
        inputs = (
            queries.to(device),
            documents.to(device),
            targets.label_tensor().to(device),
            None if mask is None else mask.to(device),
            None if gen_batch is None else _to(gen_batch, device),
        )
        # the teacher scores the queries and documents the labels index: the global batch's when gathered
        teacher, loss = {}, run.cfg.loss
        if run.targets is not None and (loss.distill_weight > 0 or loss.regress_weight > 0):
            teacher = run.targets.batch_inputs(targets, device, vectors=loss.regress_weight > 0)
        elif run.teacher is not None:
            teacher = run.teacher.batch_inputs(targets, device)
        if tc.grad_cache_chunk:  # single process (checked in _build)
            terms = grad_cache_step(
                run.objective,
                *inputs,
                chunk=tc.grad_cache_chunk,
                scale=1 / tc.grad_accum,
                autocast=run.autocast,
                **teacher,
            )
        else:
            sync = micro == tc.grad_accum - 1
            with contextlib.nullcontext() if sync else accelerator.no_sync(run.objective):
                with run.autocast():
                    terms = run.objective(*inputs, **teacher)
                accelerator.backward(terms["objective"] / tc.grad_accum)
        for key, value in terms.items():
            if key != "objective":
                sums[key] = sums.get(key, 0) + value.detach().float() / tc.grad_accum
    grad_norm = accelerator.clip_grad_norm_(run.params, tc.max_grad_norm) if tc.max_grad_norm > 0 else None
    lr = run.scheduler.get_last_lr()[0]
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    record = _record(step, accelerator.reduce(_flatten(sums), reduction="mean"), lr, grad_norm, t_step)
    record["rows"] = dict(sources.most_common())  # which files the step's (global) batches came from
    record["objective"] = kind
    return record


def _single_micro_step(run: _Run, sync: bool) -> dict[str, torch.Tensor]:
    """Embed this process's share of a single-text batch (no instruction) and backpropagate the teacher's
    losses against the cached vectors (a KL over the local texts' similarities, the regression)."""
    tc, accelerator, device = run.cfg.train, run.accelerator, run.accelerator.device
    texts = run.single.next()
    per = len(texts) // run.world
    local = texts[run.rank * per : (run.rank + 1) * per]
    batch = tokenize_texts(
        run.tokenizer, local, [""] * len(local), prompt_format=run.prompt_format, max_length=run.cfg.single.max_length
    ).to(device)
    vectors = run.targets.vectors(local).to(device)  # (B, T)
    if tc.grad_cache_chunk:
        return grad_cache_single(
            run.objective, batch, vectors, chunk=tc.grad_cache_chunk, scale=1 / tc.grad_accum, autocast=run.autocast
        )
    with contextlib.nullcontext() if sync else accelerator.no_sync(run.objective):
        with run.autocast():
            terms = run.objective(texts=batch, teacher_texts=vectors)
        accelerator.backward(terms["objective"] / tc.grad_accum)
    return terms


def _with_overrides(config: RunConfig, overrides: list[str] | tuple[str, ...]) -> RunConfig:
    from .config import apply_overrides, config_from_dict

    return apply_overrides(config_from_dict(config_to_dict(config)), overrides)


def _warn_if_single_process_launch(world: int) -> None:
    # `accelerate launch --num_processes N` without --multi_gpu starts ONE process on a machine without GPUs
    if world == 1 and "ACCELERATE_MIXED_PRECISION" in os.environ and "MASTER_ADDR" in os.environ:
        logger.warning(
            "accelerate started a single process; on CPU pass --multi_gpu to `accelerate launch` to start "
            "--num_processes processes (it selects the torchrun launcher; the gloo backend is used)"
        )


def _check_output(out: Path, cfg: RunConfig, resume: bool) -> Path | None:
    """Refuse a folder holding another run (or a changed config on resume); return the checkpoint to resume."""
    saved = out / CONFIG_NAME
    checkpoint = latest_checkpoint(out / "checkpoints") if resume else None
    if checkpoint is not None and saved.is_file():
        try:
            previous = yaml.safe_load(saved.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"cannot resume {out}: {saved} is damaged ({exc}). Delete it and rerun with --resume: the "
                "check that the config is unchanged is then skipped and the file written again"
            ) from exc
        changed = _changed_keys(_with_defaults(previous), config_to_dict(cfg))
        changed -= _RESUME_FREE
        if changed:
            free = ", ".join(sorted(key.removeprefix("train.") for key in _RESUME_FREE))
            raise ConfigError(
                f"cannot resume {out}: the config differs from the saved run in {sorted(changed)} "
                f"(only train.{{{free}}} may change)"
            )
    if not resume and out.is_dir() and any(out.iterdir()) and not cfg.train.overwrite:
        raise ConfigError(
            f"output folder {out} is not empty: pass --resume to continue its run, "
            "choose another train.output_dir, or set train.overwrite=true"
        )
    return checkpoint


def _with_defaults(saved: Any) -> Any:
    """A saved config with the defaults of keys added since it was written (so those do not count as changes)."""
    from .config import config_from_dict

    try:
        return config_to_dict(config_from_dict(saved))
    except (ConfigError, TypeError):  # not a config this version reads: compare it as it is
        return saved


def _prepare_output(out: Path, cfg: RunConfig, resume: bool, checkpoint: Path | None) -> None:
    """Clear what a fresh start replaces and save the resolved config."""
    if resume and checkpoint is None:
        logger.warning("no checkpoint in %s: starting from scratch", out / "checkpoints")
    if not resume:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    for folder in (out, out / "checkpoints"):  # temp files and folders of a process killed mid-write
        remove_temp_files(folder)
    if checkpoint is None:
        (out / "metrics.jsonl").unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / CONFIG_NAME, yaml.safe_dump(config_to_dict(cfg), sort_keys=False))


def _changed_keys(old: Any, new: Any, prefix: str = "") -> set[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = set(old) | set(new)
        return set().union(*(_changed_keys(old.get(k), new.get(k), f"{prefix}{k}.") for k in keys)) if keys else set()
    return set() if old == new else {prefix.rstrip(".")}


def trainable_model(cfg: RunConfig, model: Any, init_from: Path | None) -> Any:
    """``model`` made trainable as ``cfg.lora`` says: a fresh LoRA adapter, the adapter in ``init_from``
    continued, or every weight (the names a checkpoint's weights are stored under)."""
    lora = cfg.lora
    return make_trainable(
        model,
        lora=lora.enabled,
        init_from=init_from,
        r=lora.r,
        alpha=lora.alpha,
        dropout=lora.dropout,
        target_modules=lora.target_modules,
    )


def _init_adapter(init_from: str | None) -> Path | None:
    """The adapter folder training starts from (checked): ``"default"`` is the adapter shipped with genembed."""
    from ..adapter_loading import adapter_folder, default_adapter

    if init_from is None:
        return None
    if init_from != "default":
        return adapter_folder(init_from, "lora.init_from:")
    folder = default_adapter()
    if folder is None:
        raise ConfigError("lora.init_from=default, but this install ships no default adapter")
    return folder


def _load_backbone(cfg: RunConfig) -> Any:
    if cfg.model.name == "tiny":
        from ..backbone.tiny import tiny_backbone

        return tiny_backbone(seed=cfg.model.tiny_seed)
    from ..backbone.loading import load_backbone

    return load_backbone(cfg.model.name, dtype=cfg.model.dtype)


def _build_objective(
    cfg: RunConfig, model: Any, *, has_generative: bool, targets: TargetStore | None = None
) -> Objective:
    """The objective the config names: the registered losses (training/losses/registry.py) and the
    generative loss when there is generative data."""
    settings = cfg.embedding.settings(
        checkpoint_chunk=cfg.train.checkpoint_chunk if cfg.train.gradient_checkpointing else 0
    )
    context = LossContext(model.config.hidden_size, None if targets is None else targets.dimension)
    rep, terms = build_losses(cfg.loss, settings.rules.loss, context)
    gen = NextTokenLoss(cfg.generative.aggregation) if has_generative else None
    return Objective(model, settings, rep, gen, cfg.generative.weight, cfg.loss.cross_device_negatives, terms)


def trained_terms(objective: Objective) -> dict[str, TrainedTerm]:
    """The objective's terms that have weights of their own (trained, checkpointed and saved with the model)."""
    return {name: term for name, term in objective.terms.items() if any(True for _ in term.parameters())}


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


def _tokenize(tokenizer: Any, batch: Any, prompt_format: str, emb: Any) -> tuple[Any, Any]:
    """Left-padded prompts for a contrastive batch's queries and documents."""
    q = tokenize_texts(
        tokenizer, batch.queries, batch.query_instructions, prompt_format=prompt_format, max_length=emb.query_max_length
    )
    d = tokenize_texts(
        tokenizer,
        batch.documents,
        batch.document_instructions,
        prompt_format=prompt_format,
        max_length=emb.doc_max_length,
    )
    return q, d


def _to(batch: Any, device: torch.device) -> Any:
    return type(batch)(*(getattr(batch, f).to(device) for f in ("input_ids", "attention_mask", "labels")))


_HEAD = ("loss", "rep", "reg", "gen")


def _flatten(sums: dict[str, torch.Tensor]) -> torch.Tensor:
    """One vector (loss, rep, reg, gen, each registered term, L_1..L_K): one all-reduce averages every metric."""
    head = [sums[key] for key in (*_HEAD, *term_names())]
    return torch.cat([torch.stack(head), sums["step_losses"]])


def _record(step: int, values: torch.Tensor, lr: float, grad_norm: Any, t_step: float) -> dict[str, Any]:
    vals = values.tolist()
    names = (*_HEAD, *term_names())
    record: dict[str, Any] = {"step": step, **dict(zip(names, vals, strict=False))}
    record |= {f"L_{k + 1}": v for k, v in enumerate(vals[len(names) :])}
    record |= {"lr": lr, "grad_norm": None if grad_norm is None else float(grad_norm)}
    record["seconds"] = round(time.perf_counter() - t_step, 4)
    return record


def _checkpoint(run: _Run, step: int) -> None:
    from accelerate.utils import gather_object

    rng = gather_object([capture_rng()])  # every process's RNG state, so dropout continues identically
    if run.accelerator.is_main_process:
        state = {
            "weights": trainable_state(run.model),
            "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(),
            "rng": rng,
        }
        terms = trained_terms(run.accelerator.unwrap_model(run.objective))
        if terms:
            state["terms"] = {name: term.state_dict() for name, term in terms.items()}
        save_checkpoint(run.out / "checkpoints", step, state, keep=run.cfg.train.keep_checkpoints)
    run.accelerator.wait_for_everyone()


def _finish(
    out: Path,
    cfg: RunConfig,
    model: Any,
    tokenizer: Any,
    metrics: MetricsLog,
    data: list[dict[str, Any]],
    world: int,
    seconds: float,
    precision: str,
) -> None:
    """Write the trained weights (file by file, atomically), the plot and a summary."""
    with atomic_write_files(out) as tmp:
        save_trained(model, tokenizer, tmp)
    records = metrics.read()
    plot_metrics(records, out / "metrics.png")
    summary = {
        "steps": cfg.train.max_steps,
        "final_loss": records[-1]["loss"] if records else None,
        "first_loss": records[0]["loss"] if records else None,
        "seconds_this_call": round(seconds, 1),
        "processes": world,
        "precision": precision,  # train.precision as run (auto resolved)
        "weights": "lora adapter" if cfg.lora.enabled else "full model",
        "data": data,
        "load_with": _load_hint(cfg, out),
    }
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))


def _load_hint(cfg: RunConfig, out: Path) -> str:
    if not cfg.lora.enabled:
        return f"genembed.load({str(out)!r})"
    base = "" if cfg.model.name is None else f"{cfg.model.name!r}, "
    return f"genembed.load({base}adapter={str(out)!r}, tau={cfg.embedding.tau})"

"""Typed training configuration: nested dataclasses, a YAML loader and dotted command-line overrides.

A run is described by one :class:`RunConfig`. Every default runs on a laptop CPU; ``configs/`` holds
examples. Loading is strict: an unknown key, a wrong type or an out-of-range value is an error that
names the key.

>>> cfg = load_config("configs/tiny-gircse.yaml", ["train.lr=3e-4", "embedding.steps=3"])
>>> cfg.train.lr
0.0003
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..encoders.methods import METHODS, method_rules
from ..encoders.prompts import PROMPT_FORMATS
from ..encoders.settings import EmbedSettings, RunOptions, fields_for
from .data.sampler import FILE_ORDERS
from .data.single import SINGLE_INSTRUCTIONS
from .losses.generative import GENERATIVE_LOSSES
from .losses.registry import LOSSES, active_terms, contrastive_names, loss_options, term_names

__all__ = [
    "ConfigError",
    "DataConfig",
    "DataFile",
    "EmbeddingConfig",
    "GenerativeConfig",
    "LoraSettings",
    "LossConfig",
    "ModelConfig",
    "RunConfig",
    "SingleConfig",
    "TrainConfig",
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "load_config",
]


class ConfigError(ValueError):
    """A bad configuration value; the message names the key."""


@dataclass
class DataFile:
    """One JSONL file of a mixture."""

    path: str  # a file; relative paths are resolved against the config file's folder
    weight: float | None = None  # sampling weight; None = the file's number of rows
    # a fixed share of the contrastive batches (each file a glob matches gets it; with batch_by_axis, split
    # over the axes by row count); files without one share the rest by weight. Needs data.one_file_per_batch
    share: float | None = None
    symmetric: bool = False  # documents get the row's instruction too (pairs of the same kind, e.g. STS)
    # labels read "axis:class" (e.g. sentiment:positive, domain:movie): batch each axis's rows apart
    batch_by_axis: bool = False
    # leave out the rows with these instructions (e.g. wordings held back to test how instructions transfer)
    skip_instructions: list[str] = field(default_factory=list)
    # keep only the rows whose label "axis:class" has one of these axes (e.g. [domain] for the review
    # rows whose instruction asks for the topic, which a teacher's geometry has); [] = every row
    axes: list[str] = field(default_factory=list)
    # with loss.distill_weight > 0: distill this file's rows from the teacher (false for files whose
    # instruction asks for a similarity the teacher does not have, e.g. sentiment over topic)
    distill: bool = True


@dataclass
class ModelConfig:
    name: str | None = None  # None = bundled default; an HF folder, a .gguf file, a cached hub id, or "tiny"
    dtype: str = "float32"  # weights dtype: float32 or bfloat16 (see train.precision for autocast)
    tiny_seed: int = 0  # weights seed when name is "tiny" (a random 2-layer model for tests and examples)


@dataclass
class LoraSettings:
    enabled: bool = True  # False = full fine-tuning of every weight
    r: int = 16  # rank
    alpha: float = 32.0  # scaling numerator (scale = alpha / r)
    dropout: float = 0.05
    target_modules: str | list[str] = "all-linear"  # every linear projection except the LM head
    # start from a trained LoRA adapter instead of fresh weights: a peft adapter folder, or "default"
    # for the adapter shipped with genembed (its rank, alpha and target modules are then used)
    init_from: str | None = None
    # the first N decoder layers keep their loaded weights (no gradient): the prompt tokens then need no
    # backward pass through them, only the soft tokens fed back from the top do
    frozen_layers: int = 0


def _embedding_settings(section: Any) -> EmbedSettings:
    """The :class:`~genembed.encoders.settings.EmbedSettings` an ``embedding:`` section describes (the
    prompt lengths stay in the section: queries and documents have their own)."""
    values = {name: getattr(section, name) for name in _EMBEDDING_KEYS if name in EmbedSettings.__dataclass_fields__}
    if method_rules(section.method).fixed_attention:  # validate() refuses another attention for it
        values["attention"] = None
    return EmbedSettings(**values)


def _run_options(section: Any) -> RunOptions:
    """The :class:`~genembed.encoders.settings.RunOptions` an ``embedding:`` section holds (``share_prefix``),
    checked against its settings."""
    values = {name: getattr(section, name) for name in _EMBEDDING_KEYS if name in RunOptions.__dataclass_fields__}
    return RunOptions(**values).check(_embedding_settings(section))


# The YAML ``embedding:`` section: these fields of EmbedSettings and RunOptions (their meaning and
# defaults are documented there; attention is written out as "causal" rather than None, as saved runs
# hold it) plus the prompt lengths of queries and documents. ``EmbeddingConfig.settings()`` gives the
# EmbedSettings, ``EmbeddingConfig.run_options()`` the RunOptions.
_EMBEDDING_KEYS = fields_for("train")
EmbeddingConfig = dataclasses.make_dataclass(
    "EmbeddingConfig",
    [
        *(
            (f.name, f.type, field(default="causal" if f.name == "attention" else f.default))
            for cls in (EmbedSettings, RunOptions)
            for f in dataclasses.fields(cls)
            if f.name in _EMBEDDING_KEYS
        ),
        ("query_max_length", "int", field(default=64)),  # tokens per query prompt (instruction and template)
        ("doc_max_length", "int", field(default=128)),  # tokens per document prompt
    ],
    namespace={"settings": _embedding_settings, "run_options": _run_options},
)
EmbeddingConfig.__module__ = __name__


# The YAML ``loss:`` section: the keys the registered losses declare (training/losses/registry.py: the
# shared ones, then each loss's ``OPTIONS``, with their defaults and checks), so adding a loss adds its
# keys here without an edit. E.g. temperature (InfoNCE's, on cosines), reg_weight (ICR's lambda),
# distill_weight (> 0 adds the KL to the teacher's in-batch similarities), regress_weight (> 0 adds the
# distance of a learned map of z_k to the teacher's cached vector; needs distill_targets).
LossConfig = dataclasses.make_dataclass(
    "LossConfig",
    [(option.name, option.type, field(default=option.default)) for option in loss_options()],
)
LossConfig.__module__ = __name__


@dataclass
class DataConfig:
    files: list[DataFile] = field(default_factory=list)  # contrastive JSONL files (globs allowed)
    batch_size: int = 16  # queries per micro-batch on each process
    hard_negatives: int = 1  # hard negatives per query (1 pos + n neg); rows with fewer use what they have
    one_file_per_batch: bool = True  # draw each batch from one file (harder in-batch negatives)
    doc_instruction: str = ""  # instruction on documents (symmetric files use the row's instead)
    # random: each batch's file drawn by weight (or share); even: a schedule that gives every file its share of
    # any stretch of batches, give or take two, from a point set by the seed (a short run sees each in proportion)
    file_order: str = "random"


@dataclass
class GenerativeConfig:
    files: list[DataFile] = field(default_factory=list)  # generative JSONL (messages, prompt/response or text)
    weight: float = 1.0  # factor on the generative loss (used when files are given)
    # next_token: cross-entropy of the labelled tokens (GRIT); base_kl: KL from the base weights' next-token
    # distributions (the adapter switched off) at the same positions, "generate as before" (losses/base_distill.py)
    loss: str = "next_token"
    text_loss: str | None = None  # the loss of plain-text rows ({"text"}); None: as loss
    # a generative batch with every contrastive step (GRIT); true: with every single-text step too
    every_step: bool = False
    temperature: float = 1.0  # base_kl: softmax temperature of both distributions
    aggregation: str = "mixed"  # sample, token or mixed (see losses/generative.py)
    batch_size: int = 4  # sequences per micro-batch on each process
    max_length: int = 256  # tokens per sequence (cut from the end)


@dataclass
class SingleConfig:
    """Single texts: one sequence per example, taught by the teacher's cached vectors alone."""

    files: list[DataFile] = field(default_factory=list)  # texts files ({"text"}) or contrastive files (every text)
    share: float = 0.0  # fraction of the optimizer steps that are single-text steps (the rest contrastive)
    batch_size: int = 128  # texts per micro-batch (the KL runs over their texts x texts similarities)
    max_length: int = 64  # tokens per text prompt (its instruction included)
    # none: texts read bare, as the teacher reads them; row: each under the instruction contrastive training
    # gives it (a query its row's, a document data.doc_instruction, or its row's in a symmetric file)
    instruction: str = "none"
    # half of each batch drawn, each drawn text followed by a text of its row (a query's positive, a document's
    # query), so the KL sees the teacher's similarities of close texts too; contrastive files only
    pairs: bool = False
    file_order: str = "random"  # as data.file_order, over the single-text files


@dataclass
class TrainConfig:
    output_dir: str = "runs/genembed"  # adapter, resolved config, metrics, plot and checkpoints
    max_steps: int = 100  # optimizer steps
    lr: float = 1e-4
    weight_decay: float = 0.0
    schedule: str = "cosine"  # cosine, linear or constant, after a linear warmup
    warmup_steps: int = 0
    grad_accum: int = 1  # micro-batches per optimizer step
    max_grad_norm: float = 1.0  # 0 disables clipping
    # fp32; bf16 autocast (weights stay in model.dtype); or auto: bf16 where the device computes it natively
    # (a CUDA GPU with bf16, a CPU with AVX512-BF16 or AMX), else fp32 (bf16 is many times slower elsewhere)
    precision: str = "fp32"
    gradient_checkpointing: bool = False  # recompute activations per chunk of texts in the backward pass
    checkpoint_chunk: int = 8  # texts per recomputed chunk
    # > 0: cached-gradient contrastive steps (GradCache) embedding this many texts at a time, so a large
    # data.batch_size (many in-batch negatives) fits in memory; single process only
    grad_cache_chunk: int = 0
    seed: int = 42
    save_every: int = 50  # checkpoint every N steps (0 = only at the end)
    keep_checkpoints: int = 2  # newest checkpoints kept
    threads: int | None = None  # torch threads per process; None = torch's default
    overwrite: bool = False  # allow a non-empty output_dir that holds no resumable run
    progress: bool = True  # tqdm progress bar


@dataclass
class RunConfig:
    """Everything one training run needs."""

    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    data: DataConfig = field(default_factory=DataConfig)
    generative: GenerativeConfig = field(default_factory=GenerativeConfig)
    single: SingleConfig = field(default_factory=SingleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


_CHOICES = {
    "model.dtype": ("float32", "bfloat16"),
    "embedding.method": METHODS,
    "embedding.attention": ("causal", "bidirectional"),
    "embedding.prompt_format": (None, *PROMPT_FORMATS),
    "loss.name": (None, *contrastive_names()),
    "generative.aggregation": ("sample", "token", "mixed"),
    "generative.loss": GENERATIVE_LOSSES,
    "generative.text_loss": (None, *GENERATIVE_LOSSES),
    "train.schedule": ("cosine", "linear", "constant"),
    "train.precision": ("fp32", "bf16", "auto"),
    "single.instruction": SINGLE_INSTRUCTIONS,
    "data.file_order": FILE_ORDERS,
    "single.file_order": FILE_ORDERS,
}
# the loss keys' checks, as the losses declare them
_CHOICES |= {f"loss.{option.name}": option.check for option in loss_options() if isinstance(option.check, tuple)}
_POSITIVE = tuple(f"loss.{option.name}" for option in loss_options() if option.check == "positive")
_POSITIVE += ("lora.r", "embedding.steps", "embedding.tau", "embedding.query_max_length", "embedding.doc_max_length")
_POSITIVE += ("data.batch_size", "generative.batch_size", "generative.max_length", "generative.temperature")
_POSITIVE += ("train.max_steps", "train.grad_accum", "train.checkpoint_chunk", "train.keep_checkpoints")
_POSITIVE += ("single.batch_size", "single.max_length")
_NON_NEGATIVE = tuple(f"loss.{option.name}" for option in loss_options() if option.check == "non_negative")
_NON_NEGATIVE += ("lora.dropout", "lora.frozen_layers", "data.hard_negatives", "generative.weight", "train.lr")
_NON_NEGATIVE += ("train.weight_decay", "train.warmup_steps", "train.max_grad_norm", "train.save_every")
_NON_NEGATIVE += ("train.grad_cache_chunk", "single.share")


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Load a YAML config (or the defaults when ``path`` is None) and apply ``key=value`` overrides.

    Relative data paths in the file are resolved against the file's folder; paths in overrides
    against the current directory.

    Raises:
        ConfigError: unreadable YAML, an unknown key, a wrong type or an invalid value (the message names it).
    """
    raw = _read_yaml(Path(path)) if path is not None else {}
    return apply_overrides(config_from_dict(raw), overrides)  # paths given on the command line stay relative


def _read_yaml(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's mapping with data paths resolved and its ``base:`` file merged underneath.

    ``base: other.yaml`` (relative to this file's folder) starts from that file's settings; this file's
    values replace the base's, section by section, and a list key written ``key+`` (e.g. ``files+``)
    appends to the base's list instead of replacing it.
    """
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}" + (f" (the base of {chain[-1]})" if chain else ""))
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(raw).__name__}")
    for section in ("data", "generative", "single"):
        for key in ("files", "files+"):
            files = raw.get(section, {}).get(key) if isinstance(raw.get(section), dict) else None
            if isinstance(files, list):
                raw[section][key] = [_resolve_file(item, path.parent) for item in files]
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: base must be the path of another config file, got {base!r}")
    if path.resolve() in chain:
        raise ConfigError(f"{path}: base files form a loop ({' -> '.join(str(p) for p in (*chain, path))})")
    return _merge(_read_yaml(path.parent / base, (*chain, path.resolve())), raw, str(path))


def _resolve_file(item: Any, folder: Path) -> Any:
    """A data file entry with a relative path made relative to ``folder`` (other values as they are)."""
    path = item.get("path") if isinstance(item, dict) else item
    if not isinstance(path, str) or os.path.isabs(os.path.expanduser(path)):
        return item
    resolved = os.path.normpath(folder / path)
    return {**item, "path": resolved} if isinstance(item, dict) else resolved


def _merge(base: dict[str, Any], over: dict[str, Any], where: str) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(key, str) and key.endswith("+"):
            name = key[:-1]
            if not isinstance(value, list) or not isinstance(merged.get(name, []), list):
                raise ConfigError(f"{where}: {key} appends a list to the base's list {name!r}")
            merged[name] = [*merged.get(name, []), *value]
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value, where)
        else:
            merged[key] = value
    return merged


def config_from_dict(raw: dict[str, Any]) -> RunConfig:
    """Build and validate a :class:`RunConfig` from nested dicts (e.g. parsed YAML)."""
    config = _build(RunConfig, raw, "")
    validate(config)
    return config


def config_to_dict(config: RunConfig) -> dict[str, Any]:
    """Plain nested dicts (YAML-safe) of a config."""
    return dataclasses.asdict(config)


def apply_overrides(config: RunConfig, overrides: list[str] | tuple[str, ...]) -> RunConfig:
    """Apply ``section.key=value`` overrides (values parsed as YAML: ``3e-4``, ``true``, ``[a, b]``)."""
    if not overrides:
        return config
    raw = config_to_dict(config)
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        parts = key.split(".")
        node = raw
        for i, part in enumerate(parts[:-1]):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(f"override {item!r}: unknown key {'.'.join(parts[: i + 1])!r}")
            node = node[part]
        if not isinstance(node, dict) or parts[-1] not in node:
            raise ConfigError(f"override {item!r}: unknown key {key!r}")
        try:
            node[parts[-1]] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: value is not valid YAML: {exc}") from exc
    return config_from_dict(raw)


def validate(config: RunConfig) -> None:
    """Range and choice checks across the config; raise :class:`ConfigError` naming the key."""
    for key, choices in _CHOICES.items():
        value = _get(config, key)
        if value not in choices:
            raise ConfigError(f"{key} must be one of {[c for c in choices if c is not None]}, got {value!r}")
    for key in _POSITIVE:  # a key whose type allows None (e.g. loss.distill_max_length) may be None
        value = _get(config, key)
        if value is not None and not value > 0:
            raise ConfigError(f"{key} must be > 0, got {value!r}")
    for key in _NON_NEGATIVE:
        if _get(config, key) < 0:
            raise ConfigError(f"{key} must be >= 0, got {_get(config, key)!r}")
    if not config.lora.dropout < 1:
        raise ConfigError(f"lora.dropout must be < 1, got {config.lora.dropout}")
    for section in ("data", "generative", "single"):
        for i, item in enumerate(getattr(config, section).files):
            if item.weight is not None and not item.weight > 0:
                raise ConfigError(f"{section}.files[{i}].weight must be > 0, got {item.weight}")
            if item.share is not None and not (section == "data" and 0 < item.share <= 1):
                where = f"{section}.files[{i}].share"
                raise ConfigError(
                    f"{where} must be in (0, 1], got {item.share}"
                    if section == "data"
                    else f"{where}: shares apply to data.files (single texts use single.share)"
                )
    if any(item.share is not None for item in config.data.files) and not config.data.one_file_per_batch:
        raise ConfigError("data.files[].share chooses each batch's file: it needs data.one_file_per_batch=true")
    if config.lora.init_from is not None and not config.lora.enabled:
        raise ConfigError("lora.init_from needs lora.enabled=true (it continues training a LoRA adapter)")
    fixed = method_rules(config.embedding.method).fixed_attention
    if fixed and config.embedding.attention != "causal":
        raise ConfigError(f"embedding.attention does not apply to {config.embedding.method} (it is always {fixed})")
    if config.embedding.share_prefix:  # RunOptions holds the rule; its messages start with the field's name
        try:
            config.embedding.run_options()
        except ValueError as exc:
            raise ConfigError(f"embedding.{exc}") from exc
    teacher_terms = [name for name in active_terms(config.loss) if LOSSES[name].teacher]
    if teacher_terms:
        if not config.loss.distill_teacher.strip():
            raise ConfigError(
                "loss.distill_teacher must name a teacher (all-MiniLM-L6-v2, all-mpnet-base-v2 or a folder), got ''"
            )
        if config.data.files and not any(item.distill for item in config.data.files):
            raise ConfigError(
                f"{_weights(teacher_terms)} > 0, but every data.files entry has distill: false (nothing to distill)"
            )
    _validate_teacher_targets(config)


def _validate_teacher_targets(config: RunConfig) -> None:
    """The losses and the single texts that need cached teacher targets have them."""
    loss, single = config.loss, config.single
    if loss.distill_targets is not None and not loss.distill_targets.strip():
        raise ConfigError("loss.distill_targets must be a folder of cached teacher targets or null, got ''")
    cached = [name for name in active_terms(loss) if LOSSES[name].teacher == "vectors"]
    if cached and loss.distill_targets is None:
        raise ConfigError(
            f"{_weights(cached)} > 0 needs loss.distill_targets, the teacher's cached vectors "
            "(build them: genembed teacher-targets FILES --teacher NAME)"
        )
    if single.share > 1:
        raise ConfigError(f"single.share must be <= 1 (a fraction of the steps), got {single.share}")
    if single.share > 0:
        if not single.files:
            raise ConfigError("single.share > 0 needs single.files (texts files or contrastive files)")
        if loss.distill_targets is None:
            raise ConfigError("single.share > 0 needs loss.distill_targets (single texts learn from cached targets)")
        texts = [name for name in term_names() if LOSSES[name].teacher]  # the terms a single text can take
        if not set(texts) & set(active_terms(loss)):
            raise ConfigError(f"single.share > 0 needs {_weights(texts, ' or ')} > 0 (its losses)")


def _weights(terms: list[str], joint: str = ", ") -> str:
    """The weight keys of registered terms, e.g. ``loss.distill_weight or loss.regress_weight``."""
    return joint.join(f"loss.{LOSSES[name].weight}" for name in terms)


def _get(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def _build(cls: type, raw: Any, where: str) -> Any:
    """Build dataclass ``cls`` from a mapping, checking every key and value type."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ConfigError(f"unknown key {_join(where, unknown[0])!r} (known: {', '.join(sorted(names))})")
    kwargs = {name: _convert(hints[name], value, _join(where, name)) for name, value in raw.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{where or 'config'}: {exc}") from exc


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} matches none of {hint}")
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        return [_convert(args[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
    if hint is DataFile and isinstance(value, str):
        return DataFile(path=value)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if (hint is bool and isinstance(value, bool)) or (hint is str and isinstance(value, str)):
        return value
    if hint is int and is_number and isinstance(value, int):
        return value
    if hint is float and is_number:
        return float(value)
    if hint is float and isinstance(value, str):  # YAML 1.1 reads "3e-4" as a string
        with contextlib.suppress(ValueError):
            return float(value)
    raise ConfigError(f"{where} must be {getattr(hint, '__name__', hint)}, got {value!r}")


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name

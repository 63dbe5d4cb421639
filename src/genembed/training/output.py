"""The output folder's policy: refuse a folder holding another run, check a resumed run's config, clear
what a fresh start replaces and save the resolved config (``genembed_train.yaml``)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import yaml

from .._files import atomic_write_text, remove_temp_files
from ..models.trained_for import TRAIN_CONFIG
from .checkpoint import latest_checkpoint
from .config import ConfigError, RunConfig, config_from_dict, config_to_dict

__all__ = ["CONFIG_NAME", "check_output", "prepare_output"]

logger = logging.getLogger(__name__)

CONFIG_NAME = TRAIN_CONFIG  # the run config beside the adapter (declared with its reader)
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
    "embedding.share_prefix",  # the same computation up to rounding, less of it
}


def check_output(out: Path, cfg: RunConfig, resume: bool) -> Path | None:
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
            raise ConfigError(
                f"cannot resume {out}: the config differs from the saved run in {sorted(changed)} "
                f"(only {', '.join(sorted(_RESUME_FREE))} may change)"
            )
    if not resume and out.is_dir() and any(out.iterdir()) and not cfg.train.overwrite:
        raise ConfigError(
            f"output folder {out} is not empty: pass --resume to continue its run, "
            "choose another train.output_dir, or set train.overwrite=true"
        )
    return checkpoint


def _with_defaults(saved: Any) -> Any:
    """A saved config with the defaults of keys added since it was written (so those do not count as changes)."""
    try:
        return config_to_dict(config_from_dict(saved))
    except (ConfigError, TypeError):  # not a config this version reads: compare it as it is
        return saved


def prepare_output(out: Path, cfg: RunConfig, resume: bool, checkpoint: Path | None) -> None:
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

"""What the ablation runners share (imported by the scripts beside it): train one row resumably, load what it
trained, and merge the row into a results JSON that other processes may be writing too.

A row is one training run in its own folder; a folder with ``summary.json`` is finished and is not trained
again. Rows are merged under an exclusive lock and written atomically, so two lanes (processes running
other rows of the same table) can share one output file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _benchmarks  # noqa: F401  (puts benchmarks/ on the import path)
from _run_info import REPO


def finished(folder: Path) -> bool:
    """Whether a training run in ``folder`` has written its final weights and summary."""
    return (folder / "summary.json").is_file()


def train_row(config: Path, overrides: list[str]) -> dict[str, Any]:
    """Train (or resume) ``config`` with ``overrides`` unless its output folder holds a finished run; the
    row's training record.

    Returns:
        ``overrides``, ``train_seconds`` (the sum of the run's step times in ``metrics.jsonl``, so a
        resumed run counts every step once and model loading not at all), ``final_loss`` and the
        ``command`` that reproduces the run (paths relative to the repository).
    """
    from genembed.training import load_config, train

    folder = Path(load_config(config, overrides).train.output_dir)
    if not finished(folder):
        train(config, overrides, resume=True)
    return {
        "overrides": overrides,
        "train_seconds": step_seconds(folder),
        "final_loss": json.loads((folder / "summary.json").read_text())["final_loss"],
        "command": f"genembed train {_relative(config.resolve())} " + " ".join(_relative(o) for o in overrides),
    }


def step_seconds(folder: Path) -> float:
    """Total wall time of the run's optimizer steps (``metrics.jsonl``)."""
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return sum(json.loads(line)["seconds"] for line in lines if line.strip())


def _relative(text: str) -> str:
    return str(text).replace(str(REPO) + "/", "")


def load_trained(
    config: Path, folder: Path, overrides: list[str] | tuple[str, ...] = (), *, dtype: str | None = None
) -> Any:
    """The model a run trained: its config's backbone with the run's adapter, or the run's own weights after
    full fine-tuning (``lora.enabled: false``); ``dtype`` None: the config's ``model.dtype``."""
    import genembed
    from genembed.training import load_config

    cfg = load_config(config, overrides)
    if not cfg.lora.enabled:
        return genembed.load(folder, adapter=False, dtype=dtype or cfg.model.dtype)
    return load_model(cfg.model, folder, dtype=dtype)


def load_model(model: Any, adapter: Path | None, *, dtype: str | None = None) -> Any:
    """A config's ``model`` section loaded with ``adapter`` (None: none); the random tiny model for a smoke
    test."""
    import genembed
    from genembed.backbone.tiny import tiny_backbone
    from genembed.model import GenerativeEmbedder
    from genembed.models.assemble import attach_adapter

    if model.name != "tiny":
        return genembed.load(model.name, adapter=adapter or False, dtype=dtype or model.dtype)
    backbone = tiny_backbone(seed=model.tiny_seed)
    if adapter is not None:
        attach_adapter(backbone, adapter)
    return GenerativeEmbedder(backbone, adapter=None if adapter is None else adapter.name)


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out.lock`` (POSIX ``flock``), so two lanes merge one at a time."""
    import fcntl

    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def save_row(out: Path, results: dict, name: str | None, entry: dict | None, markdown: Callable[[dict], str]) -> dict:
    """Write ``results`` with ``entry`` as run ``name`` (none: only rewrite) to ``out`` (JSON) and
    ``markdown(results)`` beside it (``.md``), over the runs another lane may have written to ``out`` since
    this one started; the merged results."""
    from genembed._files import (
        atomic_write_text as atomic_write,  # a unique temp file: two lanes may write `out` at once
    )

    with locked(out):
        if out.is_file():
            results["runs"] = json.loads(out.read_text())["runs"]
        if name is not None:
            results["runs"][name] = entry
        atomic_write(out, json.dumps(results, indent=1))
        atomic_write(out.with_suffix(".md"), markdown(results))
    return results

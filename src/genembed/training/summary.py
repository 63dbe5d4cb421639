"""The end of a run: the trained weights (file by file, atomically), the metrics plot and ``summary.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._files import atomic_write_files, atomic_write_text
from .config import RunConfig
from .lora import save_trained, trained_settings
from .metrics import MetricsLog, plot_metrics

__all__ = ["finish_run"]


def finish_run(
    out: Path,
    cfg: RunConfig,
    model: Any,
    tokenizer: Any,
    metrics: MetricsLog,
    data: list[dict[str, Any]],
    world: int,
    seconds: float,
    precision: str,
    backbone: Any = None,
) -> None:
    """Write the trained weights (file by file, atomically) with, for an adapter trained on ``backbone``,
    the settings it was trained with (``genembed.json``), the plot and a summary."""
    settings = trained_settings(cfg, backbone, out) if backbone is not None else None
    with atomic_write_files(out) as tmp:
        save_trained(model, tokenizer, tmp, settings=settings)
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

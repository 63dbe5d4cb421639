"""Per-step training metrics: one JSON line per optimizer step, and a PNG plot of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._files import DamagedFileError, atomic_write, atomic_write_text
from .losses.registry import term_labels

__all__ = ["MetricsLog", "plot_metrics"]


class MetricsLog:
    """Append-only JSONL of step records; on resume, records after the checkpoint's step are dropped."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()

    def read(self) -> list[dict[str, Any]]:
        """The records; a torn last line (the process was killed while appending it) is left out.

        Raises:
            DamagedFileError: any other line is not a JSON record.
        """
        if not self.path.is_file():
            return []
        lines = [line for line in self.path.read_text(encoding="utf-8", errors="replace").split("\n") if line.strip()]
        records = []
        for number, line in enumerate(lines, start=1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if number == len(lines):  # only the last line can be torn by a crash
                    break
                raise DamagedFileError(
                    f"{self.path}:{number} is not a JSON record ({exc}): the file is damaged. Delete the line "
                    "(or the file, losing the metrics of earlier steps) and rerun with --resume."
                ) from exc
        return records

    def truncate(self, last_step: int) -> None:
        """Keep only records with ``step <= last_step`` (written atomically)."""
        kept = [r for r in self.read() if r["step"] <= last_step]
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))


def plot_metrics(records: list[dict[str, Any]], path: str | Path) -> Path | None:
    """Plot loss terms (the teacher's included), the stepwise losses L_1..L_K (of the contrastive steps) and
    the learning rate.

    Returns the path, or None without matplotlib or records.
    """
    if not records:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    steps = [r["step"] for r in records]
    step_keys = sorted((k for k in records[0] if k.startswith("L_")), key=lambda k: int(k[2:]))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    weighted = term_labels()  # the registered terms, e.g. the distillation KL
    has_others = any(r.get(key) for r in records for key in ("gen", *weighted))
    terms = {"loss": "total", "rep": "representation", "gen": "generative", "reg": "regulariser", **weighted}
    for key, label in terms.items():
        if key == "rep" and not has_others:  # then the total is the representation loss
            continue
        if any(r.get(key) for r in records):
            values = [r.get(key, 0.0) for r in records]
            line = axes[0].plot(steps, values, alpha=0.35, linewidth=1)[0]
            axes[0].plot(steps, _smooth(values), color=line.get_color(), label=f"{label} (smoothed)")
    axes[0].set_title("loss")
    cmap = plt.get_cmap("viridis")
    contrastive = [r for r in records if r.get("objective", "contrastive") == "contrastive"]  # single steps have no L_k
    for i, key in enumerate(step_keys):
        axes[1].plot(
            [r["step"] for r in contrastive],
            [r[key] for r in contrastive],
            color=cmap(i / max(1, len(step_keys) - 1)),
            label=key,
        )
    axes[1].set_title("stepwise InfoNCE L_k")
    axes[2].plot(steps, [r["lr"] for r in records])
    axes[2].set_title("learning rate")
    for ax in axes:
        ax.set_xlabel("step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    plt.close(fig)
    return path


def _smooth(values: list[float], weight: float = 0.8) -> list[float]:
    """Exponential moving average, as training dashboards draw noisy per-step losses."""
    out, last = [], values[0]
    for value in values:
        last = weight * last + (1 - weight) * value
        out.append(last)
    return out

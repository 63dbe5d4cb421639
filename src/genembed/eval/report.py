"""Write an :class:`EvalReport` as JSON, a markdown table and (for sweeps) a score-vs-K plot.

All files are written atomically (temp file + rename), so a crash never leaves a half-written report.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .._files import atomic_write_text
from .results import EvalReport

__all__ = ["markdown", "plot_scaling", "write_report"]


def write_report(report: EvalReport, out: str | Path, *, final: bool = True) -> list[Path]:
    """Write ``out`` (JSON); when ``final``, also ``out.md`` and, for sweeps, ``<out stem>_scaling.png``.

    Returns:
        The paths written.
    """
    out = Path(out)
    payload = report.to_dict() | {"complete": final}
    atomic_write_text(out, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    written = [out]
    if final:
        md = out.with_suffix(".md")
        atomic_write_text(md, markdown(report))
        written.append(md)
        if len(report.views) > 1:
            png = out.with_name(out.stem + "_scaling.png")
            plot_scaling(report, png)
            written.append(png)
    return written


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(report: EvalReport) -> str:
    """Tables: main scores (largest K), test-time scaling (every K), instruction following, re-ranking."""
    c = report.config
    lines = [f"# genembed eval: {c.get('encoder', '')}", ""]
    keys = ("method", "attention", "prompt_format", "max_length", "dtype", "limit")
    settings = [f"{k} {c[k]}" for k in keys if c.get(k) is not None]
    settings += [f"rerank top {c['rerank_top']}"] if c.get("rerank_top") else []
    weights = c.get("rerank_weights")
    settings += [f"reranked by {'the base weights' if weights == 'none' else weights}"] if weights else []
    settings += [f"k-means starts {c['cluster_starts']}"] if c.get("cluster_starts", 1) > 1 else []
    settings += [f"commit {c['git_commit'][:12]}"] if c.get("git_commit") else []
    lines += [" · ".join(settings), ""]
    last = report.views[-1]
    head = "score" if last is None else f"score (K={last})"
    lines += [_row(["task", "type", "metric", head, "time (s)", "encoded", "cached"])]
    lines += [_row(["---", "---", "---", "---:", "---:", "---:", "---:"])]
    for t in report.tasks:
        cells = [t.name, t.type, t.metric, _fmt(t.scores[-1]), f"{t.seconds:.1f}"]
        lines.append(_row([*cells, str(t.encoding["encoded"]), str(t.encoding["cached"])]))
    total = f"{report.seconds:.1f}"
    lines += [_row(["**mean**", "", "", f"**{_fmt(report.mean_scores()[-1])}**", total, "", ""]), ""]
    if len(report.views) > 1:
        lines += _scaling_table(report)
    lines += _instruct_table(report) + _rerank_table(report)
    warnings = [f"- {t.name}: {w}" for t in report.tasks for w in t.info.get("warnings", [])]
    if warnings:
        lines += ["## Warnings", "", *warnings, ""]
    return "\n".join(lines)


def _scaling_table(report: EvalReport) -> list[str]:
    ks = [f"K={k}" for k in report.views]
    lines = ["## Test-time scaling (score vs number of soft tokens K)", ""]
    lines += [_row(["task", *ks, "best K"]), _row(["---", *["---:"] * len(ks), "---:"])]
    for name, scores in [(t.name, t.scores) for t in report.tasks] + [("**mean**", report.mean_scores())]:
        finite = [(s, k) for s, k in zip(scores, report.views, strict=True) if not math.isnan(s)]
        best = str(max(finite)[1]) if finite else "n/a"
        lines.append(_row([name, *[_fmt(s) for s in scores], best]))
    return [*lines, ""]


def _instruct_table(report: EvalReport) -> list[str]:
    tasks = [t for t in report.tasks if t.type == "instruct"]
    if not tasks:
        return []
    lines = ["## Instruction following (V-measure per label axis)", ""]
    lines += [
        "own: embedded with the axis' instruction · other: mean over the other axes' instructions · "
        "task: with the task's `instruction` field · gap = own - other",
        "",
    ]
    lines += [_row(["task", "axis", "own", "other", "task", "gap"]), _row(["---", "---", *["---:"] * 4])]
    for t in tasks:
        d = t.details[-1]
        for axis in t.info["axes"]:
            others = [v for k, v in d.items() if k.startswith(f"cross:{axis}<-")]
            other = sum(others) / len(others) if others else None
            gap = _fmt(d[f"axis:{axis}"] - other) if other is not None else "n/a"
            lines.append(_row([t.name, axis, _fmt(d[f"axis:{axis}"]), _fmt(other), _fmt(d[f"task:{axis}"]), gap]))
        if "gap" in d:
            lines.append(_row([t.name, "**mean**", _fmt(t.scores[-1]), _fmt(d["cross_mean"]), "", _fmt(d["gap"])]))
    return [*lines, ""]


def _rerank_table(report: EvalReport) -> list[str]:
    tasks = [t for t in report.tasks if "first_stage" in t.details[-1]]
    if not tasks:
        return []
    lines = ["## Re-ranking (nDCG@10)", "", _row(["task", "first stage", "re-ranked"]), _row(["---", "---:", "---:"])]
    lines += [_row([t.name, _fmt(t.details[-1]["first_stage"]), _fmt(t.scores[-1])]) for t in tasks]
    return [*lines, ""]


def plot_scaling(report: EvalReport, path: str | Path) -> None:
    """PNG of score vs K, one line per task plus the mean (dashed)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [int(k) for k in report.views if k is not None]
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    for t in report.tasks:
        ax.plot(ks, t.scores, marker="o", label=t.name)
    ax.plot(ks, report.mean_scores(), color="black", linestyle="--", linewidth=2, label="mean")
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("soft tokens K")
    ax.set_ylabel("score (x100)")
    ax.set_title(f"Test-time scaling: {report.config.get('encoder', '')}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_write_text(path, buffer.getvalue())

"""The teacher campaign's learning curve (issue 38): dev mean against training examples seen and CPU hours.

Each chain is a sequence of stage run folders, each continuing the one before (one chain per objective or
recipe compared). A stage folder holds ``metrics.jsonl`` (written by training: each step's ``seconds``,
its ``objective`` and the rows it took per file), ``fast_dev.json`` (``experiments/fast_dev.py``) and, once
scored on the full protocol, ``eval_full.json`` (``genembed eval ../shared/data/dev --out``). The point
before any stage is the shipped adapter's, given with ``--start`` (a folder holding those two reports).

    python experiments/learning_curve.py --start runs/default-scores \\
        --chain kl+regression=runs/teacher-stage-1,runs/teacher-stage-2,runs/teacher-stage-3 \\
        --reference all-MiniLM-L6-v2=benchmarks/results/minilm_baseline.json \\
        --out experiments/results/learning_curve.png

A ``--reference NAME=REPORT.json`` (a dev report of another model, e.g. ``benchmarks/minilm_baseline.py``'s)
draws that model's full dev mean as a horizontal line: the target. Writes the PNG and, beside it, the points
as JSON. Examples seen count a contrastive row (a query with
its documents) or a single text as one; CPU hours are the summed step ``seconds``. Where a stage folder also
holds ``cluster20.json`` (its clustering tasks scored over 20 k-means starts, ``genembed eval ... --cluster-starts
20``), a third line draws the fast mean with those tasks' 20-start scores: the measure the ship decisions use.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _figures import save, two_panels

PROTOCOLS = {"fast": "fast dev", "fast20": "fast dev, clustering over 20 k-means starts", "full": "full dev"}


def stage_point(folder: Path) -> dict:
    """A stage's examples seen, step hours, and dev means (fast; full at K=5 when scored)."""
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    by_objective: dict[str, int] = {}
    for record in records:
        kind = record.get("objective", "contrastive")
        by_objective[kind] = by_objective.get(kind, 0) + sum(record.get("rows", {}).values())
    point = {
        "stage": str(folder),
        "examples": sum(by_objective.values()),
        "examples_by_objective": by_objective,
        "hours": sum(record["seconds"] for record in records) / 3600,
    }
    return point | scores(folder)


def k5_scores(report: dict) -> dict[str, float]:
    """Each task's score at K=5 in a ``genembed eval`` report (its parsed JSON)."""
    return {task["name"]: task["scores"]["K=5"] for task in report["tasks"]}


def scores(folder: Path) -> dict:
    """The fast mean (``fast_dev.json``), the fast mean with the 20-start clustering scores of ``cluster20.json``
    in place of the one-start ones, and the full mean at K=5 (``eval_full.json``) found in ``folder``."""
    out = {}
    if (folder / "fast_dev.json").is_file():
        report = json.loads((folder / "fast_dev.json").read_text())
        out["fast"] = report["fast_mean"]
        if (folder / "cluster20.json").is_file():
            fast = k5_scores(report)
            twenty = k5_scores(json.loads((folder / "cluster20.json").read_text()))
            if not set(twenty) <= set(fast):
                extra = sorted(set(twenty) - set(fast))
                raise SystemExit(f"{folder / 'cluster20.json'} scores tasks the fast protocol lacks: {extra}")
            out["fast20"] = round(sum((fast | twenty).values()) / len(fast), 2)
    if (folder / "eval_full.json").is_file():
        full = k5_scores(json.loads((folder / "eval_full.json").read_text()))
        out["full"] = round(sum(full.values()) / len(full), 2)
    return out


def chain_points(start: Path | None, stages: list[Path]) -> list[dict]:
    """Cumulative points along a chain: examples and hours add up from stage to stage."""
    points = [{"stage": "start", "examples": 0, "hours": 0.0} | (scores(start) if start else {})]
    for folder in stages:
        point = stage_point(folder)
        point["examples"] += points[-1]["examples"]
        point["hours"] += points[-1]["hours"]
        points.append(point)
    return points


def reference_mean(report: Path) -> float:
    """The dev mean of a harness report (``mean.score``), e.g. all-MiniLM-L6-v2's from ``minilm_baseline.py``."""
    data = json.loads(report.read_text())
    if "score" not in data.get("mean", {}):
        raise SystemExit(f"{report} is not a dev report: it has no mean.score")
    return round(data["mean"]["score"], 2)


def plot(
    chains: dict[str, list[dict]],
    out: Path,
    references: dict[str, float] | None = None,
    shipped: set[str] | None = None,
) -> None:
    """One colour per chain, a line style per protocol; with ``shipped`` (stage folders), the points of the
    other stages are drawn hollow."""
    fig, axes = two_panels(12, 4.5)
    for ax, x, label in ((axes[0], "examples", "training examples seen"), (axes[1], "hours", "CPU hours (step time)")):
        for index, (name, points) in enumerate(chains.items()):
            for key, style in (("fast", "-o"), ("fast20", "-.^"), ("full", "--s")):
                shown = [p for p in points if key in p]
                if shown:
                    xs, ys = [p[x] for p in shown], [p[key] for p in shown]
                    ax.plot(xs, ys, style, color=f"C{index}", label=f"{name} ({PROTOCOLS[key]})")
                    hollow = [p for p in shown if shipped is not None and p["stage"] not in shipped | {"start"}]
                    if hollow:
                        ax.plot([p[x] for p in hollow], [p[key] for p in hollow], style[-1], color=f"C{index}",
                                markerfacecolor="white")  # fmt: skip
        if shipped is not None:
            ax.plot([], [], "o", color="grey", markerfacecolor="white", label="hollow: a stage not shipped")
        for i, (name, mean) in enumerate((references or {}).items()):
            ax.axhline(mean, color=f"C{(7 + i) % 10}", linestyle=":", label=f"{name} {mean:.2f} (full dev)")
        ax.set_xlabel(label)
        ax.set_ylabel("dev mean at K=5")
    save(fig, axes, out, legend_below=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chain", action="append", required=True, help="NAME=stage1,stage2,... (repeatable)")
    parser.add_argument("--reference", action="append", default=[], help="NAME=REPORT.json: a line at its dev mean")
    parser.add_argument("--start", type=Path, default=None, help="folder with the shipped adapter's reports")
    parser.add_argument("--out", type=Path, required=True, help="PNG; the points go beside it as .json")
    parser.add_argument("--shipped", default=None, help="stage1,stage2,...: the stages shipped (the others hollow)")
    args = parser.parse_args()
    chains = {}
    for item in args.chain:
        name, sep, folders = item.partition("=")
        if not sep or not folders:
            raise SystemExit(f"--chain {item!r} must look like NAME=stage1,stage2")
        chains[name] = chain_points(args.start, [Path(f) for f in folders.split(",")])
    references = {}
    for item in args.reference:
        name, sep, report = item.partition("=")
        if not sep or not report:
            raise SystemExit(f"--reference {item!r} must look like NAME=REPORT.json")
        references[name] = reference_mean(Path(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    shipped = None if args.shipped is None else {str(Path(f)) for f in args.shipped.split(",")}
    plot(chains, args.out, references, shipped)
    args.out.with_suffix(".json").write_text(json.dumps(chains, indent=2) + "\n")
    print(f"{args.out} ({', '.join(f'{n}: {len(p) - 1} stages' for n, p in chains.items())})")


if __name__ == "__main__":
    main()

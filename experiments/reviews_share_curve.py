"""mrcr-dev's two axes against the share of review batches in training (issue 38's fallback for the sentiment
axis): does training on ``reviews.jsonl`` more often raise the sentiment axis, and what does it cost the domain?

Each point is one finished run: its share is counted from its ``metrics.jsonl`` (the contrastive steps whose
rows came from ``reviews.jsonl``, over all contrastive steps), its axes are read from a 20-k-means-start
report at K=5 (the V-measure of each axis's labels under that axis's own instruction). Two families:

- lever runs (campaign 2): 40 contrastive steps of 16 queries from the adapter shipped then, scored on the full
  dev protocol (``experiments/results/lever_ablation_starts20.json``, row ``axes``);
- teacher stages (campaign 3): 50-55 contrastive and as many single-text steps from the adapter shipped then,
  scored on the fast protocol (``teacher-stages/stage-N/cluster20.json``).

    python experiments/reviews_share_curve.py --out experiments/results/reviews_share_curve.png

Writes the PNG and the points beside it as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _figures import save, two_panels

RESULTS = Path(__file__).resolve().parent / "results"
LEVER_ROWS = ("control", "control_seed2", "reviews_axes", "reviews_heavy")
TEACHER_STAGES = (1, 2, 5, 6)
TARGETS = {"sentiment": 20.0, "domain": 55.0}  # the targets at K=5 over 20 k-means starts


def review_share(metrics: Path) -> float:
    """The fraction of a run's contrastive steps whose rows came from reviews.jsonl."""
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    contrastive = [r for r in records if r.get("objective", "contrastive") == "contrastive"]
    reviews = [r for r in contrastive if any(name.startswith("reviews.jsonl") for name in r.get("rows", {}))]
    return len(reviews) / len(contrastive)


def lever_points() -> list[dict]:
    runs = json.loads((RESULTS / "lever_ablation_starts20.json").read_text())["runs"]
    points = []
    for name in LEVER_ROWS:
        axes = runs[name]["axes"]["mrcr-dev"]
        share = review_share(RESULTS / "levers" / name / "metrics.jsonl")
        points.append({"run": name, "share": share} | {axis: axes[axis]["own"] for axis in TARGETS})
    return points


def stage_points() -> list[dict]:
    points = []
    for stage in TEACHER_STAGES:
        folder = RESULTS / "teacher-stages" / f"stage-{stage}"
        report = json.loads((folder / "cluster20.json").read_text())
        (mrcr,) = [task for task in report["tasks"] if task["name"] == "mrcr-dev"]
        detail = mrcr["details"]["K=5"]
        share = review_share(folder / "metrics.jsonl")
        points.append({"run": f"stage {stage}", "share": share} | {axis: detail[f"axis:{axis}"] for axis in TARGETS})
    return points


def plot(families: dict[str, list[dict]], out: Path) -> None:
    fig, axes = two_panels(11, 4.2)
    for ax, axis in zip(axes, TARGETS, strict=True):
        for index, (family, points) in enumerate(families.items()):
            points = sorted(points, key=lambda p: p["share"])
            ax.plot([p["share"] for p in points], [p[axis] for p in points], "o", color=f"C{index}", label=family)
            for p in points:
                ax.annotate(p["run"], (p["share"], p[axis]), fontsize=7, xytext=(4, 3), textcoords="offset points")
        ax.axhline(TARGETS[axis], color="C3", linestyle=":", label=f"target {TARGETS[axis]:.0f}")
        ax.set_xlabel("share of contrastive steps on reviews.jsonl")
        ax.set_ylabel(f"mrcr-dev {axis} axis (V-measure, K=5, 20 starts)")
    save(fig, axes, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="PNG; the points go beside it as .json")
    args = parser.parse_args()
    families = {
        "lever runs (40 steps, full dev)": lever_points(),
        "teacher stages (100-110 steps, fast dev)": stage_points(),
    }
    plot(families, args.out)
    args.out.with_suffix(".json").write_text(json.dumps(families, indent=2) + "\n")
    for family, points in families.items():
        for p in points:
            axes = "  ".join(f"{axis} {p[axis]:5.2f}" for axis in TARGETS)
            print(f"{family:40s} {p['run']:14s} share {p['share']:.2f}  {axes}")


if __name__ == "__main__":
    main()

"""Is an axis in the embeddings at all, and does the instruction choose it? Probes of an instruct task.

``genembed eval`` scores an instruct task (e.g. mrcr-dev: sentiment and domain) by k-means from one
seed: an axis scores well only if it is the *dominant* structure of the embeddings made with its
instruction. For each instruction and each label axis this script reports:

- the 5-fold cross-validated accuracy of a logistic regression (can the axis be read off at all?
  An axis that probes well but clusters badly is present but drowned out by another);
- the V-measure of k-means over ``--seeds`` starts, mean and standard deviation (when two
  structures are about equally strong, k-means picks one per seed, and one seed can look like
  instruction following that is not there).

    python experiments/instruct_axis_probe.py ../shared/data/dev/mrcr-dev                        # the default
    python experiments/instruct_axis_probe.py ../shared/data/dev/mrcr-dev --adapter runs/RUN --center

Embeddings come from (and go to) the evaluation cache, so after ``genembed eval`` this takes seconds.
Writes ``experiments/results/instruct_axis_probe[-RUN].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import _benchmarks  # noqa: F401  (puts benchmarks/ on the import path)
import numpy as np
from _run_info import REPO, git_commit


def probe(x: np.ndarray, labels: list[str], folds: int = 5, seed: int = 0) -> float:
    """Mean cross-validated accuracy of a logistic regression reading ``labels`` off ``x``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return float(cross_val_score(LogisticRegression(max_iter=1000), x, np.asarray(labels), cv=cv).mean())


def kmeans_spread(x: np.ndarray, labels: list[str], seeds: int) -> tuple[float, float]:
    """Mean and standard deviation of ``genembed eval``'s k-means V-measure over seeds 0..seeds-1."""
    from genembed.eval.metrics import cluster_v_measure

    scores = [cluster_v_measure(x, labels, seed=s) for s in range(seeds)]
    return float(np.mean(scores)), float(np.std(scores))


def markdown(report: dict[str, Any]) -> str:
    steps = report["config"]["steps"]
    head = "| instruction | axis | " + " | ".join(f"K={k}" for k in steps) + " |"
    rule = "|---|---|" + "---:|" * len(steps)
    lines = [
        f"# Probes of {report['task']} ({report['config']['model']})",
        "",
        "5-fold accuracy of a logistic regression per label axis, on embeddings made with each axis' instruction:",
        "",
        head,
        rule,
    ]
    for row in report["probes"]:
        lines.append(
            f"| {row['instruction']} | {row['axis']} | " + " | ".join(f"{a:.3f}" for a in row["accuracy"]) + " |"
        )
    seeds = report["config"].get("seeds", 0)
    if seeds:
        lines += [
            "",
            f"k-means V-measure over {seeds} seeds (mean ± std), as `genembed eval` clusters:",
            "",
            head,
            rule,
        ]
        for row in report["probes"]:
            cells = " | ".join(f"{m:.2f} ± {s:.2f}" for m, s in zip(row["kmeans_mean"], row["kmeans_std"], strict=True))
            lines.append(f"| {row['instruction']} | {row['axis']} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", type=Path, help="an instruct task folder")
    parser.add_argument("--adapter", default=None, help="adapter folder (default: the shipped one)")
    parser.add_argument("--center", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--steps", default="1,5,10,20")
    parser.add_argument("--seeds", type=int, default=20, help="k-means seeds (0: probes only)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    import genembed
    from genembed._files import atomic_write_text as atomic_write
    from genembed.eval import EmbeddingCache, GenembedEncoder, load_task
    from genembed.eval.encoding import TextEmbedder

    torch.set_num_threads(args.threads)
    task = load_task(args.task)
    if task.type != "instruct":
        raise SystemExit(f"{args.task}: a {task.type} task; probes need an instruct task (label axes)")
    steps = [int(k) for k in args.steps.split(",")]
    model = genembed.load(adapter=args.adapter, dtype="float32", center=args.center)
    encoder = GenembedEncoder(model, method="gircse", steps=steps)
    embed = TextEmbedder(encoder, EmbeddingCache())
    probes = []
    for inst_axis, instruction in task.instructions.items():
        x = embed(task.data.texts, instruction, f"{task.name} {inst_axis}")
        for axis in task.instructions:
            labels = task.data.labels[axis]
            row = {"instruction": inst_axis, "axis": axis}
            row["accuracy"] = [probe(x[:, v], labels) for v in range(x.shape[1])]
            if args.seeds:
                spread = [kmeans_spread(x[:, v], labels, args.seeds) for v in range(x.shape[1])]
                row["kmeans_mean"], row["kmeans_std"] = [m for m, _ in spread], [s for _, s in spread]
            probes.append(row)
            print(inst_axis, axis, " ".join(f"{a:.3f}" for a in row["accuracy"]))
    name = "default" if args.adapter is None else Path(args.adapter).name
    report = {
        "task": task.name,
        "config": {
            "model": encoder.name,
            "steps": steps,
            "center": model.center,
            "adapter": args.adapter,
            "seeds": args.seeds,
        },
        "commit": git_commit(),
        "probes": probes,
    }
    out = (
        args.out
        or REPO / "experiments" / "results" / f"instruct_axis_probe{'' if args.adapter is None else '-' + name}.json"
    )
    atomic_write(out, json.dumps(report, indent=1) + "\n")
    atomic_write(out.with_suffix(".md"), markdown(report))
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()

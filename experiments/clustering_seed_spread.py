"""How much of a clustering score is the luck of one k-means start?

``genembed eval`` scores clustering and instruct tasks with one ``MiniBatchKMeans(n_init=1,
random_state=42)`` run, as the reference implementation does. This script re-scores the same
embeddings (the default model at every K, and all-MiniLM-L6-v2) with seeds 0..N-1 and reports, per
task and K, the seed-42 score beside the mean, standard deviation and range over the seeds. It
tells whether a difference between two K (or two models) on trec or mrcr is larger than the
k-means noise.

Run (from the embedding cache a few minutes on one thread; texts missing from the cache are
encoded):

    .venv/bin/python experiments/clustering_seed_spread.py --seeds 20 \\
        --out experiments/results/clustering_seed_spread.json

Writes the JSON (config, every score), a markdown table and a plot (``.png``) beside it.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import _benchmarks  # noqa: F401  (puts benchmarks/ on the import path)
import numpy as np
from _run_info import git_commit
from minilm_baseline import minilm_folder

REPO = Path(__file__).resolve().parents[1]
CLUSTERED = ("clustering", "instruct")


def seed_scores(task: Any, embed: Any, seeds: list[int]) -> np.ndarray:
    """``(len(seeds), n_views)`` V-measures of one task, scored as ``genembed eval`` scores it."""
    from genembed.eval.metrics import cluster_v_measure

    data = task.data
    if task.type == "clustering":
        sets = [(embed(data.texts, task.instruction, task.name), data.labels)]
    else:  # instruct: the mean over axes of each axis clustered from its own instruction's embeddings
        axes = task.instructions
        sets = [(embed(data.texts, axes[a], f"{task.name} {a}"), data.labels[a]) for a in axes]
    n_views = sets[0][0].shape[1]
    return np.array(
        [
            [np.mean([cluster_v_measure(x[:, v], labels, seed=s) for x, labels in sets]) for v in range(n_views)]
            for s in seeds
        ]
    )


def summarise(scores: np.ndarray, official: np.ndarray) -> list[dict[str, float]]:
    """Per view: the seed-42 score and mean / std / min / max over the seeds."""
    return [
        {
            "seed42": float(official[v]),
            "mean": float(scores[:, v].mean()),
            "std": float(scores[:, v].std(ddof=1)),
            "min": float(scores[:, v].min()),
            "max": float(scores[:, v].max()),
        }
        for v in range(scores.shape[1])
    ]


def restated_average(path: Path, spread: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per view of a ``genembed eval`` report: its task average, and the same average with each
    clustered task's seed-42 score replaced by its mean over seeds."""
    report = json.loads(path.read_text())
    out: dict[str, dict[str, float]] = {}
    for view in report["tasks"][0]["scores"]:
        official, restated = [], []
        for task in report["tasks"]:
            official.append(task["scores"][view])
            r = spread.get(task["name"])
            if r is None:
                restated.append(official[-1])
                continue
            s = r["summary"][r["views"].index(view)]
            if abs(s["seed42"] - official[-1]) > 0.01:  # not the same embeddings (centering, adapter, K)
                raise SystemExit(
                    f"{path}: {task['name']} {view} scores {official[-1]:.2f} but these embeddings give "
                    f"{s['seed42']:.2f} at seed 42; pass the report of the same model and settings"
                )
            restated.append(s["mean"])
        out[view] = {
            "official": float(np.mean(official)),
            "seed_mean": float(np.mean(restated)),
            "tasks": len(official),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*", type=Path, default=[REPO.parent / "shared" / "data" / "dev"])
    parser.add_argument("--adapter", default=None, help="adapter folder (default: the shipped adapter)")
    parser.add_argument("--steps", default="1,3,5,10,20")
    parser.add_argument(
        "--center",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="per-instruction centering (default: as genembed.load, on for the shipped adapter only); "
        "match the eval report given in --reports",
    )
    parser.add_argument("--seeds", type=int, default=20, help="k-means seeds 0..N-1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--reports",
        type=Path,
        nargs=2,
        default=[REPO / "benchmarks" / "results" / f for f in ("eval_default.json", "minilm_baseline.json")],
        metavar=("DEFAULT", "MINILM"),
        help="genembed eval reports of the two models on all tasks, to restate their averages with seed means",
    )
    parser.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "clustering_seed_spread.json")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error("--seeds must be at least 2 (a spread needs two starts)")

    import torch

    import genembed
    from genembed._files import atomic_write_text as atomic_write
    from genembed.eval import EmbeddingCache, GenembedEncoder, SentenceTransformerEncoder, find_task_dirs, load_task
    from genembed.eval.encoding import TextEmbedder

    torch.set_num_threads(args.threads)
    tasks = [t for t in (load_task(p) for p in find_task_dirs(list(args.tasks))) if t.type in CLUSTERED]
    if not tasks:
        raise SystemExit(f"no clustering or instruct task under {', '.join(map(str, args.tasks))}")
    seeds = list(range(args.seeds))
    cache = EmbeddingCache()
    model = genembed.load(adapter=args.adapter, dtype="float32", center=args.center)
    default = GenembedEncoder(model, method="gircse", steps=args.steps)
    minilm = SentenceTransformerEncoder.from_path(str(minilm_folder()), name="all-MiniLM-L6-v2")
    label = "genembed default" if args.adapter is None else f"genembed {Path(args.adapter).name}"
    models = {
        label: (TextEmbedder(default, cache), [f"K={k}" for k in default.steps]),
        "all-MiniLM-L6-v2": (TextEmbedder(minilm, cache), ["single"]),  # the views of its eval report
    }
    results: dict[str, dict[str, Any]] = {}
    for name, (embed, views) in models.items():
        for task in tasks:
            scores = seed_scores(task, embed, [*seeds, 42])  # one embedding lookup; the last row is eval's seed
            results.setdefault(name, {})[task.name] = {
                "views": views,
                "summary": summarise(scores[:-1], scores[-1]),
                "scores": scores[:-1].tolist(),
            }
            spread = " ".join(f"{s['mean']:.2f}±{s['std']:.2f}" for s in results[name][task.name]["summary"])
            print(name, task.name, spread)
    averages = {name: restated_average(path, results[name]) for name, path in zip(models, args.reports, strict=True)}
    report = {
        "config": {"seeds": seeds, "steps": list(default.steps), "encoder": default.name, "adapter": model.adapter},
        "commit": git_commit(),
        "results": results,
        "averages": averages,
    }
    atomic_write(args.out, json.dumps(report, indent=1) + "\n")
    atomic_write(args.out.with_suffix(".md"), markdown(report))
    plot(report, args.out.with_suffix(".png"))
    print(f"-> {args.out}")


def markdown(report: dict[str, Any]) -> str:
    n = len(report["config"]["seeds"])
    lines = [
        "# Clustering scores over k-means seeds",
        "",
        f"`genembed eval` uses seed 42; mean ± std (min-max) over seeds 0..{n - 1}. Commit {report['commit']}.",
        "",
        "| model | task | view | seed 42 | mean ± std | min-max |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for name, by_task in report["results"].items():
        for task, r in by_task.items():
            for view, s in zip(r["views"], r["summary"], strict=True):
                lines.append(
                    f"| {name} | {task} | {view} | {s['seed42']:.2f} | {s['mean']:.2f} ± {s['std']:.2f} "
                    f"| {s['min']:.2f}-{s['max']:.2f} |"
                )
    lines += [
        "",
        "## Task averages, as reported (seed 42) and with clustered tasks at their seed mean",
        "",
        "| model | view | tasks | seed 42 | seed mean |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for name, by_view in report["averages"].items():
        for view, a in by_view.items():
            lines.append(f"| {name} | {view} | {a['tasks']} | {a['official']:.2f} | {a['seed_mean']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from genembed._files import atomic_write_text as atomic_write

    steps = report["config"]["steps"]
    names = list(report["results"])
    tasks = list(report["results"][names[0]])
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for name in names:
            summary = report["results"][name][task]["summary"]
            mean = np.array([s["mean"] for s in summary])
            std = np.array([s["std"] for s in summary])
            seed42 = [s["seed42"] for s in summary]
            if len(summary) == len(steps):
                ax.errorbar(steps, mean, yerr=std, marker="o", capsize=3, label=f"{name}: mean ± std")
                ax.plot(steps, seed42, "x--", label=f"{name}: seed 42")
            else:
                ax.axhspan(mean[0] - std[0], mean[0] + std[0], alpha=0.2, color="grey")
                ax.axhline(mean[0], color="grey", label=f"{name}: mean ± std")
                ax.axhline(seed42[0], color="grey", ls=":", label=f"{name}: seed 42")
        ax.set_xscale("log")
        ax.set_xticks(steps, [str(k) for k in steps])
        ax.set_xlabel("soft tokens K")
        ax.set_ylabel("V-measure")
        ax.set_title(task)
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    atomic_write(path, buffer.getvalue())


if __name__ == "__main__":
    main()

"""Does instruction following carry over to a wording the model was not trained on?

Scores one instruct task (e.g. mrcr-dev: sentiment and domain) under several sets of instruction
wordings: the task's own (never trained on), and wordings given in a JSON file, e.g. some of
``reviews.jsonl``'s pool that a run trained on and some it held back. Each set is one
``genembed eval`` of a copy of the task whose ``instructions`` are replaced; the texts, labels and
metric are the task's. Per set it reports each axis under its own instruction and under the other
one (k-means from ``genembed eval``'s seed, and the mean and spread over ``--seeds`` seeds, since one
seed can show a switch that is not there).

    python experiments/wording_transfer.py ../shared/data/dev/mrcr-dev experiments/wordings_reviews.json \\
        --adapter runs/v2-probe --steps 5,10 --center

Embeddings are cached (``genembed eval``'s cache), so a rerun or another seed count costs seconds.
Writes ``experiments/results/wording_transfer[-RUN].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import _benchmarks  # noqa: F401  (puts benchmarks/ on the import path)
import numpy as np
from _run_info import REPO, git_commit


def scores_by_wording(
    task: Path,
    wordings: dict[str, dict[str, str]],
    model: Any,
    *,
    steps: list[int],
    seeds: int,
    center: bool | None = None,
    cache: Any = None,
) -> dict[str, Any]:
    """Per wording set, per ``axis<-instruction`` cell, per K: V-measure at seed 42 and over ``seeds`` seeds."""
    from genembed.eval import GenembedEncoder, load_task
    from genembed.eval.encoding import TextEmbedder
    from genembed.eval.metrics import cluster_v_measure

    encoder = GenembedEncoder(model, steps=",".join(map(str, steps)), center=center)
    embed = TextEmbedder(encoder, cache, progress=False)
    out: dict[str, Any] = {}
    for name, instructions in wordings.items():
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / task.name
            shutil.copytree(task, copy)
            meta = json.loads((copy / "task.json").read_text(encoding="utf-8"))
            if set(instructions) != set(meta["instructions"]):
                have = sorted(meta["instructions"])
                raise SystemExit(f"wording set {name!r} names axes {sorted(instructions)}, the task has {have}")
            meta["instructions"] = instructions
            (copy / "task.json").write_text(json.dumps(meta), encoding="utf-8")
            loaded = load_task(copy)
            axes = list(instructions)
            views = {axis: embed(loaded.data.texts, text, f"{name}/{axis}") for axis, text in instructions.items()}
        rows: dict[str, Any] = {}
        for a in axes:
            for b in axes:
                cell = []
                for v, k in enumerate(steps):
                    x = views[b][:, v]
                    seed_scores = [cluster_v_measure(x, loaded.data.labels[a], seed=s) for s in range(seeds)]
                    cell.append(
                        {
                            "K": k,
                            "seed42": cluster_v_measure(x, loaded.data.labels[a]),
                            "mean": float(np.mean(seed_scores)) if seeds else None,
                            "std": float(np.std(seed_scores)) if seeds else None,
                        }
                    )
                rows[f"{a}<-{'own' if a == b else b}"] = cell
        out[name] = {"instructions": instructions, "scores": rows}
    return out


def markdown(report: dict[str, Any]) -> str:
    steps = report["config"]["steps"]
    lines = [
        f"# Instruction wordings on {report['task']} ({report['config']['adapter']})",
        "",
        "V-measure x100 of k-means on the texts embedded under each wording: seed 42 (as `genembed eval`), "
        f"and mean ± std over {report['config']['seeds']} seeds. `A<-own`: axis A under its own instruction; "
        "`A<-B`: axis A under B's instruction (a model that follows instructions scores low there).",
        "",
        "| wordings | axis <- instruction | " + " | ".join(f"K={k}" for k in steps) + " |",
        "|---|---|" + "---:|" * len(steps),
    ]
    for name, entry in report["wordings"].items():
        for cell_name, cells in entry["scores"].items():
            values = [
                f"{c['seed42']:.1f}" + ("" if c["mean"] is None else f" ({c['mean']:.1f} ± {c['std']:.1f})")
                for c in cells
            ]
            lines.append(f"| {name} | {cell_name} | " + " | ".join(values) + " |")
    lines += ["", "Wordings:", ""]
    for name, entry in report["wordings"].items():
        lines += [f"- {name}: " + "; ".join(f'{a}: "{t}"' for a, t in entry["instructions"].items())]
    lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", type=Path, help="an instruct task folder")
    parser.add_argument("wordings", type=Path, help='JSON: {"set name": {"axis": "instruction", ...}, ...}')
    parser.add_argument("--adapter", default=None, help="adapter folder (default: the shipped one)")
    parser.add_argument("--center", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--steps", default="5,10")
    parser.add_argument("--seeds", type=int, default=20, help="k-means seeds for the mean and spread")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    import genembed
    from genembed._files import atomic_write_json, atomic_write_text

    torch.set_num_threads(args.threads)
    wordings = json.loads(args.wordings.read_text(encoding="utf-8"))
    meta = json.loads((args.task / "task.json").read_text(encoding="utf-8"))
    wordings = {"task's own": meta["instructions"], **wordings}
    steps = [int(k) for k in args.steps.split(",")]

    from genembed.eval import EmbeddingCache

    report = {
        "task": meta["name"],
        "config": {"adapter": args.adapter or "default", "steps": steps, "seeds": args.seeds, "center": args.center},
        "wordings": scores_by_wording(
            args.task,
            wordings,
            genembed.load(adapter=args.adapter, dtype="float32"),
            steps=steps,
            seeds=args.seeds,
            center=args.center,
            cache=EmbeddingCache(),
        ),
        "commit": git_commit(),
        "command": "python experiments/wording_transfer.py "
        + " ".join(
            [str(args.task), str(args.wordings)]
            + (["--adapter", args.adapter] if args.adapter else [])
            + (["--center"] if args.center else ["--no-center"] if args.center is False else [])
            + ["--steps", args.steps, "--seeds", str(args.seeds)]
        ),
    }
    suffix = f"-{Path(args.adapter).name}" if args.adapter else ""
    out = args.out or REPO / "experiments" / "results" / f"wording_transfer{suffix}.json"
    atomic_write_json(out, report)
    atomic_write_text(out.with_suffix(".md"), markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()

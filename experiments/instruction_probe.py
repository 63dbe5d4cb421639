"""Does a model score better on the dev tasks with their instructions, or reading every text bare?

The teacher stages (issue 38) distill all-mpnet-base-v2's geometry on bare texts (``single.instruction:
none``), but the tasks embed their texts under an instruction. If a stage's bare scores are as good as or
better than its instructed ones, the distilled geometry has not reached the instructed prompts, which is
what ``single.instruction: row`` is for. Each task of the fast dev protocol (``fast_dev.py``: K=5,
scifact cut, one k-means start, centred as the default ships) is scored twice: as its folder says, and
with every instruction (``instruction``, ``doc_instruction``, each of ``instructions``) emptied.

    python experiments/instruction_probe.py --out experiments/results/instruction_probe_default.json
    python experiments/instruction_probe.py --adapter runs/teacher-stage-3 --tasks stsb-dev banking77-dev --out ...
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from fast_dev import DEV, K, fast_encoder, fast_tasks


def bare(task):
    """The task with every instruction emptied (its name marked, so reports keep the two apart)."""
    return dataclasses.replace(
        task,
        name=f"{task.name} (bare)",
        instruction="",
        doc_instruction="",
        instructions={axis: "" for axis in task.instructions},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", default=None, help="adapter folder (default: the shipped default)")
    parser.add_argument("--dev", type=Path, default=DEV)
    parser.add_argument("--tasks", nargs="*", default=None, help="task folder names (default: all eight)")
    parser.add_argument("--out", type=Path, required=True, help="JSON report (the harness's, plus the table)")
    args = parser.parse_args()

    from genembed.eval import EmbeddingCache, evaluate

    tasks = [task for task in fast_tasks(args.dev) if args.tasks is None or task.path.name in args.tasks]
    if args.tasks and len(tasks) != len(args.tasks):
        raise SystemExit(f"unknown task among {args.tasks}: {args.dev} has {[t.path.name for t in fast_tasks()]}")
    encoder = fast_encoder(args.adapter)
    config = {"protocol": "fast dev, instructed and bare", "K": K, "adapter": args.adapter or "default"}
    pairs = [t for task in tasks for t in (task, bare(task))]
    report = evaluate(encoder, pairs, cache=EmbeddingCache(), out=args.out, log=print, config=config)
    scores = {task.name: task.scores[0] for task in report.tasks}
    axes = {
        task.name: {k: round(v, 2) for k, v in task.details[0].items() if k.startswith("axis:")}
        for task in report.tasks
    }
    table = {
        task.name: {
            "instructed": round(scores[task.name], 2),
            "bare": round(scores[f"{task.name} (bare)"], 2),
            "bare_minus_instructed": round(scores[f"{task.name} (bare)"] - scores[task.name], 2),
        }
        | ({"axes_instructed": axes[task.name], "axes_bare": axes[f"{task.name} (bare)"]} if axes[task.name] else {})
        for task in tasks
    }
    result = json.loads(args.out.read_text()) | {"instructed_vs_bare": table}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, row in table.items():
        print(
            f"{name:16s} instructed {row['instructed']:6.2f}  bare {row['bare']:6.2f}  "
            f"({row['bare_minus_instructed']:+.2f})  {row.get('axes_instructed', '')} {row.get('axes_bare', '')}"
        )


if __name__ == "__main__":
    main()

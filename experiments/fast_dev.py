"""The fast dev protocol of the teacher stages (issue 38): a stage's go / no-go score, fixed before the campaign.

Definition:

- the eight task folders of ``../shared/data/dev``, scored by ``genembed eval``'s harness and metrics;
- the model at K=5 only (the shipped default's K; no sweep), its own method and prompt format, centred as
  the default ships (``--adapter`` folders too);
- ``scifact-dev`` cut to a fixed subset: its 100 queries, every document judged for them and the first
  300 of the never-cited documents (``load_task(limit=300)``; the full corpus has 1,611 long abstracts,
  the bulk of a full run's encoding); every other task in full, one k-means start;
- the fast score is the mean over the eight tasks (``fast_mean`` in the JSON);
- the model at ``dtype="auto"`` (bfloat16 on a CPU with native bf16, as the campaign's machine has; the
  report's config records it): compare stages scored at the same dtype.

A stage is judged on it (ship when it beats the shipped adapter by more than the seed spread), then scored
on the full dev protocol (``genembed eval ../shared/data/dev``, K=1/5/10) for the model card. How well
the fast mean tracks the full one is measured by scoring each stage both ways: ``--full REPORT.json`` (a
full report of the same model) adds the full mean at K=5 and each task's difference to the output.

    python experiments/fast_dev.py --adapter runs/teacher-stage-1 --out runs/teacher-stage-1/fast_dev.json
    python experiments/fast_dev.py --out runs/fast_dev_default.json --full benchmarks/results/eval_default.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEV = REPO.parent / "shared" / "data" / "dev"
K = 5
LIMITS = {"scifact-dev": 300}  # task folder -> load_task limit; the others load in full


def fast_tasks(dev: Path = DEV) -> list:
    """The protocol's tasks: every task folder under ``dev``, with the fixed subsets of :data:`LIMITS`."""
    from genembed.eval import find_task_dirs, load_task

    folders = find_task_dirs([dev])
    unknown = set(LIMITS) - {folder.name for folder in folders}
    if unknown:
        raise SystemExit(f"{dev} has no task folder {sorted(unknown)[0]!r} (the protocol cuts it)")
    return [load_task(folder, limit=LIMITS.get(folder.name)) for folder in folders]


def fast_encoder(adapter: str | None, *, dtype: str = "auto", batch_size: int = 32):
    """The protocol's encoder: the model (the shipped default, or ``adapter``) at K=5 with its own method,
    attention and prompt format, centred as the default ships (an adapter folder without stored centers
    would load uncentred)."""
    import genembed
    from genembed.eval import GenembedEncoder

    loaded = {"adapter": adapter, "center": True} if adapter else {}
    model = genembed.load(dtype=dtype, **loaded)
    return GenembedEncoder(
        model,
        method=model.method,
        steps=K,
        attention=model.attention,
        prompt_format=model.prompt_format,
        batch_size=batch_size,
    )


def compare(fast: dict, full: dict) -> dict:
    """The full report's K=5 scores beside the fast ones: its mean and each task's fast - full."""
    full_scores = {task["name"]: task["scores"][f"K={K}"] for task in full["tasks"]}
    deltas = {name: round(score - full_scores[name], 2) for name, score in fast.items() if name in full_scores}
    return {"full_mean": round(sum(full_scores.values()) / len(full_scores), 2), "fast_minus_full": deltas}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", default=None, help="adapter folder (default: the shipped default)")
    parser.add_argument("--dev", type=Path, default=DEV)
    parser.add_argument("--out", type=Path, required=True, help="JSON report (the harness's, plus fast_mean)")
    parser.add_argument("--full", type=Path, default=None, help="a full dev report of the same model to compare")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--dtype", default="auto", help="the model's dtype (auto: the protocol's; float32 to compare stored weights)"
    )
    args = parser.parse_args()

    from genembed.eval import EmbeddingCache, evaluate

    tasks = fast_tasks(args.dev)
    encoder = fast_encoder(args.adapter, dtype=args.dtype, batch_size=args.batch_size)
    config = {"protocol": "fast dev", "K": K, "limits": LIMITS, "adapter": args.adapter or "default"}
    if args.dtype != "auto":
        config["protocol"] = f"fast dev at {args.dtype} (not the protocol's dtype)"
    report = evaluate(encoder, tasks, cache=EmbeddingCache(), out=args.out, log=print, config=config)
    scores = {task.name: task.scores[0] for task in report.tasks}
    result = json.loads(args.out.read_text()) | {"fast_mean": round(sum(scores.values()) / len(scores), 2)}
    if args.full is not None:
        result |= compare(scores, json.loads(args.full.read_text()))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"fast mean {result['fast_mean']:.2f} over {len(scores)} tasks in {report.seconds:.0f}s -> {args.out}")


if __name__ == "__main__":
    main()

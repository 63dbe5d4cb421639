"""GIRCSE ablations at one data and compute budget: which part of the recipe buys what.

Five LoRA runs of the same recipe (``configs/gircse-smollm2.yaml``: same data order, batch, steps,
learning rate, temperature), differing only in the embedding method or the loss, as in the GIRCSE
paper's ablation table:

- ``mean``: single-pass mean pooling (causal, instruction excluded) trained with plain InfoNCE;
- ``last``: single-pass last-token (causal EOS) embedding trained with plain InfoNCE;
- ``final_only``: GIRCSE trained on the last step's loss only (no stepwise loss);
- ``no_reg``: GIRCSE with the stepwise loss but without the refinement regulariser;
- ``full``: GIRCSE with ICR (stepwise loss + regulariser).

Each run is then evaluated with its own method (GIRCSE at K = 1 and 5 from one encoding run) on
the given task folders. Runs and evaluations resume: a finished run is not retrained and the
embedding cache spares re-encoding, so an interrupted script continues where it stopped.

Run (one torch thread, so it can share the machine with a second job):

    OMP_NUM_THREADS=1 .venv/bin/python experiments/gircse_ablations.py --steps 30 --limit 200 \\
        --out experiments/results/gircse_ablations.json

Writes the JSON (per run: overrides, training seconds, final loss, task scores) and a markdown
table beside it (``.md``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import _benchmarks  # noqa: F401  (puts benchmarks/ on the import path)
from _ablation import load_trained, save_row, train_row
from _run_info import git_commit

REPO = Path(__file__).resolve().parents[1]
DEV = REPO.parent / "shared" / "data" / "dev"
VARIANTS: dict[str, tuple[list[str], dict]] = {
    "mean": (["embedding.method=mean"], {"method": "mean"}),
    "last": (["embedding.method=last"], {"method": "last"}),
    "final_only": (["loss.final_step_only=true"], {"method": "gircse", "steps": "1,5"}),
    "no_reg": (["loss.regularizer=false"], {"method": "gircse", "steps": "1,5"}),
    "full": ([], {"method": "gircse", "steps": "1,5"}),
}
DEFAULT_TASKS = ["sick-trial", "stsb-dev", "mrpc-dev", "trec-dev", "mrcr-dev"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "gircse-smollm2.yaml")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per run (the budget)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--tasks", nargs="*", type=Path, default=[DEV / name for name in DEFAULT_TASKS])
    parser.add_argument("--limit", type=int, default=200, help="at most N rows per data file (0: all rows)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "ablations")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra config override for every run, e.g. train.gradient_checkpointing=true to save memory",
    )
    parser.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "gircse_ablations.json")
    args = parser.parse_args()

    import torch

    from genembed.eval import EmbeddingCache, GenembedEncoder, evaluate

    torch.set_num_threads(args.threads)
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    results.setdefault("runs", {})
    results["info"] = {
        "git_commit": git_commit(),
        "threads": args.threads,
        "config": str(args.config),
        "steps": args.steps,
        "limit": args.limit,
    }
    for name in args.variants:
        overrides, eval_settings = VARIANTS[name]
        folder = args.runs / name
        common = [
            f"train.output_dir={folder}",
            f"train.max_steps={args.steps}",
            f"train.warmup_steps={args.warmup}",
            f"train.save_every={max(args.steps // 3, 1)}",
            f"train.threads={args.threads}",
            *args.set,
        ]
        entry = train_row(args.config, common + overrides)
        model = load_trained(args.config, folder)
        encoder = GenembedEncoder(model, **eval_settings)
        report = evaluate(
            encoder,
            args.tasks,
            limit=args.limit or None,
            cache=EmbeddingCache(),
            out=args.out.with_name(f"{args.out.stem}-{name}.json"),
            log=print,
        )
        entry["eval"] = {"views": report.views, "tasks": {t.name: t.scores for t in report.tasks}}
        entry["mean"] = report.mean_scores()
        results = save_row(args.out, results, name, entry, _markdown)  # another lane may be writing it too
    print(args.out.with_suffix(".md").read_text())


def _markdown(results: dict) -> str:
    runs = results["runs"]
    tasks = sorted({t for r in runs.values() for t in r["eval"]["tasks"]})
    lines = [
        "# GIRCSE ablations (same data, same steps)",
        "",
        f"{results['info']['steps']} steps each, evaluated on "
        + (f"at most {results['info']['limit']} rows per file; " if results["info"]["limit"] else "all rows; ")
        + "GIRCSE rows at K=5 (K=1 in brackets).",
        "",
        "| run | " + " | ".join(tasks) + " | mean | train (s) | final loss |",
        "| --- | " + " | ".join("---:" for _ in tasks) + " | ---: | ---: | ---: |",
    ]
    for name, r in runs.items():
        views = r["eval"]["views"]

        def cell(scores: list[float], views: list = views) -> str:
            return f"{scores[-1]:.2f}" + (f" ({scores[0]:.2f})" if len(views) > 1 else "")

        row = [cell(r["eval"]["tasks"][t]) if t in r["eval"]["tasks"] else "-" for t in tasks]
        lines.append(
            f"| {name} | "
            + " | ".join(row)
            + f" | **{cell(r['mean'])}** | {r['train_seconds']:.0f} | {r['final_loss']:.3f} |"
        )
    lines += ["", "Commands:", ""] + [f"- {name}: `{r['command']}`" for name, r in runs.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

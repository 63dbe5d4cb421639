"""What the embeddings endpoint's ``dimensions`` option costs: STS-B dev Spearman (x100) when the
served embeddings are cut to their first d dimensions and renormalized (exactly what
``POST /v1/embeddings`` with ``dimensions=d`` returns), for several d, from one encoding run.

Run (embeds ~2,900 sentences with the default model once; about a minute on 2 CPU cores):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/serve_dimensions.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from _run_info import REPO, git_commit

TASK = REPO.parent / "shared" / "data" / "dev" / "stsb-dev"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model (default: the bundled default)")
    parser.add_argument("--steps", type=int, default=5, help="GIRCSE soft tokens K (the server's default)")
    parser.add_argument("--dims", type=int, nargs="+", default=[576, 384, 256, 128, 64, 32])
    parser.add_argument("--task", type=Path, default=TASK)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()

    import genembed
    from genembed.eval.metrics import pairwise_cosine, spearman
    from genembed.eval.tasks import load_task
    from genembed.serve.embeddings import truncate_dimensions

    task = load_task(args.task)
    model = genembed.load(args.model, dtype="float32")
    texts = list(dict.fromkeys(task.data.s1 + task.data.s2))
    row = {t: i for i, t in enumerate(texts)}
    t0 = time.perf_counter()
    full = model.encode(texts, instruction=task.instruction, steps=args.steps, show_progress_bar=True)
    seconds = time.perf_counter() - t0
    a, b = [row[t] for t in task.data.s1], [row[t] for t in task.data.s2]
    scores = {}
    for d in sorted({min(d, model.dim) for d in args.dims}, reverse=True):
        cut = truncate_dimensions(full, d)
        scores[d] = round(spearman(pairwise_cosine(cut[a], cut[b]), task.data.targets), 2)
        print(f"d={d:<4} spearman x100 = {scores[d]:.2f}", flush=True)
    report = {
        "benchmark": "serve_dimensions",
        "config": {
            "model": model.name,
            "method": "gircse",
            "steps": args.steps,
            "task": str(args.task),
            "instruction": task.instruction,
            "pairs": len(task.data.s1),
            "texts": len(texts),
            "encode_seconds": round(seconds, 1),
        },
        "git_commit": git_commit(),
        "spearman_x100_by_dimensions": {str(d): s for d, s in scores.items()},
        "full_dim": model.dim,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "serve_dimensions.json"
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

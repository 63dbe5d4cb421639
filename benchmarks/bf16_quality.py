"""bfloat16 vs float32 on the dev STS tasks: Spearman x100 of cosine vs gold score, and encode time.

Same model (SmolLM2-135M-Instruct), same texts and settings; only the weights' dtype differs. Methods:
GIRCSE (K = 1, 5, 20 from one K=20 run) and single-pass mean pooling. bfloat16 becomes the default
only if every task at the default setting (GIRCSE K=5) stays within 0.3 points of float32.

Run (2 CPU cores, about 10 minutes; under the shared lock):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/bf16_quality.py \\
        --out benchmarks/results/bf16_quality

Writes ``OUT.json`` (scores, deltas, encode seconds, git commit).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _run_info import REPO, git_commit

DEV = REPO.parent / "shared" / "data" / "dev"
TOLERANCE = 0.3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=[str(DEV / "stsb-dev"), str(DEV / "sick-trial")])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "bf16_quality")
    args = parser.parse_args()

    import genembed
    from genembed.eval import GenembedEncoder, evaluate

    settings = [("gircse", [1, 5, 20]), ("mean", None)]
    rows, seconds = [], {}
    for dtype in ("float32", "bfloat16"):
        model = genembed.load(dtype=dtype)
        for method, steps in settings:
            encoder = GenembedEncoder(model, method=method, steps=steps, batch_size=args.batch_size)
            start = time.perf_counter()
            report = evaluate(encoder, args.tasks, progress=False)
            seconds[f"{method} {dtype}"] = round(time.perf_counter() - start, 2)
            for task in report.tasks:
                for view, score in zip(report.views, task.scores, strict=True):
                    setting = method if view is None else f"{method} K={view}"
                    rows.append({"task": task.name, "setting": setting, "dtype": dtype, "spearman": score})
            print(f"{dtype} {method}: {seconds[f'{method} {dtype}']} s", flush=True)

    table = {}
    for r in rows:
        table.setdefault((r["task"], r["setting"]), {})[r["dtype"]] = r["spearman"]
    comparison = [
        {"task": task, "setting": setting, **scores, "delta": round(scores["bfloat16"] - scores["float32"], 3)}
        for (task, setting), scores in table.items()
    ]
    default = [c for c in comparison if c["setting"] == "gircse K=5"]
    holds = all(abs(c["delta"]) <= TOLERANCE for c in default)
    report = {
        "config": {"tasks": args.tasks, "batch_size": args.batch_size, "tolerance": TOLERANCE},
        "git_commit": git_commit(),
        "comparison": comparison,
        "encode_seconds": seconds,
        "bf16_within_tolerance_at_default": holds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    print(f"\n{'task':<12} {'setting':<12} {'float32':>8} {'bfloat16':>9} {'delta':>7}")
    for c in comparison:
        print(f"{c['task']:<12} {c['setting']:<12} {c['float32']:8.2f} {c['bfloat16']:9.2f} {c['delta']:+7.2f}")
    print(f"bf16 within {TOLERANCE} points at the default (GIRCSE K=5) on every task: {holds}")
    print(f"wrote {args.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()

"""Training step time on the default model: KV-cached soft tokens vs the reference's recompute path.

One training step = encode queries and documents with gradients (GIRCSE, K soft tokens), ICR loss,
backward, AdamW step, on SmolLM2-135M-Instruct with LoRA (r=16, all linear projections).

1. Ratio: recompute / cached step time at K=5, the two paths alternated step by step in one run on
   the same batch (small, so the recompute path stays affordable).
2. Realistic step: the cached path at a training-sized batch (default 16 queries x (1 pos + 1 hard
   negative), texts cut to 64 tokens), in fp32 and with bf16 autocast.
3. Frozen lower layers (``lora.frozen_layers``): the realistic fp32 step with every layer's LoRA training
   against the first ``--frozen-layers`` layers' frozen, alternated step by step.
4. Step time against K (``--k-sweep 1,3,5``): the realistic fp32 step at each K, alternated step by step: what
   drawing K per step (rather than training every step at the largest K) could save at most.

Run (2 CPU cores, a few minutes, under the shared lock):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/train_step.py \\
        --out benchmarks/results/train_step.json
    .venv/bin/python benchmarks/train_step.py --only-frozen --out benchmarks/results/train_step_frozen.json
    .venv/bin/python benchmarks/train_step.py --only-k-sweep --k-sweep 1,3,5 --out benchmarks/results/train_step_k.json

Data: rows of ``../shared/data/train/snli.jsonl`` (queries with a positive and a hard negative);
falls back to ``tests/assets/training/similar.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
DATA = [
    REPO.parent / "shared" / "data" / "train" / "snli.jsonl",
    REPO / "tests" / "assets" / "training" / "similar.jsonl",
]


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _batch(tokenizer, path: Path, queries: int, max_length: int, seed: int):
    from genembed.training.data import ContrastiveStream, FileSpec
    from genembed.training.forward import tokenize_texts

    stream = ContrastiveStream([FileSpec(str(path))], batch_size=queries, hard_negatives=1, seed=seed)
    batch = stream.next()
    q = tokenize_texts(tokenizer, batch.queries, batch.query_instructions, prompt_format="chat", max_length=max_length)
    d = tokenize_texts(
        tokenizer, batch.documents, batch.document_instructions, prompt_format="chat", max_length=max_length
    )
    info = {"queries": q.input_ids.shape[0], "documents": d.input_ids.shape[0]}
    info |= {"query_tokens": int(q.attention_mask.sum()), "document_tokens": int(d.attention_mask.sum())}
    info |= {"padded_shapes": [list(q.input_ids.shape), list(d.input_ids.shape)]}
    return (q, d, batch.label_tensor()), info


def _step(objective, optimizer, inputs, bf16: bool) -> float:
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = objective(*inputs)
    out["objective"].backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps-k", type=int, default=5, help="soft tokens K")
    parser.add_argument("--ratio-queries", type=int, default=4, help="queries in the cached-vs-recompute batch")
    parser.add_argument("--queries", type=int, default=16, help="queries in the realistic batch")
    parser.add_argument("--max-length", type=int, default=64, help="tokens per prompt (template included)")
    parser.add_argument("--reps", type=int, default=3, help="timed steps per setting (after one warm-up step)")
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--frozen-layers", type=int, default=15, help="lower layers frozen in part 3 (0: skip it)")
    parser.add_argument("--only-frozen", action="store_true", help="run part 3 only")
    parser.add_argument("--k-sweep", default="", help="part 4: comma-separated K values (empty: skip it)")
    parser.add_argument("--only-k-sweep", action="store_true", help="run part 4 only")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "train_step.json")
    args = parser.parse_args()

    import genembed
    from genembed.encoders.settings import EmbedSettings
    from genembed.training.lora import make_trainable
    from genembed.training.losses import ICRLoss
    from genembed.training.objective import Objective

    data = next(p for p in DATA if p.is_file())
    backbone = genembed.load(adapter=False, dtype="float32").backbone
    model = make_trainable(backbone.model, lora=True, r=args.lora_r, alpha=2.0 * args.lora_r, dropout=0.0)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    loss = ICRLoss(0.02, 1.0)

    def objective(use_cache: bool) -> Objective:
        return Objective(model, EmbedSettings(steps=args.steps_k, use_cache=use_cache), loss)

    times: dict[str, list[float]] = {}
    realistic: dict[str, list[float]] = {}
    small_info = {}
    ratio = None
    big, big_info = _batch(backbone.tokenizer, data, args.queries, args.max_length, seed=1)
    if not (args.only_frozen or args.only_k_sweep):
        small, small_info = _batch(backbone.tokenizer, data, args.ratio_queries, args.max_length, seed=0)
        times = {"cached": [], "recompute": []}
        for path in times:  # warm-up
            _step(objective(path == "cached"), optimizer, small, bf16=False)
        for _ in range(args.reps):  # alternate, so both paths see the same machine load
            for path in times:
                times[path].append(_step(objective(path == "cached"), optimizer, small, bf16=False))
        ratio = statistics.median(times["recompute"]) / statistics.median(times["cached"])
        print(
            f"K={args.steps_k}, {args.ratio_queries} queries: cached {statistics.median(times['cached']):.2f} s, "
            f"recompute {statistics.median(times['recompute']):.2f} s, ratio {ratio:.2f}x"
        )

        realistic = {"fp32": [], "bf16": []}
        for precision in realistic:  # warm-up
            _step(objective(True), optimizer, big, bf16=precision == "bf16")
        for _ in range(args.reps):
            for precision in realistic:
                realistic[precision].append(_step(objective(True), optimizer, big, bf16=precision == "bf16"))
        for precision, values in realistic.items():
            print(
                f"realistic step ({args.queries} queries x (1 pos + 1 neg), <= {args.max_length} tokens, "
                f"K={args.steps_k}, LoRA r={args.lora_r}, {precision}): median {statistics.median(values):.2f} s"
            )

    frozen: dict[str, list[float]] = {}
    if args.frozen_layers and not args.only_k_sweep:
        from genembed.training.lora import freeze_lower_layers

        lower = [p for n, p in model.named_parameters() if p.requires_grad]
        frozen = {"all layers": [], f"{args.frozen_layers} lower frozen": []}
        for rep in range(args.reps + 1):  # the first round warms up
            for setting in frozen:
                for param in lower:
                    param.requires_grad_(True)
                if setting != "all layers":
                    freeze_lower_layers(model, args.frozen_layers)
                seconds = _step(objective(True), optimizer, big, bf16=False)
                if rep:
                    frozen[setting].append(seconds)
        for param in lower:
            param.requires_grad_(True)
        times_frozen = {k: statistics.median(v) for k, v in frozen.items()}
        print(
            "frozen lower layers (realistic step, fp32): "
            + ", ".join(f"{k} {v:.2f} s" for k, v in times_frozen.items())
            + f", ratio {times_frozen[f'{args.frozen_layers} lower frozen'] / times_frozen['all layers']:.2f}x"
        )

    sweep: dict[str, list[float]] = {}
    if args.k_sweep:
        ks = [int(k) for k in args.k_sweep.split(",")]
        sweep = {f"K={k}": [] for k in ks}
        for rep in range(args.reps + 1):  # the first round warms up
            for k in ks:
                step = Objective(model, EmbedSettings(steps=k), loss)
                seconds = _step(step, optimizer, big, bf16=False)
                if rep:
                    sweep[f"K={k}"].append(seconds)
        medians = {k: statistics.median(v) for k, v in sweep.items()}
        largest = medians[f"K={max(ks)}"]
        print(
            "step time against K (realistic step, fp32): "
            + ", ".join(f"{k} {v:.2f} s ({v / largest:.2f}x)" for k, v in medians.items())
        )

    report = {
        "benchmark": "train_step",
        "git_commit": _git_commit(),
        "config": vars(args) | {"out": str(args.out), "data": str(data), "model": backbone.name},
        "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": platform.processor()},
        "ratio": {
            "batch": small_info,
            "seconds": times,
            "median": {k: statistics.median(v) for k, v in times.items()},
            "recompute_over_cached": ratio,
        },
        "realistic": {
            "batch": big_info,
            "seconds": realistic,
            "median": {k: statistics.median(v) for k, v in realistic.items()},
        },
        "frozen_layers": {"seconds": frozen, "median": {k: statistics.median(v) for k, v in frozen.items()}},
        "k_sweep": {"seconds": sweep, "median": {k: statistics.median(v) for k, v in sweep.items()}},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

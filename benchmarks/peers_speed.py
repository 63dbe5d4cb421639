"""Cost per text of the default model against same-size sentence encoders, side by side in one run.

The same texts go through all-MiniLM-L6-v2 and all-mpnet-base-v2 (sentence-transformers at their defaults,
each cutting texts at its own maximum: 256 and 384 tokens) and through ``genembed.load()`` at K=1 and
K=5 (``encode(texts, steps=K)``, no instruction, its own maximum of 512 tokens; float32 unless
``--dtype``), at 1 and 2 torch threads, on two sets:

- ``short``: 128 distinct stsb-dev sentences (about 12 tokens each);
- ``long``: 128 scifact-dev abstracts (``title + " " + text``).

Every system encodes the whole set once to warm up (the default model then holds its chat template's
prefix states, as a server does after its first request), then the systems take turns round by round
and each one's fastest round is kept (the machine is shared: slower rounds measure other jobs). The
report gives texts/s per system and every ratio of cost per text: default/mpnet, default/MiniLM (K=1
and K=5) and K5/K1. The batch size is 32 texts for every system.

Run (about 25 minutes on 2 CPU cores with the defaults; under the shared lock, on a quiet machine):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/peers_speed.py \\
        --out benchmarks/results/peers_speed

A quick check of the script (a minute): ``--short 16 --long 4 --rounds 1 --threads 1``.
Writes ``OUT.json`` (config, git commit, CPU, every round's time) and ``OUT.md`` (the tables).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _run_info import REPO, git_commit

DEV = REPO.parent / "shared" / "data" / "dev"
SYSTEMS = ("minilm", "mpnet", "default_k1", "default_k5")
LABELS = {
    "minilm": "all-MiniLM-L6-v2",
    "mpnet": "all-mpnet-base-v2",
    "default_k1": "default K=1",
    "default_k5": "default K=5",
}
# (numerator, denominator) of each reported cost ratio (time per text of the first over the second)
RATIOS = (
    ("default_k5", "mpnet"),
    ("default_k1", "mpnet"),
    ("default_k5", "minilm"),
    ("default_k1", "minilm"),
    ("default_k5", "default_k1"),
)


def short_texts(n: int) -> list[str]:
    """The first ``n`` distinct stsb-dev sentences."""
    seen: dict[str, None] = {}
    for line in (DEV / "stsb-dev" / "pairs.jsonl").read_text(encoding="utf-8").splitlines():
        pair = json.loads(line)
        seen.update(dict.fromkeys((pair["s1"], pair["s2"])))
        if len(seen) >= n:
            break
    return list(seen)[:n]


def long_texts(n: int) -> list[str]:
    """The first ``n`` scifact-dev abstracts, title first."""
    texts = []
    for line in (DEV / "scifact-dev" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:n]:
        doc = json.loads(line)
        texts.append(f"{doc.get('title') or ''} {doc['text']}".strip())
    return texts


def load_systems(names: tuple[str, ...], dtype: str, batch_size: int) -> dict[str, Callable[[list[str]], object]]:
    """``name -> encode(texts)`` for each system asked for."""
    systems: dict[str, Callable[[list[str]], object]] = {}
    if {"minilm", "mpnet"} & set(names):
        from sentence_transformers import SentenceTransformer

        from genembed.training.teacher import teacher_folder

        for name, teacher in (("minilm", "all-MiniLM-L6-v2"), ("mpnet", "all-mpnet-base-v2")):
            if name in names:
                st = SentenceTransformer(str(teacher_folder(teacher)), device="cpu")
                systems[name] = lambda texts, st=st: st.encode(texts, batch_size=batch_size)
    if any(name.startswith("default") for name in names):
        import genembed

        model = genembed.load(dtype=dtype)
        for k in (1, 5):
            if f"default_k{k}" in names:
                systems[f"default_k{k}"] = lambda texts, k=k: model.encode(texts, steps=k, batch_size=batch_size)
    return systems


def run_rounds(
    systems: dict[str, Callable[[list[str]], object]], texts: list[str], rounds: int
) -> dict[str, list[float]]:
    """Each system's seconds per round over ``texts``, the systems interleaved within a round."""
    for encode in systems.values():
        encode(texts)  # warm up (and compute the default model's prefix states)
    times: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(rounds):
        for name, encode in systems.items():
            start = time.perf_counter()
            encode(texts)
            times[name].append(time.perf_counter() - start)
    return times


def summarize(times: dict[str, list[float]], n_texts: int) -> dict:
    """Best seconds and texts/s per system, and the cost ratios of :data:`RATIOS` (best over best)."""
    best = {name: min(t) for name, t in times.items()}
    return {
        "best_seconds": best,
        "texts_per_s": {name: n_texts / s for name, s in best.items()},
        "ratios": {f"{a}/{b}": best[a] / best[b] for a, b in RATIOS if a in best and b in best},
    }


def markdown(results: list[dict]) -> str:
    """One table of texts/s and one of cost ratios, a row per (threads, set)."""
    systems = [s for s in SYSTEMS if any(s in r["texts_per_s"] for r in results)]
    ratios = [f"{a}/{b}" for a, b in RATIOS if any(f"{a}/{b}" in r["ratios"] for r in results)]
    lines = [
        "| threads | set | " + " | ".join(f"{LABELS[s]} (texts/s)" for s in systems) + " |",
        "|---:|---|" + "---:|" * len(systems),
    ]
    for r in results:
        cells = [f"{r['texts_per_s'][s]:.1f}" if s in r["texts_per_s"] else "-" for s in systems]
        lines.append(f"| {r['threads']} | {r['set']} | " + " | ".join(cells) + " |")
    lines += ["", "| threads | set | " + " | ".join(ratios) + " |", "|---:|---|" + "---:|" * len(ratios)]
    for r in results:
        cells = [f"{r['ratios'][name]:.2f}x" if name in r["ratios"] else "-" for name in ratios]
        lines.append(f"| {r['threads']} | {r['set']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", type=int, default=128, help="stsb-dev sentences in the short set (0: skip)")
    parser.add_argument("--long", type=int, default=128, help="scifact-dev abstracts in the long set (0: skip)")
    parser.add_argument("--threads", default="1,2", help="torch thread counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"a subset of {','.join(SYSTEMS)}")
    parser.add_argument("--dtype", default="float32", help="the default model's dtype (auto, float32, bfloat16)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", type=Path, required=True, help="output path without extension")
    args = parser.parse_args()

    names = tuple(s for s in args.systems.split(",") if s)
    unknown = set(names) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")
    sets = {"short": short_texts(args.short) if args.short else [], "long": long_texts(args.long) if args.long else []}
    systems = load_systems(names, args.dtype, args.batch_size)
    results = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for set_name, texts in sets.items():
            if not texts:
                continue
            times = run_rounds(systems, texts, args.rounds)
            results.append({"threads": threads, "set": set_name, "texts": len(texts), "rounds": times})
            results[-1].update(summarize(times, len(texts)))
            print(json.dumps({k: results[-1][k] for k in ("threads", "set", "texts_per_s", "ratios")}), flush=True)
    report = {
        "config": vars(args) | {"out": str(args.out)},
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    args.out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()

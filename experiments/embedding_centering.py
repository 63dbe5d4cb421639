"""Does post-hoc centering of GIRCSE embeddings help? Anisotropy, measured, and three fixes compared.

GIRCSE embeddings of a causal LM share a common direction (mean cosine between unrelated texts
well above 0), which squeezes every cosine into a narrow band. Classic remedies subtract a mean
vector before L2 normalisation. This script scores, from one set of cached embeddings and with the
metrics of ``genembed eval``:

- ``none``: the embeddings as ``genembed eval`` scores them;
- ``train_mean``: minus one mean vector per K, fitted on a sample of the training data (queries
  with their instruction, documents with the instruction the recipe gives them);
- ``instruction_mean``: minus the mean embedding of a fixed set of calibration texts (taken from the
  same training sample) encoded with the *same* instruction, so each instruction gets its own center
  (costs one extra encoding of the calibration set per new instruction);
- ``shipped_calibration``: the same with the 64 calibration texts that ship with genembed
  (:mod:`genembed.encoders.centering`), i.e. what ``genembed.load()`` now does by default;
- ``own_set_mean`` (an upper bound, not usable as a model): minus the mean of the evaluated text set
  itself, i.e. statistics of the test texts.

Run (12 min on two cores at K=1,5, most of it encoding scifact; only texts missing from the
evaluation cache are encoded):

    .venv/bin/python experiments/embedding_centering.py --steps 1,5 --out experiments/results/embedding_centering.json

Writes the JSON (config, anisotropy, scores per variant, task and K) and a markdown table beside it.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import _benchmarks  # noqa: F401  (puts benchmarks/ on the import path)
import numpy as np
from _run_info import git_commit

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("none", "train_mean", "instruction_mean", "shipped_calibration", "own_set_mean")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*", type=Path, default=[REPO.parent / "shared" / "data" / "dev"])
    parser.add_argument("--adapter", default=None, help="adapter folder (default: the shipped adapter)")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "gircse-smollm2.yaml")
    parser.add_argument("--steps", default="1,3,5,10,20")
    parser.add_argument("--per-file", type=int, default=30, help="training rows sampled per training file")
    parser.add_argument("--calibration", type=int, default=64, help="calibration texts per instruction")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "embedding_centering.json")
    args = parser.parse_args()

    import torch

    import genembed
    from genembed.eval import EmbeddingCache, GenembedEncoder, find_task_dirs, load_task
    from genembed.eval.encoding import TextEmbedder
    from genembed.eval.metrics import l2_normalize
    from genembed.eval.runner import EVALUATORS

    torch.set_num_threads(args.threads)
    tasks = [load_task(p) for p in find_task_dirs(list(args.tasks))]
    model = genembed.load(adapter=args.adapter, dtype="float32")
    encoder = GenembedEncoder(model, method="gircse", steps=args.steps, center=False)  # raw: the variants center
    shipped = GenembedEncoder(model, method="gircse", steps=args.steps, center=True)
    embed = TextEmbedder(encoder, EmbeddingCache())

    groups = training_sample(args.config, args.per_file)
    sample = np.concatenate([embed(texts, instruction, desc="training sample") for instruction, texts in groups])
    train_mean = sample.mean(axis=0)  # (V, D)
    pool = [t for _, texts in groups for t in texts]
    calibration = random.Random(0).sample(pool, min(args.calibration, len(pool)))
    centers: dict[str, np.ndarray] = {}

    def instruction_center(instruction: str) -> np.ndarray:
        if instruction not in centers:
            centers[instruction] = embed(calibration, instruction, desc="calibration").mean(axis=0)
        return centers[instruction]

    def variant(name: str):
        def embed_centered(texts: list[str], instruction: str, desc: str = "encode") -> np.ndarray:
            x = embed(texts, instruction, desc)
            if name == "none" or len(x) == 0:
                return x
            if name == "train_mean":
                center = train_mean
            elif name == "instruction_mean":
                center = instruction_center(instruction)
            elif name == "shipped_calibration":
                center = shipped.center_for(instruction)
            else:  # own_set_mean
                center = x.mean(axis=0)
            return l2_normalize(x - center[None])

        return embed_centered

    views = list(encoder.views)
    results = {
        "config": {
            "adapter": args.adapter or "shipped",
            "encoder": encoder.name,
            "steps": views,
            "training_sample": len(sample),
            "calibration_texts": len(calibration),
            "git_commit": git_commit(),
            "threads": args.threads,
        },
        "anisotropy": {f"K={k}": mean_cosine(sample[:, v]) for v, k in enumerate(views)},
        "scores": {},
    }
    for name in VARIANTS:
        scores = {task.name: EVALUATORS[task.type](task, variant(name)).scores for task in tasks}
        scores["mean"] = list(np.mean([scores[t.name] for t in tasks], axis=0))
        results["scores"][name] = scores
        print(name, "  ".join(f"K={k} {s:.2f}" for k, s in zip(views, scores["mean"], strict=True)), flush=True)
    write(args.out, results, [t.name for t in tasks], views)


def training_sample(config: Path, per_file: int) -> list[tuple[str, list[str]]]:
    """``(instruction, texts)`` groups: ``per_file`` rows of every file of the recipe, queries with their
    instruction and first positives with the instruction the recipe gives documents."""
    from genembed.training import load_config
    from genembed.training.data.contrastive import read_contrastive

    data = load_config(config).data
    rng = random.Random(0)
    groups: dict[str, list[str]] = {}
    for item in data.files:
        rows = read_contrastive(item.path)
        for row in rng.sample(rows, min(per_file, len(rows))):
            groups.setdefault(row.instruction, []).append(row.query)
            groups.setdefault(row.instruction if item.symmetric else data.doc_instruction, []).append(row.pos[0])
    return list(groups.items())


def mean_cosine(x: np.ndarray) -> float:
    """Mean cosine between distinct rows of L2-normalised ``x``."""
    n = len(x)
    total = float(np.square(x.sum(axis=0)).sum())  # sum over all pairs, self-pairs included
    return (total - n) / (n * (n - 1))


def write(out: Path, results: dict, tasks: list[str], views: list[int]) -> None:
    from genembed._files import atomic_write_text as atomic_write

    atomic_write(out, json.dumps(results, indent=1))
    scores = results["scores"]
    cfg = results["config"]
    lines = [
        "# Post-hoc centering of GIRCSE embeddings",
        "",
        f"{cfg['encoder']} · training sample {cfg['training_sample']} texts · "
        f"calibration {cfg['calibration_texts']} texts per instruction · commit {cfg['git_commit']}",
        "",
        "Mean cosine between training-sample embeddings: "
        + ", ".join(f"{k} {v:.3f}" for k, v in results["anisotropy"].items()),
        "",
        "## Dev mean by K",
        "",
        "| variant | " + " | ".join(f"K={k}" for k in views) + " |",
        "| --- | " + " | ".join("---:" for _ in views) + " |",
    ]
    lines += [f"| {name} | " + " | ".join(f"{s:.2f}" for s in scores[name]["mean"]) + " |" for name in scores]
    k5 = views.index(5) if 5 in views else len(views) - 1
    lines += [
        "",
        f"## Per task at K={views[k5]}",
        "",
        "| task | " + " | ".join(scores) + " |",
        "| --- | " + " | ".join("---:" for _ in scores) + " |",
    ]
    lines += [f"| {t} | " + " | ".join(f"{scores[n][t][k5]:.2f}" for n in scores) + " |" for t in tasks]
    atomic_write(out.with_suffix(".md"), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

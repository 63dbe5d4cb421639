"""Calibrating ``steps="auto"`` (issue 62): which stopping rule ends GIRCSE early at K=5's quality?

One encoding run per text at K=10 (``return_all_steps``: ``z_1..z_10``, raw, uncentred) serves every
rule: a rule stops a text at the first ``k >= 2`` where ``cos(z_k, z_{k-1}) > t`` (the library's rule,
``genembed.encoders.soft_tokens.soft_token_loop``), at ``k = 10`` otherwise, and the text's embedding is
``z_k``. Each rule is one *view* of the harness (:mod:`genembed.eval`), next to the fixed K=1..10
views, so every task is scored for every rule and every K from the same embeddings; centring follows
the views (each rule's centre is the mean of its own choices over the calibration texts, as the library
computes the centre of adaptive settings).

Data: the eight older task folders of ``../shared/data/dev`` (seven non-retrieval tasks and
scifact-dev), each cut with ``load_task(limit=--limit)`` (100 rows per data file by default;
scifact-dev keeps every document judged for its first 100 queries). The default model
(``genembed.load()``: shipped adapter, centred).

    flock /tmp/genembed-cpu.lock env OMP_NUM_THREADS=1 .venv/bin/python experiments/auto_steps.py \\
        --out experiments/results/auto_steps.json

Writes each rule's mean K (over the tasks' texts, calibration texts excluded), each task's score per
view and the mean over tasks, and prints a table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEV = REPO.parent / "shared" / "data" / "dev"
TASKS = ("banking77-dev", "emotion-dev", "mrcr-dev", "mrpc-dev", "scifact-dev", "sick-trial", "stsb-dev", "trec-dev")
K_MAX = 10
THRESHOLDS = (0.98, 0.99, 0.993, 0.995, 0.997, 0.998, 0.999)
RULE_VIEW = 100  # a rule's view label: RULE_VIEW + its index in THRESHOLDS (the harness labels views with ints)


def stop_steps(all_steps: np.ndarray, threshold: float) -> np.ndarray:
    """``(n,)`` the k (1-based) at which each trajectory ``(n, K, dim)`` stops: the first ``k >= 2`` with
    ``cos(z_k, z_{k-1}) > threshold``, else ``K``."""
    z = all_steps / np.linalg.norm(all_steps, axis=-1, keepdims=True)
    cos = (z[:, 1:] * z[:, :-1]).sum(-1)  # (n, K-1): cos(z_k, z_{k-1}) for k = 2..K
    hit = cos > threshold
    first = np.where(hit.any(1), hit.argmax(1) + 2, all_steps.shape[1])
    return first


class RuleViews:
    """A harness sweep encoder: views K=1..10, then one per threshold (the rule's choice of ``z_k``)."""

    def __init__(self, inner, calibration: set[str]):
        self.inner = inner
        self.views = (*range(1, K_MAX + 1), *(RULE_VIEW + i for i in range(len(THRESHOLDS))))
        self.calibration = calibration
        self.used: dict[float, list[int]] = {t: [] for t in THRESHOLDS}

    @property
    def name(self) -> str:
        return self.inner.name + " auto-rules"

    @property
    def cache_key(self) -> str:
        return self.inner.cache_key + "-auto-rules"

    def settings(self) -> dict:
        return self.inner.settings() | {"views": list(self.views), "thresholds": list(THRESHOLDS)}

    def calibration_texts(self):
        return self.inner.calibration_texts()

    def encode(self, texts: list[str], *, instruction: str) -> np.ndarray:
        return self.encode_views(texts, instruction=instruction)[:, 4]  # K=5

    def encode_views(self, texts: list[str], *, instruction: str) -> np.ndarray:
        all_steps = self.inner._encode(texts, instruction, all_steps=True)  # (n, 10, dim), raw
        rules = []
        task_texts = [t not in self.calibration for t in texts]
        for threshold in THRESHOLDS:
            k = stop_steps(all_steps, threshold)
            self.used[threshold] += [int(x) for x, keep in zip(k, task_texts, strict=True) if keep]
            rules.append(all_steps[np.arange(len(texts)), k - 1])
        return np.concatenate([all_steps, np.stack(rules, axis=1)], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dev", type=Path, default=DEV)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--limit", type=int, default=100, help="rows per data file (load_task's limit)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import torch

    import genembed
    from genembed.encoders.centering import calibration_texts
    from genembed.eval import EmbeddingCache, GenembedEncoder, evaluate, load_task

    torch.set_num_threads(1)
    start = time.perf_counter()
    model = genembed.load()
    inner = GenembedEncoder(
        model, steps=K_MAX, attention=model.attention, prompt_format=model.prompt_format, method=model.method
    )
    encoder = RuleViews(inner, set(calibration_texts()))
    tasks = [load_task(args.dev / name, limit=args.limit) for name in args.tasks]
    with tempfile.TemporaryDirectory() as tmp:  # a fresh cache: every text is encoded, so its K is counted
        report = evaluate(
            encoder,
            tasks,
            cache=EmbeddingCache(Path(tmp) / "cache.sqlite"),
            log=print,
            config={"experiment": "auto_steps"},
        )
    used = encoder.used
    labels = [f"K={v}" if v < RULE_VIEW else f"auto t={THRESHOLDS[v - RULE_VIEW]}" for v in encoder.views]
    scores = {task.name: dict(zip(labels, task.scores, strict=True)) for task in report.tasks}
    means = {label: round(float(np.mean([s[label] for s in scores.values()])), 2) for label in labels}
    mean_k = {f"auto t={t}": round(float(np.mean(k)), 2) for t, k in used.items()}
    result = {
        "experiment": "auto_steps",
        "tasks": args.tasks,
        "limit": args.limit,
        "model": "genembed.load() (shipped adapter, centred)",
        "mean_score": means,
        "mean_k": mean_k,
        "k_histogram": {
            f"auto t={t}": np.bincount(k, minlength=K_MAX + 1)[1:].tolist() for t, k in encoder.used.items()
        },
        "scores": scores,
        "seconds": round(time.perf_counter() - start),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for label in labels:
        print(f"{label:16s} mean {means[label]:6.2f}  mean K {mean_k.get(label, '')}")


if __name__ == "__main__":
    main()

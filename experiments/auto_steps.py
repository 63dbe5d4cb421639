"""Calibrating ``steps="auto"`` (issue 62): which stopping rule ends GIRCSE early at K=5's quality?

One encoding run per text at K=10 (``return_all_steps``: ``z_1..z_10``, raw, uncentred) serves every
rule: a rule stops a text at the first ``k >= 2`` where ``cos(z_k, z_{k-1}) > t`` (the library's rule,
``genembed.encoders.soft_tokens.soft_token_loop``), at ``k = 10`` otherwise, and the text's embedding is
``z_k``. Each rule is one *view* of the harness (:mod:`genembed.eval`), next to the fixed K=1..10
views, so every task is scored for every rule and every K from the same embeddings; centring follows
the views (each rule's centre is the mean of its own choices over the calibration texts, as the library
computes the centre of adaptive settings).

Data: every task folder of ``../shared/data/dev`` (``--tasks`` picks some), whole, or cut with
``--limit`` (``load_task``'s rows per data file). The default model (``genembed.load()``: shipped
adapter, centred, float32). Clustering is scored over ``--cluster-starts`` seeds (20, the dev protocol).

    # the calibration run of issue 62 (eight older tasks, 60 rows each, 557 s on 1 thread):
    flock /tmp/genembed-cpu.lock .venv/bin/python experiments/auto_steps.py --threads 1 --limit 60 \\
        --tasks banking77-dev emotion-dev mrcr-dev mrpc-dev scifact-dev sick-trial stsb-dev trec-dev \\
        --out experiments/results/auto_steps.json
    # its confirmation on the whole dev suite (12 tasks, uncut):
    flock /tmp/genembed-cpu.lock .venv/bin/python experiments/auto_steps.py \\
        --cache ~/.cache/genembed/auto_steps_dev12.sqlite --out experiments/results/auto_steps_dev12.json

Resumable: with ``--cache`` the embeddings and each text's stopping K (``<cache>.used.jsonl``) persist,
and a rerun encodes only what is missing. Writes each rule's mean K (over the tasks' distinct texts,
calibration texts excluded), each task's score per view, the mean over tasks (all, retrieval, other),
and prints a table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEV = REPO.parent / "shared" / "data" / "dev"
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

    def __init__(self, inner, calibration: set[str], used_file: Path | None = None):
        self.inner = inner
        self.views = (*range(1, K_MAX + 1), *(RULE_VIEW + i for i in range(len(THRESHOLDS))))
        self.calibration = calibration
        self.used_file = used_file
        # (instruction, text) digest -> the stopping K of each threshold; task texts only
        self.used: dict[str, list[int]] = {}
        if used_file is not None and used_file.exists():
            for line in used_file.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.used[row["key"]] = row["k"]

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
        ks = np.stack([stop_steps(all_steps, threshold) for threshold in THRESHOLDS], axis=1)  # (n, rules)
        rules = all_steps[np.arange(len(texts))[:, None], ks - 1]  # (n, rules, dim)
        new = {}
        for text, k in zip(texts, ks, strict=True):
            if text not in self.calibration:
                key = hashlib.sha256(f"{instruction}\0{text}".encode()).hexdigest()[:32]
                new[key] = [int(x) for x in k]
        self.used.update(new)
        if self.used_file is not None and new:
            with self.used_file.open("a") as f:
                f.writelines(json.dumps({"key": key, "k": k}) + "\n" for key, k in new.items())
        return np.concatenate([all_steps, rules], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dev", type=Path, default=DEV)
    parser.add_argument("--tasks", nargs="+", help="task folder names under --dev (default: all)")
    parser.add_argument("--limit", type=int, help="rows per data file (load_task's limit; default: whole tasks)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cluster-starts", type=int, default=20)
    parser.add_argument("--cache", type=Path, help="embedding cache (resumable); default: a fresh temporary one")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    names = args.tasks or sorted(p.name for p in args.dev.iterdir() if (p / "task.json").exists())

    import torch

    import genembed
    from genembed.encoders.centering import calibration_texts
    from genembed.eval import EmbeddingCache, GenembedEncoder, evaluate, load_task

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model = genembed.load()
    inner = GenembedEncoder(
        model, steps=K_MAX, attention=model.attention, prompt_format=model.prompt_format, method=model.method
    )
    tasks = [load_task(args.dev / name, limit=args.limit) for name in names]
    with tempfile.TemporaryDirectory() as tmp:
        cache_path = args.cache.expanduser() if args.cache else Path(tmp) / "cache.sqlite"
        used_file = cache_path.with_name(cache_path.name + ".used.jsonl")
        if not cache_path.exists():
            used_file.unlink(missing_ok=True)  # a fresh cache re-encodes, and so re-counts, every text
        encoder = RuleViews(inner, set(calibration_texts()), used_file)
        report = evaluate(
            encoder,
            tasks,
            cache=EmbeddingCache(cache_path),
            log=print,
            config={"experiment": "auto_steps"},
            cluster_starts=args.cluster_starts,
        )
    labels = [f"K={v}" if v < RULE_VIEW else f"auto t={THRESHOLDS[v - RULE_VIEW]}" for v in encoder.views]
    scores = {task.name: dict(zip(labels, task.scores, strict=True)) for task in report.tasks}
    groups = {
        "all": [t.name for t in report.tasks],
        "retrieval": [t.name for t in report.tasks if t.type == "retrieval"],
        "other": [t.name for t in report.tasks if t.type != "retrieval"],
    }
    means = {
        group: {label: round(float(np.mean([scores[n][label] for n in members])), 2) for label in labels}
        for group, members in groups.items()
        if members
    }
    ks = np.array(list(encoder.used.values()))  # (distinct task texts, thresholds)
    mean_k = {f"auto t={t}": round(float(ks[:, i].mean()), 2) for i, t in enumerate(THRESHOLDS)}
    result = {
        "experiment": "auto_steps",
        "tasks": names,
        "limit": args.limit,
        "cluster_starts": args.cluster_starts,
        "model": "genembed.load() (shipped adapter, centred, float32)",
        "mean_score": means,
        "mean_k": mean_k,
        "texts_counted": len(ks),
        "k_histogram": {
            f"auto t={t}": np.bincount(ks[:, i], minlength=K_MAX + 1)[1:].tolist() for i, t in enumerate(THRESHOLDS)
        },
        "scores": scores,
        "seconds": round(time.perf_counter() - start),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'view':16s} " + " ".join(f"{g:>9s}" for g in means) + "  mean K")
    for label in labels:
        print(f"{label:16s} " + " ".join(f"{means[g][label]:9.2f}" for g in means) + f"  {mean_k.get(label, '')}")


if __name__ == "__main__":
    main()

"""Consistency check of the evaluation harness against an independent implementation.

The independent side uses only transformers, numpy, scipy and scikit-learn (no genembed code except
to find the default model's converted folder): it reads the task files itself, formats texts as
``f"{instruction}\\n{text}"`` (the bare text when the instruction is empty), right-pads, truncates to
256 tokens, runs the model with causal attention, mean-pools the *text* tokens (the instruction and
its newline are attended to but not pooled, as genembed's ``mean`` does; the split comes from the
tokenizer's character offsets), L2-normalises, and computes every metric with its own code
(numpy exhaustive search instead of faiss, a hand-written nDCG@10).

The genembed side is ``genembed eval --method mean --attention causal --prompt-format plain
--max-length 256`` (no adapter, default model). The check passes when every task agrees within
0.5 points.

Run (2 CPU cores; tens of minutes for the full dev set):

    flock /tmp/genembed-cpu.lock .venv/bin/genembed eval ../shared/data/dev --method mean \\
        --attention causal --prompt-format plain --max-length 256 --no-cache \\
        --out benchmarks/results/eval_mean_plain.json
    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/consistency_check.py \\
        --genembed-results benchmarks/results/eval_mean_plain.json --out benchmarks/results/consistency.json

Without ``--genembed-results`` the genembed side is run in-process first. ``--limit N`` checks a
subset (the same row selection as ``genembed eval --limit N``, re-implemented here from its docs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 0.5
MAX_LENGTH = 256


# ----------------------------------------------------------------------------- data (own reader)


def read_jsonl(path: Path, limit: int | None = None) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows[:limit] if limit else rows


def read_task(folder: Path, limit: int | None) -> dict:
    meta = json.loads((folder / "task.json").read_text(encoding="utf-8"))
    kind = meta["type"]
    if kind in ("sts", "pair"):
        meta["rows"] = read_jsonl(folder / "pairs.jsonl", limit)
    elif kind in ("clustering", "instruct"):
        meta["rows"] = read_jsonl(folder / "data.jsonl", limit)
    elif kind == "classification":
        train = read_jsonl(folder / "train.jsonl")
        if limit:  # round-robin over labels in file order, then file order again
            groups: dict[str, list[int]] = defaultdict(list)
            for i, row in enumerate(train):
                groups[str(row["label"])].append(i)
            picked: list[int] = []
            rank = 0
            while len(picked) < min(limit, len(train)):
                picked += [g[rank] for g in groups.values() if rank < len(g)][: limit - len(picked)]
                rank += 1
            train = [train[i] for i in sorted(picked)]
        meta["train"], meta["test"] = train, read_jsonl(folder / "test.jsonl", limit)
    elif kind == "retrieval":
        corpus = read_jsonl(folder / "corpus.jsonl")
        queries = read_jsonl(folder / "queries.jsonl")
        qrels: dict[str, dict[str, float]] = defaultdict(dict)
        for line in (folder / "qrels.tsv").read_text(encoding="utf-8").splitlines():
            if line.strip():
                qid, did, gain = line.split("\t")
                qrels[qid][did] = float(gain)
        queries = [q for q in queries if any(g > 0 for g in qrels.get(str(q["id"]), {}).values())]
        if limit:
            queries = queries[:limit]
            judged = {d for q in queries for d in qrels[str(q["id"])]}
            others = [d for d in corpus if str(d["id"]) not in judged][:limit]
            keep = judged | {str(d["id"]) for d in others}
            corpus = [d for d in corpus if str(d["id"]) in keep]
        meta["corpus"], meta["queries"], meta["qrels"] = corpus, queries, qrels
    return meta


# ----------------------------------------------------------------------------- encoder (plain transformers)


class PlainMeanEncoder:
    """Right-padded causal forward pass, mean over the text tokens, L2-normalised."""

    def __init__(self, folder: str, batch_size: int = 32):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
        self.batch_size = batch_size

    def __call__(self, texts: list[str], instruction: str) -> np.ndarray:
        prefix = f"{instruction}\n" if instruction else ""
        full = [prefix + t for t in texts]
        order = np.argsort([-len(t) for t in full], kind="stable")
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            enc = self.tokenizer(
                [full[i] for i in idx],
                padding=True,
                truncation=True,
                max_length=MAX_LENGTH,
                add_special_tokens=False,
                return_offsets_mapping=True,
                return_tensors="pt",
            )
            offsets = enc.pop("offset_mapping")
            mask = enc["attention_mask"].bool()
            text_mask = mask & (offsets[..., 0] >= len(prefix))
            empty = ~text_mask.any(dim=1)  # an empty text: pool over the whole prompt
            text_mask[empty] = mask[empty]
            with self.torch.inference_mode():
                hidden = self.model(**enc).last_hidden_state
            weights = text_mask.unsqueeze(-1).float()
            pooled = (hidden * weights).sum(1) / weights.sum(1)
            out[idx] = pooled.numpy()
        return out / np.linalg.norm(out, axis=1, keepdims=True)


# ----------------------------------------------------------------------------- metrics (own code)


def ndcg10(ranked: list[str], judged: dict[str, float]) -> float:
    dcg = sum(judged.get(d, 0.0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    best = sorted((g for g in judged.values() if g > 0), reverse=True)[:10]
    return 100 * dcg / sum(g / math.log2(i + 2) for i, g in enumerate(best))


def score_task(task: dict, enc: PlainMeanEncoder) -> float:
    from scipy.stats import spearmanr
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import average_precision_score, v_measure_score

    kind, ins = task["type"], task["instruction"]
    if kind in ("sts", "pair"):
        a = enc([r["s1"] for r in task["rows"]], ins)
        b = enc([r["s2"] for r in task["rows"]], ins)
        cos = (a * b).sum(1)
        if kind == "sts":
            return 100 * spearmanr(cos, [r["score"] for r in task["rows"]])[0]
        return 100 * average_precision_score([r["label"] for r in task["rows"]], cos)
    if kind == "classification":
        x_train = enc([r["text"] for r in task["train"]], ins)
        x_test = enc([r["text"] for r in task["test"]], ins)
        clf = LogisticRegression(max_iter=100).fit(x_train, [str(r["label"]) for r in task["train"]])
        return 100 * float(np.mean(clf.predict(x_test) == np.array([str(r["label"]) for r in task["test"]])))

    def v_measure(x: np.ndarray, labels: list) -> float:
        km = MiniBatchKMeans(n_clusters=len(set(labels)), batch_size=500, n_init=1, random_state=42).fit(x)
        return 100 * v_measure_score(labels, km.labels_)

    if kind == "clustering":
        return v_measure(enc([r["text"] for r in task["rows"]], ins), [r["label"] for r in task["rows"]])
    if kind == "instruct":
        texts = [r["text"] for r in task["rows"]]
        per_axis = [
            v_measure(enc(texts, axis_ins), [r["labels"][axis] for r in task["rows"]])
            for axis, axis_ins in task["instructions"].items()
        ]
        return float(np.mean(per_axis))
    if kind == "retrieval":
        docs = [(d["title"] + " " + d["text"]) if d.get("title") else d["text"] for d in task["corpus"]]
        doc_ids = [str(d["id"]) for d in task["corpus"]]
        q = enc([r["text"] for r in task["queries"]], ins)
        d = enc(docs, task.get("doc_instruction", ""))
        top = np.argsort(-(q @ d.T), axis=1, kind="stable")[:, :10]
        per_query = [
            ndcg10([doc_ids[i] for i in row], task["qrels"][str(r["id"])])
            for row, r in zip(top, task["queries"], strict=True)
        ]
        return float(np.mean(per_query))
    raise ValueError(f"unknown task type {kind}")


# ----------------------------------------------------------------------------- driver


def genembed_side(dev: Path, limit: int | None, out: Path) -> Path:
    cli = str(Path(sys.executable).with_name("genembed"))
    cmd = [cli, "eval", str(dev), "--method", "mean", "--attention", "causal"]
    cmd += ["--prompt-format", "plain", "--max-length", str(MAX_LENGTH), "--no-cache", "--out", str(out)]
    cmd += ["--limit", str(limit)] if limit else []
    subprocess.run(cmd, check=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dev", type=Path, default=REPO.parent / "shared" / "data" / "dev")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--genembed-results", type=Path, default=None, help="a genembed eval JSON to compare with")
    parser.add_argument("--model-dir", default=None, help="HF folder of the model (default: genembed's default)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "consistency.json")
    args = parser.parse_args()

    if args.genembed_results is None:
        args.genembed_results = genembed_side(
            args.dev, args.limit, args.out.with_name(args.out.stem + "_genembed.json")
        )
    ours = json.loads(args.genembed_results.read_text())
    if ours["config"].get("limit") != args.limit:
        raise SystemExit(f"{args.genembed_results} was run with limit {ours['config'].get('limit')}, not {args.limit}")
    genembed_scores = {t["name"]: t["score"] for t in ours["tasks"]}

    folder = args.model_dir
    if folder is None:
        from genembed.backbone.default_model import default_gguf_path
        from genembed.backbone.loading import converted_gguf_folder

        folder = str(converted_gguf_folder(default_gguf_path()))
    enc = PlainMeanEncoder(folder)
    rows, start = [], time.perf_counter()
    for task_dir in sorted(p for p in args.dev.iterdir() if (p / "task.json").is_file()):
        t0 = time.perf_counter()
        task = read_task(task_dir, args.limit)
        independent = score_task(task, enc)
        ge = genembed_scores.get(task["name"])
        diff = None if ge is None else ge - independent
        rows.append({"task": task["name"], "genembed": ge, "independent": independent, "diff": diff})
        print(
            f"{task['name']:<16} genembed {ge:7.2f}  independent {independent:7.2f}  diff {diff:+.3f}"
            f"  ({time.perf_counter() - t0:.0f}s)",
            flush=True,
        )
    ok = all(r["diff"] is not None and abs(r["diff"]) <= TOLERANCE for r in rows)
    result = {
        "config": {
            "method": "mean",
            "attention": "causal",
            "prompt_format": "plain",
            "max_length": MAX_LENGTH,
            "padding": "right (independent) / left (genembed)",
            "limit": args.limit,
            "model_dir": folder,
            "genembed_results": str(args.genembed_results),
            "tolerance": TOLERANCE,
            "torch_threads": __import__("torch").get_num_threads(),
            "git_commit": _git_commit(),
        },
        "independent_seconds": round(time.perf_counter() - start, 1),
        "genembed_seconds": ours.get("seconds"),
        "max_abs_diff": max(abs(r["diff"]) for r in rows if r["diff"] is not None),
        "passed": ok,
        "tasks": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, args.out)
    print(f"max |diff| {result['max_abs_diff']:.3f} -> {'PASS' if ok else 'FAIL'} (tolerance {TOLERANCE}); {args.out}")
    return 0 if ok else 1


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())

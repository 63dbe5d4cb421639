"""Toy task folders and deterministic fake encoders for the evaluation tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest


def write_task(root: Path, name: str, meta: dict, files: dict[str, list | str]) -> Path:
    """A task folder: ``task.json`` from ``meta`` plus data files (lists become JSON lines)."""
    folder = root / name
    folder.mkdir(parents=True)
    full = {"name": name, "source": "test", "license": "test", "instruction": ""} | meta
    (folder / "task.json").write_text(json.dumps(full))
    for file, content in files.items():
        text = content if isinstance(content, str) else "".join(json.dumps(row) + "\n" for row in content)
        (folder / file).write_text(text)
    return folder


class BagOfWords:
    """Hashed bag of words (64 dims); the instruction, if any, adds a small fixed offset. Records calls."""

    name = "bag-of-words"

    def __init__(self, cache_key: str | None = "bow-1", dim: int = 64):
        self.cache_key = cache_key
        self.dim = dim
        self.calls: list[tuple[list[str], str]] = []

    def vector(self, text: str, instruction: str = "") -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for word in text.lower().split():
            v[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        if instruction:
            v[int(hashlib.md5(instruction.encode()).hexdigest(), 16) % self.dim] += 0.1
        if not v.any():
            v[0] = 1.0
        return v

    def encode(self, texts: list[str], *, instruction: str) -> np.ndarray:
        self.calls.append((list(texts), instruction))
        return np.stack([self.vector(t, instruction) for t in texts])


@pytest.fixture
def make_task():
    """``make_task(root, name, meta, files)`` writes a task folder (see :func:`write_task`)."""
    return write_task


@pytest.fixture
def bag_of_words():
    """The :class:`BagOfWords` fake encoder class."""
    return BagOfWords


@pytest.fixture
def toy_tasks(tmp_path) -> Path:
    """One small folder per task type under ``tmp_path / "tasks"``."""
    root = tmp_path / "tasks"
    words = ["cat", "dog", "sun", "rain", "tax", "law", "car", "road"]
    pairs = [
        {"s1": "a cat sleeps", "s2": "a cat naps", "score": 4.5},
        {"s1": "the dog runs", "s2": "a dog runs fast", "score": 4.0},
        {"s1": "sun and rain", "s2": "rain and wind", "score": 2.5},
        {"s1": "tax law", "s2": "a red car", "score": 0.5},
        {"s1": "the road", "s2": "a cat sleeps", "score": 1.0},
    ]
    write_task(
        root,
        "toy-sts",
        {"type": "sts", "metric": "spearman", "instruction": "Find similar text."},
        {"pairs.jsonl": pairs},
    )
    labelled = [{"s1": p["s1"], "s2": p["s2"], "label": int(p["score"] > 2)} for p in pairs]
    write_task(
        root, "toy-pair", {"type": "pair", "metric": "ap", "instruction": "Same meaning?"}, {"pairs.jsonl": labelled}
    )
    train = [{"text": f"{w} {w} thing", "label": w} for w in words[:4] for _ in range(2)]
    test = [{"text": f"the {w}", "label": w} for w in words[:4]]
    write_task(
        root,
        "toy-classification",
        {"type": "classification", "metric": "accuracy", "instruction": "Classify."},
        {"train.jsonl": train, "test.jsonl": test},
    )
    data = [{"text": f"{w} {w} {i}", "label": w} for i in range(3) for w in words[:3]]
    write_task(
        root,
        "toy-clustering",
        {"type": "clustering", "metric": "v_measure", "instruction": "Topic?"},
        {"data.jsonl": data},
    )
    corpus = [
        {"id": "d1", "title": "Cats", "text": "a cat sleeps all day"},
        {"id": "d2", "title": "", "text": "dogs run in the park"},
        {"id": "d3", "title": "Tax", "text": "tax law is complex"},
        {"id": "d4", "title": "Cars", "text": "a car on the road"},
    ]
    queries = [{"id": "q1", "text": "cat"}, {"id": "q2", "text": "tax law"}, {"id": "q3", "text": "car road"}]
    write_task(
        root,
        "toy-retrieval",
        {"type": "retrieval", "metric": "ndcg@10", "instruction": "Find documents.", "doc_instruction": ""},
        {"corpus.jsonl": corpus, "queries.jsonl": queries, "qrels.tsv": "q1\td1\t2\nq2\td3\t1\nq3\td4\t1\nq3\td2\t1\n"},
    )
    rows = [
        {"text": f"{s} {d} item {i}", "labels": {"sentiment": s, "domain": d}}
        for i in range(2)
        for s in ("good", "bad")
        for d in ("movie", "phone")
    ]
    write_task(
        root,
        "toy-instruct",
        {
            "type": "instruct",
            "metric": "v_measure_instructed",
            "instructions": {"sentiment": "Sentiment?", "domain": "Domain?"},
        },
        {"data.jsonl": rows},
    )
    return root

"""Load and validate an evaluation task folder (format: ``shared/data/README.md``).

A task is a folder with ``task.json`` and UTF-8 JSON-lines data files::

    sts             pairs.jsonl      {"s1", "s2", "score"}
    retrieval       corpus.jsonl     {"id", "title", "text"}, queries.jsonl {"id", "text"},
                    qrels.tsv        qid<TAB>docid<TAB>gain (no header)
    classification  train.jsonl, test.jsonl  {"text", "label"}
    clustering      data.jsonl       {"text", "label"}
    pair            pairs.jsonl      {"s1", "s2", "label"}  (label 0/1)
    instruct        data.jsonl       {"text", "labels": {axis: label}}; task.json has "instructions": {axis: text}

Every problem raises :class:`TaskFormatError` naming the file, the line and the field. Texts are
used exactly as stored; a retrieval document is ``title + " " + text`` when the title is non-empty.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._files import FileFormatError, read_jsonl, read_lines, require_field

__all__ = [
    "METRICS",
    "ClassificationData",
    "ClusteringData",
    "InstructData",
    "PairData",
    "RetrievalData",
    "Task",
    "TaskFormatError",
    "find_task_dirs",
    "load_task",
]

METRICS = {
    "sts": "spearman",
    "retrieval": "ndcg@10",
    "classification": "accuracy",
    "clustering": "v_measure",
    "pair": "ap",
    "instruct": "v_measure_instructed",
}


class TaskFormatError(FileFormatError):
    """A task folder does not follow the task format; the message names file, line and field."""


@dataclass
class PairData:
    """sts (``targets`` are scores) and pair (``targets`` are 0/1 labels) tasks."""

    s1: list[str]
    s2: list[str]
    targets: list[float]


@dataclass
class RetrievalData:
    """``qrels[qid][docid] = gain``; ``doc_texts`` are already ``title + " " + text``."""

    doc_ids: list[str]
    doc_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, float]]
    warnings: list[str] = field(default_factory=list)


@dataclass
class ClassificationData:
    train_texts: list[str]
    train_labels: list[str]
    test_texts: list[str]
    test_labels: list[str]


@dataclass
class ClusteringData:
    texts: list[str]
    labels: list[str]


@dataclass
class InstructData:
    """``labels[axis]`` holds one label per text."""

    texts: list[str]
    labels: dict[str, list[str]]


@dataclass
class Task:
    """A loaded, validated task. ``data`` is one of the ``*Data`` classes above, by ``type``."""

    path: Path
    name: str
    type: str
    metric: str
    instruction: str
    doc_instruction: str
    instructions: dict[str, str]
    data: Any
    limit: int | None = None
    mteb_name: str = ""  # the MTEB task this folder samples (optional ``mteb_name`` in task.json): a
    # published model's per-task instructions are looked up by it, else by ``name``


def find_task_dirs(paths: list[str | Path]) -> list[Path]:
    """Expand paths into task folders: a folder with ``task.json`` is a task, otherwise its direct
    subfolders holding a ``task.json`` are (sorted by name).

    Raises:
        TaskFormatError: a path does not exist or holds no task.
    """
    found: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_dir():
            raise TaskFormatError(path, None, "not a folder")
        if (path / "task.json").is_file():
            found.append(path)
            continue
        children = sorted(p for p in path.iterdir() if (p / "task.json").is_file())
        if not children:
            raise TaskFormatError(path, None, "holds no task.json and no task folders")
        found.extend(children)
    return found


def load_task(path: str | Path, *, limit: int | None = None) -> Task:
    """Load and validate a task folder.

    Args:
        path: the task folder.
        limit: keep at most this many rows per data file, in file order (for quick runs). Retrieval
            keeps the first ``limit`` queries with a relevant document, every document judged for
            them and the first ``limit`` other documents; classification takes training rows
            round-robin over labels so that every label stays represented while possible.

    Raises:
        TaskFormatError: the folder does not follow the format (the message names file, line and field).
    """
    path = Path(path).expanduser()
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    meta_path = path / "task.json"
    if not meta_path.is_file():
        raise TaskFormatError(meta_path, None, "missing (every task folder needs a task.json)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TaskFormatError(meta_path, None, f"not valid JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise TaskFormatError(meta_path, None, "must hold a JSON object")
    name = _field(meta, "name", str, meta_path)
    kind = _field(meta, "type", str, meta_path)
    if kind not in METRICS:
        raise TaskFormatError(meta_path, None, f"field 'type' must be one of {sorted(METRICS)}, got {kind!r}")
    metric = _field(meta, "metric", str, meta_path)
    if metric != METRICS[kind]:
        raise TaskFormatError(
            meta_path, None, f"field 'metric' of a {kind} task must be {METRICS[kind]!r}, got {metric!r}"
        )
    instruction = _field(meta, "instruction", str, meta_path)
    doc_instruction = _field(meta, "doc_instruction", str, meta_path, default="")
    mteb_name = _field(meta, "mteb_name", str, meta_path, default="")
    instructions: dict[str, str] = {}
    if kind == "instruct":
        instructions = _field(meta, "instructions", dict, meta_path)
        if not instructions:
            raise TaskFormatError(meta_path, None, "field 'instructions' must map at least one axis to an instruction")
        for axis, text in instructions.items():
            if not isinstance(text, str):
                raise TaskFormatError(meta_path, None, f"field 'instructions.{axis}' must be a string")
    loader = _LOADERS[kind]
    data = loader(path, limit, instructions) if kind == "instruct" else loader(path, limit)
    return Task(path, name, kind, metric, instruction, doc_instruction, instructions, data, limit, mteb_name)


# ---------------------------------------------------------------- readers


_field = functools.partial(require_field, error=TaskFormatError)


def _label(obj: dict, key: str, where: Path | str, line: int) -> str:
    """A string or integer label, as a string."""
    return str(require_field(obj, key, (str, int), where, line, error=TaskFormatError))


def _jsonl(path: Path, limit: int | None = None) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line; at most ``limit`` rows."""
    return list(itertools.islice(read_jsonl(path, error=TaskFormatError), limit))


def _load_pairs(path: Path, limit: int | None, *, target: str) -> PairData:
    file = path / "pairs.jsonl"
    s1, s2, targets = [], [], []
    for line, row in _jsonl(file, limit):
        s1.append(_field(row, "s1", str, file, line=line))
        s2.append(_field(row, "s2", str, file, line=line))
        value = _field(row, target, float, file, line=line)
        if target == "label" and value not in (0, 1):
            raise TaskFormatError(file, line, f"field 'label' must be 0 or 1, got {value!r}")
        targets.append(float(value))
    if target == "label" and not any(targets):
        raise TaskFormatError(file, None, "average precision needs at least one pair with label 1")
    return PairData(s1, s2, targets)


def _load_sts(path: Path, limit: int | None) -> PairData:
    return _load_pairs(path, limit, target="score")


def _load_pair(path: Path, limit: int | None) -> PairData:
    return _load_pairs(path, limit, target="label")


def _labelled(file: Path, limit: int | None) -> tuple[list[str], list[str]]:
    texts, labels = [], []
    for line, row in _jsonl(file, limit):
        texts.append(_field(row, "text", str, file, line=line))
        labels.append(_label(row, "label", file, line))
    return texts, labels


def _load_classification(path: Path, limit: int | None) -> ClassificationData:
    train_texts, train_labels = _labelled(path / "train.jsonl", None)
    if limit is not None:  # round-robin over labels so that a small limit keeps many labels
        by_label: dict[str, list[int]] = defaultdict(list)
        for i, label in enumerate(train_labels):
            by_label[label].append(i)
        order = []
        for rank in range(max(len(ids) for ids in by_label.values())):
            order.extend(ids[rank] for ids in by_label.values() if rank < len(ids))
        keep = sorted(order[:limit])
        train_texts, train_labels = [train_texts[i] for i in keep], [train_labels[i] for i in keep]
    if len(set(train_labels)) < 2:
        raise TaskFormatError(path / "train.jsonl", None, "needs at least two labels to fit a classifier")
    test_texts, test_labels = _labelled(path / "test.jsonl", limit)
    return ClassificationData(train_texts, train_labels, test_texts, test_labels)


def _load_clustering(path: Path, limit: int | None) -> ClusteringData:
    texts, labels = _labelled(path / "data.jsonl", limit)
    return ClusteringData(texts, labels)


def _load_instruct(path: Path, limit: int | None, instructions: dict[str, str]) -> InstructData:
    file = path / "data.jsonl"
    texts: list[str] = []
    labels: dict[str, list[str]] = {axis: [] for axis in instructions}
    for line, row in _jsonl(file, limit):
        texts.append(_field(row, "text", str, file, line=line))
        row_labels = _field(row, "labels", dict, file, line=line)
        extra = sorted(set(row_labels) - set(instructions))
        if extra:
            raise TaskFormatError(file, line, f"field 'labels' has axis {extra[0]!r}, not in task.json instructions")
        for axis in instructions:
            if axis not in row_labels:
                raise TaskFormatError(file, line, f"field 'labels' lacks axis {axis!r}")
            labels[axis].append(_label(row_labels, axis, file, line))
    return InstructData(texts, labels)


def _load_retrieval(path: Path, limit: int | None) -> RetrievalData:
    corpus_file, query_file = path / "corpus.jsonl", path / "queries.jsonl"

    def doc_text(row: dict, line: int) -> str:
        title = _field(row, "title", str, corpus_file, default="", line=line)
        text = _field(row, "text", str, corpus_file, line=line)
        return f"{title} {text}" if title else text

    docs = _texts_by_id(corpus_file, doc_text)
    queries = _texts_by_id(query_file, lambda row, line: _field(row, "text", str, query_file, line=line))
    qrels = _read_qrels(path / "qrels.tsv")
    warnings = []
    unknown_q = sorted(set(qrels) - set(queries))
    if unknown_q:
        warnings.append(
            f"qrels.tsv: {len(unknown_q)} query ids not in queries.jsonl were ignored (e.g. {unknown_q[0]!r})"
        )
    missing_docs = {d for judged in qrels.values() for d in judged} - set(docs)
    if missing_docs:
        warnings.append(
            f"qrels.tsv: {len(missing_docs)} judged document ids are not in corpus.jsonl "
            "(they still count in the ideal DCG)"
        )
    kept = [q for q in queries if any(g > 0 for g in qrels.get(q, {}).values())]
    if len(kept) < len(queries):
        warnings.append(f"{len(queries) - len(kept)} queries have no relevant document in qrels.tsv and are not scored")
    if not kept:
        raise TaskFormatError(path / "qrels.tsv", None, "no query of queries.jsonl has a relevant document")
    if limit is not None:
        kept = kept[:limit]
        judged = {d for q in kept for d in qrels[q]}
        others = [d for d in docs if d not in judged][:limit]
        keep_docs = judged | set(others)
        docs = {d: t for d, t in docs.items() if d in keep_docs}
    return RetrievalData(
        doc_ids=list(docs),
        doc_texts=list(docs.values()),
        query_ids=kept,
        query_texts=[queries[q] for q in kept],
        qrels={q: qrels[q] for q in kept},
        warnings=warnings,
    )


def _texts_by_id(file: Path, text: Callable[[dict, int], str]) -> dict[str, str]:
    """``{row id: text(row, line)}`` of a JSONL file whose ids are unique (TaskFormatError otherwise)."""
    out: dict[str, str] = {}
    for line, row in _jsonl(file):
        row_id = _label(row, "id", file, line)
        if row_id in out:
            raise TaskFormatError(file, line, f"duplicate id {row_id!r}")
        out[row_id] = text(row, line)
    return out


def _read_qrels(file: Path) -> dict[str, dict[str, float]]:
    qrels: dict[str, dict[str, float]] = defaultdict(dict)
    for number, line in read_lines(file, error=TaskFormatError):
        parts = line.rstrip("\r\n").split("\t")
        if len(parts) != 3:
            raise TaskFormatError(file, number, f"expected qid<TAB>docid<TAB>gain, got {len(parts)} columns")
        qid, docid, gain_text = parts
        try:
            gain = float(gain_text)
        except ValueError:
            raise TaskFormatError(
                file, number, f"gain {gain_text!r} is not a number (qrels.tsv has no header line)"
            ) from None
        if not math.isfinite(gain):
            raise TaskFormatError(file, number, f"gain must be finite, got {gain_text!r}")
        if docid in qrels[qid]:
            raise TaskFormatError(file, number, f"duplicate judgement for query {qid!r} and document {docid!r}")
        qrels[qid][docid] = gain
    if not qrels:
        raise TaskFormatError(file, None, "holds no judgements")
    return dict(qrels)


_LOADERS: dict[str, Any] = {
    "sts": _load_sts,
    "retrieval": _load_retrieval,
    "classification": _load_classification,
    "clustering": _load_clustering,
    "pair": _load_pair,
    "instruct": _load_instruct,
}

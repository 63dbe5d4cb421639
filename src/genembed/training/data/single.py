"""Single texts: one sequence per example, for objectives whose signal is a teacher's embedding of the text.

A file is either a texts file, ``{"text": "..."}`` per line, or a contrastive file (see
:mod:`.contrastive`), whose every distinct text (queries, positives, negatives) becomes one example.
Texts are embedded without an instruction, as the teacher saw them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .contrastive import contrastive_row
from .jsonl import DataError, iter_jsonl, require_string

__all__ = ["is_texts_file", "read_single_texts", "row_texts"]


def read_single_texts(path: str | Path) -> list[str]:
    """The distinct texts of a texts file or a contrastive file, in first-seen order.

    Raises:
        DataError: a malformed line; in a texts file, a missing or empty ``text`` or another field.
    """
    texts: dict[str, None] = {}
    kind = None
    for line, obj in iter_jsonl(path):
        kind = kind or ("text" if "text" in obj else "contrastive")  # the first row decides
        if kind == "text":
            if set(obj) != {"text"}:
                extra = sorted(set(obj) - {"text"}) or ["text"]
                raise DataError(path, line, f"a texts file has one field 'text' per line, got {extra[0]!r}")
            texts.setdefault(require_string(obj, "text", path, line), None)
        else:
            texts.update(dict.fromkeys(row_texts([contrastive_row(obj, path, line)])))
    return list(texts)


def row_texts(rows: Iterable) -> list[str]:
    """Every text of contrastive rows (queries, positives, negatives), each once, in first-seen order."""
    return list(dict.fromkeys(text for row in rows for text in (row.query, *row.pos, *row.neg)))


def is_texts_file(path: str | Path) -> bool:
    """Whether ``path`` is a texts file (its first row has ``text``) rather than a contrastive file."""
    return "text" in next(iter_jsonl(path))[1]

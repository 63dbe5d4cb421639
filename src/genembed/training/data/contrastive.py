"""Contrastive training rows: ``{"query", "pos": [...], "neg": [...], "instruction"}`` per line.

``query`` and ``pos`` (at least one text) are required; ``neg`` (hard negatives) and ``instruction``
(the query-side instruction) may be left out. Any other key is an error, so a typo such as
``"negs"`` is not silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .jsonl import DataError, iter_jsonl, require_string, require_string_list

__all__ = ["ContrastiveRow", "read_contrastive"]

_FIELDS = ("query", "pos", "neg", "instruction")


@dataclass(frozen=True)
class ContrastiveRow:
    """One query with its positive texts, hard negatives and instruction."""

    query: str
    pos: tuple[str, ...]
    neg: tuple[str, ...]
    instruction: str = ""


def read_contrastive(path: str | Path) -> list[ContrastiveRow]:
    """Read and validate a contrastive JSONL file.

    Raises:
        DataError: a malformed line, a missing or empty field, or an unknown field; the message names
            the file, the line number and the field.
    """
    rows = []
    for line, obj in iter_jsonl(path):
        unknown = sorted(set(obj) - set(_FIELDS))
        if unknown:
            raise DataError(path, line, f"unknown field {unknown[0]!r} (expected {', '.join(_FIELDS)})")
        query = require_string(obj, "query", path, line)
        pos = require_string_list(obj, "pos", path, line, min_items=1)
        neg = require_string_list(obj, "neg", path, line, min_items=0) if "neg" in obj else []
        instruction = require_string(obj, "instruction", path, line, empty_ok=True) if "instruction" in obj else ""
        rows.append(ContrastiveRow(query, tuple(pos), tuple(neg), instruction))
    return rows

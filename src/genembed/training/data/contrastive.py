"""Contrastive training rows: ``{"query", "pos": [...], "neg": [...], "instruction", "label"}`` per line.

``query`` and ``pos`` (at least one text) are required; ``neg`` (hard negatives), ``instruction``
(the query-side instruction) and ``label`` may be left out. ``label`` names the class of the query and
its positives (e.g. a sentiment or an intent); its hard negatives are of another class. In a batch of
labelled rows, another row's positive of the same class is not used as a negative (it is a false
one), nor is another row's hard negative when that row's class differs (it may be of this row's
class). Any other key is an error, so a typo such as ``"negs"`` is not silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .jsonl import DataError, iter_jsonl, require_string, require_string_list

__all__ = ["ContrastiveRow", "contrastive_row", "read_contrastive"]

_FIELDS = ("query", "pos", "neg", "instruction", "label")


@dataclass(frozen=True)
class ContrastiveRow:
    """One query with its positive texts, hard negatives and instruction."""

    query: str
    pos: tuple[str, ...]
    neg: tuple[str, ...]
    instruction: str = ""
    label: str | None = None


def read_contrastive(path: str | Path) -> list[ContrastiveRow]:
    """Read and validate a contrastive JSONL file.

    Raises:
        DataError: a malformed line, a missing or empty field, or an unknown field; the message names
            the file, the line number and the field.
    """
    return [contrastive_row(obj, path, line) for line, obj in iter_jsonl(path)]


def contrastive_row(obj: dict, path: str | Path, line: int) -> ContrastiveRow:
    """One parsed line of a contrastive file as a row (checked; errors name ``path``, ``line`` and the field)."""
    unknown = sorted(set(obj) - set(_FIELDS))
    if unknown:
        raise DataError(path, line, f"unknown field {unknown[0]!r} (expected {', '.join(_FIELDS)})")
    query = require_string(obj, "query", path, line)
    pos = require_string_list(obj, "pos", path, line, min_items=1)
    neg = require_string_list(obj, "neg", path, line, min_items=0) if "neg" in obj else []
    instruction = require_string(obj, "instruction", path, line, empty_ok=True) if "instruction" in obj else ""
    label = require_string(obj, "label", path, line) if "label" in obj else None
    return ContrastiveRow(query, tuple(pos), tuple(neg), instruction, label)

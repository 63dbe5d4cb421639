"""Single texts: one sequence per example, for objectives whose signal is a teacher's embedding of the text.

A file is either a texts file, ``{"text": "..."}`` per line, or a contrastive file (see
:mod:`.contrastive`), whose every distinct text (queries, positives, negatives) becomes one example.
Texts are embedded without an instruction, as the teacher saw them, or (``single.instruction: row``) each
under the instruction its row gives it in contrastive training (:func:`read_single_prompts`), so the student
learns the teacher's geometry where it is used: under the tasks' instructions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from .contrastive import ContrastiveRow, contrastive_row
from .jsonl import DataError, iter_jsonl, require_string

__all__ = [
    "SINGLE_INSTRUCTIONS",
    "distinct_prompts",
    "is_texts_file",
    "read_single_prompts",
    "read_single_rows",
    "read_single_texts",
    "row_partners",
    "row_texts",
]

SINGLE_INSTRUCTIONS = ("none", "row")  # single.instruction: texts read bare, or under their rows' instructions


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


def read_single_prompts(
    path: str | Path,
    *,
    symmetric: bool = False,
    doc_instruction: str = "",
    keep: Callable[[list[ContrastiveRow]], list[ContrastiveRow]] | None = None,
) -> list[tuple[str, str]]:
    """The distinct ``(text, instruction)`` pairs of a file, each text under the instruction contrastive
    training gives it: a query under its row's instruction, a document under ``doc_instruction``, or under
    its row's instruction too when the file is ``symmetric``. A texts file's texts have no instruction.
    ``keep``: of a contrastive file, only the rows it returns (e.g. one label axis).

    Raises:
        DataError: as :func:`read_single_texts`; ``keep`` on a texts file (it has no rows to choose).
    """
    return distinct_prompts(read_single_rows(path, symmetric=symmetric, doc_instruction=doc_instruction, keep=keep))


def read_single_rows(
    path: str | Path,
    *,
    symmetric: bool = False,
    doc_instruction: str = "",
    keep: Callable[[list[ContrastiveRow]], list[ContrastiveRow]] | None = None,
) -> list[list[tuple[str, str]]]:
    """Each kept row of a file as its ``(text, instruction)`` prompts (the query, then its documents, under
    the instructions :func:`read_single_prompts` gives); a texts file's texts each alone, without one.

    Raises:
        DataError: as :func:`read_single_prompts`.
    """
    if is_texts_file(path):
        if keep is not None:
            raise DataError(path, None, "skip_instructions and axes choose rows of a contrastive file, not texts")
        return [[(text, "")] for text in read_single_texts(path)]
    rows = [contrastive_row(obj, path, line) for line, obj in iter_jsonl(path)]
    groups = []
    for row in rows if keep is None else keep(rows):
        docs = row.instruction if symmetric else doc_instruction
        groups.append([(row.query, row.instruction), *((text, docs) for text in (*row.pos, *row.neg))])
    return groups


def distinct_prompts(rows: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """The prompts of :func:`read_single_rows`' rows, each once, in first-seen order."""
    return list(dict.fromkeys(prompt for row in rows for prompt in row))


def row_partners(
    rows: list[list[tuple[str, str]]], prompts: list[tuple[str, str]], *, bare: bool = False
) -> list[list[int]]:
    """Per prompt of ``prompts`` (:func:`distinct_prompts` of ``rows``, or with every instruction ``""``
    when ``bare``), the indices of the other prompts that share a row with it: a query's positives and
    negatives, a document's query and the row's other documents. A text that is no row's is nobody's partner.
    """
    index = {prompt: i for i, prompt in enumerate(prompts)}
    partners: list[set[int]] = [set() for _ in prompts]
    for row in rows:
        ids = {index[(text, "") if bare else (text, instruction)] for text, instruction in row}
        for i in ids:
            partners[i].update(ids - {i})
    return [sorted(p) for p in partners]


def row_texts(rows: Iterable) -> list[str]:
    """Every text of contrastive rows (queries, positives, negatives), each once, in first-seen order."""
    return list(dict.fromkeys(text for row in rows for text in (row.query, *row.pos, *row.neg)))


def is_texts_file(path: str | Path) -> bool:
    """Whether ``path`` is a texts file (its first row has ``text``) rather than a contrastive file."""
    return "text" in next(iter_jsonl(path))[1]

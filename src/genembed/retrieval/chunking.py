"""Read documents from JSONL, plain-text and Markdown files (or folders of them) and cut them into
token windows with overlap.

Sources:

- ``*.jsonl``: one JSON object per line with ``id`` (string or int) and ``text`` (string), and an
  optional ``title`` (string); any other fields are the document's ``meta`` (a Milvus store keeps
  them for filters). Blank lines are skipped.
- ``*.txt``: one document per file; its id is the file's path, its title empty.
- ``*.md`` / ``*.markdown``: one document per file; its title is the first ``# heading`` (else the
  file name without suffix).
- a folder: every file above inside it (recursively, sorted, hidden files skipped).

Bad input raises :class:`SourceError` naming the file, line and field. Chunks hold ``chunk_tokens``
tokens of the document text (consecutive chunks share ``overlap`` tokens); the title is not part of that
budget and is put in front of every chunk when it is embedded (``title + " " + text``, as in the shared
retrieval tasks), so every chunk knows which document it comes from.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._files import FileFormatError, read_jsonl, require_field

__all__ = ["SUFFIXES", "Chunk", "Document", "SourceError", "chunk_documents", "read_sources"]

SUFFIXES = {".jsonl": "jsonl", ".txt": "text", ".md": "markdown", ".markdown": "markdown"}
_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


class SourceError(FileFormatError):
    """A source file cannot be read as documents; the message names the file, line and field."""


@dataclass(frozen=True)
class Document:
    """One source document. ``source`` says where it came from (``path`` or ``path:line``); ``meta`` holds
    a JSONL record's fields other than id, title and text."""

    id: str
    title: str
    text: str
    source: str
    meta: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Chunk:
    """A window of a document's tokens: ``text`` is the exact substring of the document it covers."""

    doc_id: str
    number: int  # 0-based position of the chunk within its document
    title: str
    text: str
    source: str
    meta: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def id(self) -> str:
        return f"{self.doc_id}#{self.number}"

    @property
    def embed_text(self) -> str:
        """What is embedded (and shown to the generator): ``title + " " + text``, or ``text`` without a title."""
        return f"{self.title} {self.text}" if self.title else self.text


def read_sources(paths: Sequence[str | Path]) -> list[Document]:
    """Read every document in ``paths`` (files or folders), in order.

    Raises:
        FileNotFoundError: a path does not exist.
        SourceError: an unsupported file type, undecodable text, a bad JSONL line or field, a
            duplicate document id (the message names both places), or no documents at all.
    """
    if not paths:
        raise SourceError(None, None, "no sources given: pass JSONL, .txt or .md files or folders")
    docs: list[Document] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise FileNotFoundError(f"source not found: {path}")
        docs.extend(_read_path(path))
    seen: dict[str, str] = {}
    for doc in docs:
        if doc.id in seen:
            raise SourceError(doc.source, None, f"duplicate document id {doc.id!r} (first seen at {seen[doc.id]})")
        seen[doc.id] = doc.source
    if not docs:
        raise SourceError(None, None, f"no documents found in {', '.join(str(p) for p in paths)}")
    return docs


def _read_path(path: Path) -> Iterable[Document]:
    if path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*")
            if p.is_file()
            and p.suffix.lower() in SUFFIXES
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if not files:
            raise SourceError(path, None, f"folder holds no {', '.join(sorted(SUFFIXES))} files")
        for file in files:
            yield from _read_file(file)
    else:
        yield from _read_file(path)


def _read_file(path: Path) -> Iterable[Document]:
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise SourceError(path, None, f"unsupported file type {path.suffix!r}; expected {', '.join(sorted(SUFFIXES))}")
    if kind == "jsonl":
        yield from _parse_jsonl(path)
        return
    try:
        content = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(path, None, f"not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    text = content.strip()
    if not text:
        return  # an empty file is no document; a JSONL line with empty text is an error instead
    title = ""
    if kind == "markdown":
        heading = _HEADING.search(text)
        title = heading.group(1).strip() if heading else path.stem
    yield Document(id=path.as_posix(), title=title, text=text, source=str(path))


def _parse_jsonl(path: Path) -> Iterable[Document]:
    rows = read_jsonl(path, error=SourceError, expected="a JSON object with 'id' and 'text'", allow_empty=True)
    for number, row in rows:
        doc_id = require_field(row, "id", (str, int), path, number, error=SourceError)
        text = require_field(row, "text", str, path, number, error=SourceError, nonblank=True)
        title = require_field(row, "title", str, path, number, error=SourceError, default="")
        meta = {k: v for k, v in row.items() if k not in ("id", "title", "text")}
        yield Document(id=str(doc_id), title=title.strip(), text=text.strip(), source=f"{path}:{number}", meta=meta)


def chunk_documents(
    docs: Sequence[Document], tokenizer: Any, *, chunk_tokens: int = 256, overlap: int = 32
) -> list[Chunk]:
    """Cut each document's text into windows of ``chunk_tokens`` tokens, consecutive windows sharing
    ``overlap`` tokens. A chunk's text is the exact character span its tokens cover.

    Args:
        docs: documents from :func:`read_sources`.
        tokenizer: a fast (offset-mapping) Hugging Face tokenizer: the model's own, so that chunk
            sizes are real model tokens.
        chunk_tokens: tokens of document text per chunk (the title comes on top).
        overlap: tokens shared by consecutive chunks, ``0 <= overlap < chunk_tokens``.

    Raises:
        ValueError: bad sizes, or a tokenizer without offset mappings.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if not 0 <= overlap < chunk_tokens:
        raise ValueError(f"overlap must be in [0, chunk_tokens={chunk_tokens}), got {overlap}")
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("chunking needs a fast tokenizer (offset mappings); this one is a slow tokenizer")
    if not docs:
        return []
    encoded = tokenizer([d.text for d in docs], add_special_tokens=False, return_offsets_mapping=True)
    chunks: list[Chunk] = []
    step = chunk_tokens - overlap
    for doc, offsets in zip(docs, encoded["offset_mapping"], strict=True):
        n = len(offsets)
        start, number = 0, 0
        while start < n:
            stop = min(start + chunk_tokens, n)
            text = doc.text[offsets[start][0] : offsets[stop - 1][1]].strip()
            if text:
                chunks.append(Chunk(doc.id, number, doc.title, text, doc.source, doc.meta))
                number += 1
            if stop == n:
                break
            start += step
    return chunks

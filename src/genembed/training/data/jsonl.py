"""Reading training JSON-lines files with errors that name the file, the line and the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..._files import FileFormatError, read_jsonl, require_field

__all__ = ["DataError", "iter_jsonl", "require_string", "require_string_list"]


class DataError(FileFormatError):
    """A bad training data file; the message is ``file:line: field ...``."""


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for every non-blank line; each line must be one JSON object.

    Raises:
        DataError: the file is missing or empty, or a line is not a JSON object.
    """
    return read_jsonl(path, error=DataError)


def require_string(obj: dict[str, Any], key: str, path: str | Path, line: int, *, empty_ok: bool = False) -> str:
    """``obj[key]`` as a string; missing, non-string or (unless ``empty_ok``) blank values are errors."""
    return require_field(obj, key, str, path, line, error=DataError, nonblank=not empty_ok)


def require_string_list(obj: dict[str, Any], key: str, path: str | Path, line: int, *, min_items: int) -> list[str]:
    """``obj[key]`` as a list of non-blank strings with at least ``min_items`` items."""
    value = require_field(obj, key, list, path, line, error=DataError, want="a list of strings")
    if len(value) < min_items:
        raise DataError(path, line, f"field {key!r} is empty (needs at least {min_items} text)")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise DataError(path, line, f"field {key!r}[{i}] must be a string, got {type(item).__name__}")
        if not item.strip():
            raise DataError(path, line, f"field {key!r}[{i}] is an empty string")
    return value

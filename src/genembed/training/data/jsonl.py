"""Reading JSON-lines files with errors that name the file, the line and the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DataError", "iter_jsonl", "require_string", "require_string_list"]


class DataError(ValueError):
    """A bad training data file; the message is ``file:line: field ...``."""

    def __init__(self, path: str | Path, line: int | None, message: str):
        self.path, self.line = str(path), line
        super().__init__(f"{path}:{line}: {message}" if line is not None else f"{path}: {message}")


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for every non-blank line; each line must be one JSON object.

    Raises:
        DataError: the file is missing or empty, or a line is not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, "file not found")
    found = False
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(path, number, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(obj, dict):
                raise DataError(path, number, f"each line must be a JSON object, got {type(obj).__name__}")
            found = True
            yield number, obj
    if not found:
        raise DataError(path, None, "holds no rows")


def require_string(obj: dict[str, Any], key: str, path: str | Path, line: int, *, empty_ok: bool = False) -> str:
    """``obj[key]`` as a string; missing, non-string or (unless ``empty_ok``) blank values are errors."""
    if key not in obj:
        raise DataError(path, line, f"missing field {key!r}")
    value = obj[key]
    if not isinstance(value, str):
        raise DataError(path, line, f"field {key!r} must be a string, got {type(value).__name__}")
    if not empty_ok and not value.strip():
        raise DataError(path, line, f"field {key!r} is empty")
    return value


def require_string_list(obj: dict[str, Any], key: str, path: str | Path, line: int, *, min_items: int) -> list[str]:
    """``obj[key]`` as a list of non-blank strings with at least ``min_items`` items."""
    if key not in obj:
        raise DataError(path, line, f"missing field {key!r}")
    value = obj[key]
    if not isinstance(value, list):
        raise DataError(path, line, f"field {key!r} must be a list of strings, got {type(value).__name__}")
    if len(value) < min_items:
        raise DataError(path, line, f"field {key!r} is empty (needs at least {min_items} text)")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise DataError(path, line, f"field {key!r}[{i}] must be a string, got {type(item).__name__}")
        if not item.strip():
            raise DataError(path, line, f"field {key!r}[{i}] is an empty string")
    return value

"""Errors an index on disk can raise; each message says what is wrong and what to do."""

from __future__ import annotations

from .._files import DamagedFileError

__all__ = [
    "IndexCorruptedError",
    "IndexIncompleteError",
    "IndexLoadError",
    "IndexVersionError",
    "StoreConnectionError",
    "rebuild_hint",
]


def rebuild_hint(path: object) -> str:
    """What to do about a damaged file of the index folder ``path``: build the index again."""
    return f"Rebuild the index: `genembed index build SOURCES... --out {path} --overwrite`."


class IndexLoadError(RuntimeError):
    """Base class: an index folder cannot be used as it is."""


class IndexCorruptedError(IndexLoadError, DamagedFileError):
    """A file of the index is missing, truncated, or disagrees with the manifest."""


class IndexVersionError(IndexLoadError):
    """The index was written in a format this genembed does not read."""


class IndexIncompleteError(IndexLoadError):
    """The folder holds an interrupted build (no manifest yet); rerunning the build resumes it."""


class StoreConnectionError(IndexLoadError):
    """A vector database cannot be reached or opened (bad URI, server down, missing folder); the message
    names the URI."""

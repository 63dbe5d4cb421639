"""Where an index lives: a faiss folder (the default) or a Milvus collection, named by one string.

=====================================  =====================================================================
``my-index`` (any other path)          a faiss index folder (:class:`~genembed.retrieval.index.Index`)
``milvus:./my-index.db``, ``x.db``     embedded milvus-lite: the ``.db`` path is its data folder
``http(s)://host:19530``               a Milvus server or cluster (``milvus:`` in front is allowed)
=====================================  =====================================================================

A Milvus location also names a collection (default ``genembed``), a token (``user:password`` or an API
key) and a connection timeout; see :mod:`genembed.retrieval.milvus_store`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["DEFAULT_COLLECTION", "StoreLocation", "open_index", "parse_location", "store_settings"]

DEFAULT_COLLECTION = "genembed"
MILVUS_INDEX_TYPES = ("AUTOINDEX", "FLAT", "HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "DISKANN", "SCANN")
_SERVER_SCHEMES = ("http", "https", "tcp", "grpc", "unix")


@dataclass(frozen=True)
class StoreLocation:
    """A parsed index location.

    Attributes:
        kind: ``"faiss"`` or ``"milvus"``.
        uri: the faiss folder, the milvus-lite ``.db`` path, or the server URI.
        collection: the Milvus collection.
        token: Milvus credentials (``user:password`` or an API key); never shown in messages.
        timeout: seconds to wait for a Milvus server.
    """

    kind: str
    uri: str
    collection: str = DEFAULT_COLLECTION
    token: str = field(default="", repr=False)
    timeout: float = 10.0

    @property
    def embedded(self) -> bool:
        """A local milvus-lite database (not a server)."""
        return self.kind == "milvus" and "://" not in self.uri

    def __str__(self) -> str:
        if self.kind == "faiss":
            return self.uri
        prefix = "milvus:" if self.embedded else ""
        return f"{prefix}{self.uri} (collection {self.collection!r})"


def parse_location(
    where: str | Path | StoreLocation,
    *,
    collection: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
) -> StoreLocation:
    """Parse ``where`` (see the module docstring); keyword arguments override a given location's fields.

    Raises:
        ValueError: an unsupported scheme, a server URI without a host, an empty path, or a bad
            collection name; the message names ``where``.
    """
    if isinstance(where, StoreLocation):
        location = where
    else:
        text = str(where).strip()
        if not text:
            raise ValueError("an index location is empty: give a folder, milvus:FILE.db or a Milvus URI")
        location = _parse(text)
    changes: dict[str, Any] = {}
    if collection is not None:
        changes["collection"] = collection
    if token is not None:
        changes["token"] = token
    if timeout is not None:
        changes["timeout"] = float(timeout)
    if changes:
        location = replace(location, **changes)
    if location.kind == "milvus":
        _check_collection_name(location.collection, str(where))
    return location


def _parse(text: str) -> StoreLocation:
    explicit = text.lower().startswith("milvus:")
    rest = text[len("milvus:") :].strip() if explicit else text
    if "://" in rest:
        parts = urlsplit(rest)
        if parts.scheme.lower() not in _SERVER_SCHEMES:
            raise ValueError(
                f"index location {text!r}: unsupported scheme {parts.scheme!r}; use a folder (faiss), "
                "milvus:FILE.db (milvus-lite) or http(s)://HOST:PORT (a Milvus server)"
            )
        if parts.scheme.lower() != "unix" and not parts.hostname:
            raise ValueError(f"Milvus URI {text!r} has no host: write it like http://localhost:19530")
        try:
            parts.port  # noqa: B018 - raises ValueError on a non-numeric port
        except ValueError:
            raise ValueError(f"Milvus URI {text!r} has a bad port: write it like http://localhost:19530") from None
        return StoreLocation("milvus", rest)
    if explicit:
        if not rest:
            raise ValueError(f"index location {text!r} names no file: write milvus:./my-index.db")
        if not rest.endswith(".db"):
            raise ValueError(f"index location {text!r}: a milvus-lite database path must end in .db (pymilvus's rule)")
        return StoreLocation("milvus", rest)
    if text.endswith(".db"):
        return StoreLocation("milvus", text)
    return StoreLocation("faiss", text)


def _check_collection_name(name: str, where: str) -> None:
    # Milvus: a letter or underscore first, then letters, digits and underscores, at most 255 characters
    ok = bool(name) and len(name) <= 255 and (name[0].isalpha() or name[0] == "_")
    if not ok or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
        raise ValueError(
            f"{where}: bad Milvus collection name {name!r}: use letters, digits and underscores, starting with a "
            "letter or underscore"
        )


def store_settings(
    location: StoreLocation,
    dim: int,
    *,
    index_type: str | None = None,
    index_params: dict[str, Any] | None = None,
    search_params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest section describing the vector index of a new store, validated before any work.

    faiss: ``{"faiss": {"factory", "search_params"}}`` (``index_type`` is an index_factory string,
    default ``"Flat"``). Milvus: ``{"milvus": {"index_type", "index_params", "search_params"}}``
    (default ``AUTOINDEX``).

    Raises:
        ValueError: faiss cannot parse the description or lacks a search parameter, the Milvus index
            type is unknown, or faiss is given build parameters (they belong in the description, e.g.
            ``HNSW64``).
    """
    from .faiss_factory import DEFAULT_FACTORY, apply_search_params, new_faiss_index, parse_search_params

    search = parse_search_params(search_params)
    build = parse_search_params(index_params)
    if location.kind == "faiss":
        factory = (index_type or DEFAULT_FACTORY).strip()
        apply_search_params(new_faiss_index(dim, factory), search)  # ValueError: bad description or parameter
        if build:
            raise ValueError(
                f"faiss takes build settings in the index description (e.g. HNSW64, IVF4096,PQ48), not {sorted(build)}"
            )
        return {"faiss": {"factory": factory, "search_params": search}}
    kind = (index_type or "AUTOINDEX").strip().upper()
    if kind not in MILVUS_INDEX_TYPES:
        raise ValueError(f"unknown Milvus index type {index_type!r}; choose one of {', '.join(MILVUS_INDEX_TYPES)}")
    return {"milvus": {"index_type": kind, "index_params": build, "search_params": search}}


def open_index(
    where: str | Path | StoreLocation,
    *,
    collection: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
    verify: bool = True,
) -> Any:
    """Open the index at ``where``: an :class:`~genembed.retrieval.index.Index` for a folder, a
    :class:`~genembed.retrieval.milvus_store.MilvusIndex` for a Milvus location.

    Raises:
        ValueError: ``where`` is not a valid location.
        FileNotFoundError / IndexLoadError: as :meth:`Index.load` and :meth:`MilvusIndex.open`.
    """
    location = parse_location(where, collection=collection, token=token, timeout=timeout)
    if location.kind == "faiss":
        from .index import Index

        return Index.load(location.uri, verify=verify)
    from .milvus_store import MilvusIndex

    return MilvusIndex.open(location)

"""The store registry: where an index lives, named by one string, and which store keeps it.

=====================================  =====================================================================
``my-index`` (any other path)          a faiss index folder (:class:`~genembed.retrieval.faiss_store.FaissStore`),
                                       exact or any ``faiss.index_factory`` string (``--index-type HNSW32``)
``milvus:./my-index.db``, ``x.db``     embedded milvus-lite: the ``.db`` path is its data folder
``http(s)://host:19530``               a Milvus server or cluster (``milvus:`` in front is allowed)
=====================================  =====================================================================

Each store claims its own locations (``claim``); they are asked in the order of :data:`STORES`, the
last being the catch-all. A Milvus location also names a collection (default ``genembed``), a token
(``user:password`` or an API key) and a connection timeout; see :mod:`genembed.retrieval.milvus_store`.
Adding a store is one module with a :class:`~genembed.retrieval.store.VectorStore` class and one line
here (docs/retrieval.md shows how).
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from .store import StoreLocation, VectorStore

__all__ = [
    "STORES",
    "StoreLocation",
    "create_index",
    "index_settings",
    "open_index",
    "parse_location",
    "read_manifest",
    "store_class",
]

# name -> "module:Class" (imported when a location is parsed); asked in this order, the catch-all last
STORES: dict[str, str] = {
    "milvus": "milvus_store:MilvusStore",
    "faiss": "faiss_store:FaissStore",
}


def store_class(kind: str) -> type[VectorStore]:
    """The store class registered as ``kind``.

    Raises:
        ValueError: no store has that name; the message lists those that do.
    """
    if kind not in STORES:
        raise ValueError(f"unknown vector store {kind!r}; known stores: {', '.join(STORES)}")
    module, name = STORES[kind].split(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


def parse_location(
    where: str | Path | StoreLocation,
    *,
    collection: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
) -> StoreLocation:
    """Parse ``where`` (see the module docstring); keyword arguments override a given location's fields.

    Raises:
        ValueError: no store takes ``where`` (an unsupported scheme), or its store finds it bad (a
            server URI without a host, an empty path, a bad collection name); the message names ``where``.
    """
    if isinstance(where, StoreLocation):
        location = where
    else:
        text = str(where).strip()
        if not text:
            raise ValueError("an index location is empty: give a folder, milvus:FILE.db or a Milvus URI")
        location = _claim(text)
    changes: dict[str, Any] = {}
    if collection is not None:
        changes["collection"] = collection
    if token is not None:
        changes["token"] = token
    if timeout is not None:
        changes["timeout"] = float(timeout)
    return store_class(location.kind).check_location(replace(location, **changes) if changes else location)


def _claim(text: str) -> StoreLocation:
    for kind in STORES:
        location = store_class(kind).claim(text)
        if location is not None:
            return location
    scheme = text.partition("://")[0] if "://" in text else text.partition(":")[0]
    raise ValueError(
        f"index location {text!r}: unsupported scheme {scheme!r}; use a folder (faiss), milvus:FILE.db "
        "(milvus-lite) or http(s)://HOST:PORT (a Milvus server)"
    )


def index_settings(
    location: StoreLocation,
    dim: int,
    *,
    index_type: str | None = None,
    index_params: dict[str, Any] | None = None,
    search_params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest section describing the vector index of a new store at ``location``, checked before
    any work (see each store's ``index_settings``).

    Raises:
        ValueError: the store cannot build ``index_type`` with these parameters (the message says why).
    """
    return store_class(location.kind).index_settings(
        dim, index_type=index_type, index_params=index_params, search_params=search_params
    )


def open_index(
    where: str | Path | StoreLocation,
    *,
    collection: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
    verify: bool = True,
) -> VectorStore:
    """Open the index at ``where`` in the store that location names.

    Args:
        verify: check stored files against their checksums (a faiss folder).

    Raises:
        ValueError: ``where`` is not a valid location.
        FileNotFoundError / IndexLoadError: nothing usable is there (the message says what to do).
    """
    location = parse_location(where, collection=collection, token=token, timeout=timeout)
    return store_class(location.kind).open(location, verify=verify)


def create_index(location: StoreLocation, manifest: dict[str, Any], *, overwrite: bool = False) -> VectorStore:
    """An empty store at ``location`` for a new index with ``manifest`` (or the interrupted build of it)."""
    return store_class(location.kind).create(location, manifest, overwrite=overwrite)


def read_manifest(location: StoreLocation) -> dict[str, Any]:
    """The manifest of the index at ``location`` without loading its vectors ({} when nothing is there)."""
    return store_class(location.kind).read_manifest(location)

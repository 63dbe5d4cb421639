"""A genembed index in a Milvus collection: embedded milvus-lite for a local ``.db`` path, a Milvus server
or cluster for an ``http(s)://`` URI, through ``pymilvus.MilvusClient`` with the same code.

One entity per chunk::

    pk        INT64 primary key: a stable 63-bit hash of the chunk id (chunk_key("doc#0")), the same in
              every run and every store, so re-adding a document upserts its chunks instead of duplicating
    vector    FLOAT_VECTOR(dim): the L2-normalized embedding; inner-product metric (= cosine)
    chunk_id, doc_id, number, title, text, source, tokens     the chunk's metadata (filterable)
    kv_file   the safetensors shard holding its KV states (tensor "<pk>"), "" without KV states
    meta      JSON: a JSONL record's extra fields (filter with meta["year"] >= 2020)

The collection's properties hold the genembed manifest (``genembed.manifest``: model name and
dimension, embedding method and settings, chunking, KV geometry and folder, index settings), so a
different model is refused as a faiss folder's manifest does, and the progress of a running job
(``genembed.progress``), so an interrupted build, add or import resumes. Filters are Milvus boolean
expressions, e.g. ``doc_id in ["a", "b"]``, ``source like "docs/%"``, ``number == 0``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from .errors import IndexCorruptedError, IndexIncompleteError, IndexLoadError, IndexVersionError, StoreConnectionError
from .faiss_factory import parse_search_params
from .kv_ops import KV
from .kv_store import KVStore, resolve_kv_dtype, write_kv_shard
from .search import no_hits
from .store import DEFAULT_COLLECTION, ChunkRecord, ManifestQueries, StoreLocation

__all__ = ["FORMAT", "FORMAT_VERSION", "MILVUS_INDEX_TYPES", "MilvusStore", "chunk_key", "connect", "embedded"]

MILVUS_INDEX_TYPES = ("AUTOINDEX", "FLAT", "HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "DISKANN", "SCANN")
_SERVER_SCHEMES = ("http", "https", "tcp", "grpc", "unix")

FORMAT, FORMAT_VERSION = "genembed-milvus", 1
MANIFEST_KEY, PROGRESS_KEY = "genembed.manifest", "genembed.progress"
TEXT_BYTES, ID_BYTES, SOURCE_BYTES = 65_535, 1_024, 4_096  # VARCHAR limits (Milvus caps VARCHAR at 65,535)
_FIELDS = ["chunk_id", "doc_id", "number", "title", "text", "source", "tokens", "kv_file", "meta"]
_WRITE_BATCH = 512  # entities per upsert request (well under gRPC's message limit at width 576)
_MAX_TOPK = 16_384  # Milvus's limit on k
_CACHE_ROWS = 10_000  # fetched entities kept for text()/chunk() after a search
_DELETE_BATCH = 256  # documents per stale-chunk delete expression


def chunk_key(chunk_id: str) -> int:
    """The primary key of a chunk id: the first 63 bits of its BLAKE2b hash (stable across runs)."""
    return int.from_bytes(hashlib.blake2b(chunk_id.encode("utf-8"), digest_size=8).digest(), "big") >> 1


def _pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError as exc:  # pragma: no cover - pymilvus is in the milvus extra
        raise ImportError("Milvus stores need pymilvus and milvus-lite: pip install 'genembed[milvus]'") from exc
    return pymilvus


def _message(exc: Exception) -> str:
    return str(getattr(exc, "message", None) or exc).strip()


def embedded(location: StoreLocation) -> bool:
    """A local milvus-lite database (not a server)."""
    return "://" not in location.uri


def _parse(text: str) -> StoreLocation | None:
    explicit = text.lower().startswith("milvus:")
    rest = text[len("milvus:") :].strip() if explicit else text
    if "://" in rest:
        parts = urlsplit(rest)
        if parts.scheme.lower() not in _SERVER_SCHEMES:
            return None  # another store's scheme, or none's
        if parts.scheme.lower() != "unix" and not parts.hostname:
            raise ValueError(f"Milvus URI {text!r} has no host: write it like http://localhost:19530")
        try:
            parts.port  # noqa: B018 - raises ValueError on a non-numeric port
        except ValueError:
            raise ValueError(f"Milvus URI {text!r} has a bad port: write it like http://localhost:19530") from None
        return StoreLocation("milvus", rest, DEFAULT_COLLECTION)
    if explicit:
        if not rest:
            raise ValueError(f"index location {text!r} names no file: write milvus:./my-index.db")
        if not rest.endswith(".db"):
            raise ValueError(f"index location {text!r}: a milvus-lite database path must end in .db (pymilvus's rule)")
        return StoreLocation("milvus", rest, DEFAULT_COLLECTION)
    return StoreLocation("milvus", text, DEFAULT_COLLECTION) if text.endswith(".db") else None


def connect(location: StoreLocation) -> Any:
    """A ``MilvusClient`` for ``location``.

    Raises:
        StoreConnectionError: the milvus-lite folder's parent is missing, or the server cannot be
            reached or refuses the credentials; the message names the URI.
    """
    pymilvus = _pymilvus()
    if embedded(location):
        parent = Path(location.uri).expanduser().resolve().parent
        if not parent.is_dir():
            raise StoreConnectionError(
                f"cannot open the milvus-lite database {location.uri}: the folder {parent} does not exist"
            )
    try:
        return pymilvus.MilvusClient(uri=location.uri, token=location.token, timeout=location.timeout)
    except pymilvus.exceptions.MilvusException as exc:
        raise StoreConnectionError(
            f"cannot connect to Milvus at {location.uri}: {_message(exc)}. Check the URI (http://HOST:19530), that "
            "the server is running, and the token (--token or $MILVUS_TOKEN)"
        ) from exc


class MilvusStore(ManifestQueries):
    """A genembed index stored in a Milvus collection (a :class:`~genembed.retrieval.store.VectorStore`).

    Open one with :meth:`open` (or :func:`genembed.retrieval.stores.open_index`); build one with
    :func:`genembed.retrieval.build_index` given a Milvus location. Ids in :meth:`search` results are the
    chunks' primary keys (:func:`chunk_key`).

    Example:
        >>> index = MilvusStore.open(parse_location("milvus:./idx.db"))
        >>> scores, ids = index.search(index.encode_queries(model, ["what is RoPE?"]), 3, filter='number == 0')
        >>> index.chunk(int(ids[0, 0])).source
    """

    def __init__(self, client: Any, location: StoreLocation, manifest: dict[str, Any]):
        self.client, self.location, self.manifest = client, location, manifest
        self.name = location.collection
        self.where = str(location)
        self._rows: dict[int, dict[str, Any]] = {}
        self._kv_files: dict[str, KVStore] = {}
        self.search_params = dict((manifest.get("milvus") or {}).get("search_params", {}))

    # ---- the registry's class methods ----------------------------------------------------------
    @classmethod
    def claim(cls, text: str) -> StoreLocation | None:
        """``milvus:FILE.db`` or any ``*.db`` path (milvus-lite), an ``http(s)://`` (or tcp, grpc, unix)
        server URI, ``milvus:`` in front allowed; ValueError for a bad one, naming it."""
        return _parse(text)

    @classmethod
    def check_location(cls, location: StoreLocation) -> StoreLocation:
        """Check the collection name (Milvus: a letter or underscore first, then letters, digits and
        underscores, at most 255 characters)."""
        name = location.collection
        ok = bool(name) and len(name) <= 255 and (name[0].isalpha() or name[0] == "_")
        if not ok or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
            raise ValueError(
                f"{location.uri}: bad Milvus collection name {name!r}: use letters, digits and underscores, "
                "starting with a letter or underscore"
            )
        return location

    @classmethod
    def index_settings(
        cls,
        dim: int,
        *,
        index_type: str | None = None,
        index_params: dict[str, Any] | None = None,
        search_params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``{"milvus": {"index_type", "index_params", "search_params"}}`` (default ``AUTOINDEX``).

        Raises:
            ValueError: an unknown Milvus index type (the message lists the known ones).
        """
        kind = (index_type or "AUTOINDEX").strip().upper()
        if kind not in MILVUS_INDEX_TYPES:
            raise ValueError(f"unknown Milvus index type {index_type!r}; choose one of {', '.join(MILVUS_INDEX_TYPES)}")
        build, search = parse_search_params(index_params), parse_search_params(search_params)
        return {"milvus": {"index_type": kind, "index_params": build, "search_params": search}}

    @classmethod
    def read_manifest(cls, location: StoreLocation) -> dict[str, Any]:
        return cls.open(location).manifest

    # ---- opening and creating ------------------------------------------------------------------
    @classmethod
    def open(cls, location: StoreLocation | str, *, verify: bool = True, allow_incomplete: bool = False) -> MilvusStore:
        """Open the collection at ``location`` (``verify``: Milvus checks its own data; accepted for the protocol).

        Raises:
            StoreConnectionError: Milvus cannot be reached.
            IndexLoadError: no such collection, or one genembed did not make.
            IndexVersionError: written by an incompatible genembed.
            IndexIncompleteError: its first build was interrupted (rerun it to resume).
        """
        if not isinstance(location, StoreLocation):
            parsed = _parse(str(location))
            if parsed is None:
                raise ValueError(f"{location!r} is not a Milvus location: write milvus:FILE.db or http(s)://HOST:PORT")
            location = cls.check_location(parsed)
        client = connect(location)
        if not client.has_collection(location.collection):
            there = ", ".join(client.list_collections()) or "none"
            raise IndexLoadError(f"{location.uri} has no collection {location.collection!r} (collections: {there})")
        manifest = read_manifest(client, location)
        if not manifest.get("complete", True) and not allow_incomplete:
            raise IndexIncompleteError(
                f"{location} holds an interrupted build: rerun the same `genembed index build` command to resume it"
            )
        state = client.get_load_state(location.collection)["state"]
        if getattr(state, "name", str(state)) != "Loaded":  # a collection is searchable once loaded into memory
            client.load_collection(location.collection)
        return cls(client, location, manifest)

    @classmethod
    def create(cls, location: StoreLocation, manifest: dict[str, Any], *, overwrite: bool = False) -> MilvusStore:
        """Create the collection for a new index, or reopen an interrupted build of the same settings.

        A manifest with KV states keeps them in ``kv.dir`` (default: ``<name>.kv`` beside a milvus-lite
        file; a server needs one, the states stay on local disk).

        Raises:
            FileExistsError: the collection holds a finished index (and not ``overwrite``), an interrupted
                build with other settings, or data genembed did not write.
            ValueError: KV states for a server without ``kv.dir``.
        """
        if manifest.get("kv") is not None:
            manifest = {**manifest, "kv": {**manifest["kv"], "dir": _kv_dir(location, manifest["kv"].get("dir"))}}
        client = connect(location)
        name = location.collection
        if client.has_collection(name):
            try:
                old = read_manifest(client, location)
            except IndexLoadError as exc:
                raise FileExistsError(f"{location}: the collection exists and is not a genembed index ({exc})") from exc
            if overwrite:
                client.drop_collection(name)
            elif old.get("complete", True):
                raise FileExistsError(f"{location} already holds an index: use `genembed index add` or --overwrite")
            elif _settings(old) != _settings(manifest):
                raise FileExistsError(
                    f"{location} holds an interrupted build with other settings. Rerun that exact command to finish "
                    "it, or pass --overwrite to discard it."
                )
            else:
                return cls(client, location, old)
        full = {
            **manifest,
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "complete": False,
            "created": _now(),
            "updated": _now(),
        }
        settings = full["milvus"]
        index_params = client.prepare_index_params()
        index_params.add_index(
            "vector", index_type=settings["index_type"], metric_type="IP", params=settings["index_params"]
        )
        client.create_collection(
            name,
            schema=_schema(client, int(manifest["model"]["dim"])),
            consistency_level="Strong",  # a chunk is searchable as soon as its upsert returns
            properties={MANIFEST_KEY: json.dumps(full)},
        )
        # sync=False: an empty collection has nothing to build, and milvus-lite lacks the timestamp call
        # pymilvus's wait uses (it would log a server-side traceback)
        client.create_index(name, index_params, sync=False)
        client.load_collection(name)
        return cls(client, location, full)

    def update_manifest(self, **changes: Any) -> None:
        """Merge ``changes`` into the stored manifest (and stamp ``updated``)."""
        self.manifest = {**self.manifest, **changes, "updated": _now()}
        self.client.alter_collection_properties(self.name, properties={MANIFEST_KEY: json.dumps(self.manifest)})

    def drop(self) -> None:
        """Delete the collection (its KV shard files stay where they are)."""
        self.client.drop_collection(self.name)

    # ---- resumable jobs ------------------------------------------------------------------------
    def progress(self, fingerprint: str) -> set[int]:
        """The units (shards) a job with this fingerprint has finished; empty for a new job."""
        raw = self.client.describe_collection(self.name).get("properties", {}).get(PROGRESS_KEY)
        state = json.loads(raw) if raw else {}
        return set(state.get("done", [])) if state.get("fingerprint") == fingerprint else set()

    def set_progress(self, fingerprint: str, done: Iterable[int]) -> None:
        state = {"fingerprint": fingerprint, "done": sorted(done)}
        self.client.alter_collection_properties(self.name, properties={PROGRESS_KEY: json.dumps(state)})

    def clear_progress(self) -> None:
        self.client.alter_collection_properties(self.name, properties={PROGRESS_KEY: ""})

    def save(self) -> None:
        """Chunks are durable once upserted: mark the build complete and forget the job's progress."""
        self.clear_progress()
        if not self.manifest.get("complete", True):
            self.update_manifest(complete=True)

    def describe(self) -> list[tuple[str, str]]:
        manifest = self.manifest
        rows = [("chunks", f"{len(self):,}"), *self.settings_rows()]
        milvus = manifest["milvus"]
        params = ", ".join(f"{k}={v}" for k, v in {**milvus["index_params"], **milvus["search_params"]}.items())
        rows.append(
            ("vector index", f"Milvus {milvus['index_type']}, inner product" + (f" ({params})" if params else ""))
        )
        if self.kv_dir is not None:
            files = self.kv_dir.glob("*.safetensors") if self.kv_dir.is_dir() else []
            size = sum(p.stat().st_size for p in files)
            rows.append(("KV states", f"{manifest['kv']['dtype']} in {self.kv_dir}: {size / 1e6:,.1f} MB on disk"))
        else:
            rows.append(("KV states", "not stored (rebuild with --store-kv for --kv-cache doc/querydoc/docquery)"))
        rows.append(("updated", manifest["updated"]))
        return rows

    # ---- the search protocol -------------------------------------------------------------------
    def __len__(self) -> int:
        rows = self.client.query(self.name, filter="", output_fields=["count(*)"])
        return int(rows[0]["count(*)"])

    def search(
        self,
        query_embeddings: np.ndarray,
        k: int,
        *,
        filter: str | None = None,
        params: dict[str, float] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` chunks per query by cosine similarity, optionally among those matching ``filter``.

        Args:
            query_embeddings: ``(n, dim)`` (or ``(dim,)``) L2-normalized query embeddings.
            k: results per query (at most 16,384, Milvus's limit); missing results are id -1, score -inf.
            filter: a Milvus boolean expression on the chunk fields, e.g. ``'doc_id in ["a", "b"]'``.
            params: Milvus search parameters (``{"ef": 128}`` for HNSW, ``{"nprobe": 16}`` for IVF);
                default: :attr:`search_params` (those stored at build time, or :meth:`set_search_params`).

        Returns:
            ``(scores, ids)``, both ``(n, k)``: float32 cosines, best first, and int64 primary keys.

        Raises:
            ValueError: a bad shape, k, or a filter Milvus cannot parse (its message is included).
        """
        queries = self.check_queries(query_embeddings, k)
        search_params = {"metric_type": "IP", "params": {**self.search_params, **parse_search_params(params)}}
        scores, ids = no_hits(len(queries), k)
        if not len(queries):
            return scores, ids
        pymilvus = _pymilvus()
        try:
            results = self.client.search(
                self.name,
                data=[q.tolist() for q in queries],
                limit=min(k, _MAX_TOPK),
                filter=filter or "",
                output_fields=_FIELDS,
                search_params=search_params,
                anns_field="vector",
            )
        except pymilvus.exceptions.MilvusException as exc:
            if filter:
                raise ValueError(f"Milvus refused the search with filter {filter!r}: {_message(exc)}") from exc
            raise
        for row, hits in enumerate(results):
            for col, hit in enumerate(hits):
                pk = int(hit.get("pk", hit.get("id")))
                ids[row, col], scores[row, col] = pk, float(hit["distance"])
                self._remember(pk, dict(hit["entity"]))
        return scores, ids

    def set_search_params(self, params: dict[str, float] | list[str] | None) -> None:
        """Set Milvus search parameters (``{"ef": 128}``, ``["nprobe=16"]``) for later searches."""
        self.search_params.update(parse_search_params(params))

    def chunk(self, i: int) -> ChunkRecord:
        """Chunk ``i`` (a primary key from :meth:`search`) with its metadata.

        Raises:
            KeyError: no chunk has this key.
        """
        return _record(int(i), self._row(int(i)))

    def get(self, chunk_ids: Sequence[str]) -> list[ChunkRecord]:
        """The chunks with these ids (``"doc#0"``, ...) that exist, in the given order."""
        found = {r.id: r for r in self._fetch([chunk_key(c) for c in chunk_ids])}
        return [found[c] for c in chunk_ids if c in found]

    def query(self, filter: str, *, limit: int = 100) -> list[ChunkRecord]:
        """Up to ``limit`` chunks matching ``filter`` (no vector search), e.g. every chunk of a document."""
        rows = self.client.query(self.name, filter=filter, output_fields=["pk", *_FIELDS], limit=limit)
        return [_record(int(r["pk"]), r) for r in rows]

    def _row(self, pk: int) -> dict[str, Any]:
        if pk not in self._rows and not self._fetch([pk]):
            raise KeyError(f"{self.where} has no chunk with key {pk}")
        return self._rows[pk]

    def _fetch(self, pks: list[int]) -> list[ChunkRecord]:
        rows = self.client.get(self.name, ids=pks, output_fields=["pk", *_FIELDS]) if pks else []
        for r in rows:
            self._remember(int(r["pk"]), r)
        return [_record(int(r["pk"]), r) for r in rows]

    def _remember(self, pk: int, row: dict[str, Any]) -> None:
        if len(self._rows) >= _CACHE_ROWS:
            self._rows.clear()
        self._rows[pk] = row

    # ---- writing -------------------------------------------------------------------------------
    def prepare_documents(self, chunks_per_doc: dict[str, int]) -> None:
        """Make room to replace these documents: delete the chunks of known ones past their new count
        (the others are replaced by the upserts that follow)."""
        docs = list(chunks_per_doc)
        for start in range(0, len(docs), _DELETE_BATCH):
            part = docs[start : start + _DELETE_BATCH]
            stale = " or ".join(
                f"(doc_id == {json.dumps(d, ensure_ascii=False)} and number >= {chunks_per_doc[d]})" for d in part
            )
            self.delete(filter=stale)

    def add(self, records: Sequence[ChunkRecord], embeddings: np.ndarray, *, kv: list[KV] | None = None) -> int:
        """:meth:`upsert`: chunks are keyed by their ids, so adding a known one replaces it."""
        return self.upsert(records, embeddings, kv=kv)

    def upsert(self, records: Sequence[ChunkRecord], embeddings: np.ndarray, *, kv: list[KV] | None = None) -> int:
        """Insert or replace chunks (keyed by ``chunk_key(record.id)``; ``record.row`` is ignored), and
        write their KV states ``kv`` to a shard file in the KV folder (named by the chunks' ids and texts,
        so a shard upserted again replaces its own file).

        Raises:
            ValueError: counts or width disagree, KV states are missing (or given to an index without
                them), or a field is longer than Milvus stores (the message names the chunk and field).
        """
        embeddings = self.check_added(records, embeddings, kv)
        kv_file = ""
        if kv is not None and records:
            content = json.dumps([[r.id, r.text, r.tokens] for r in records]).encode("utf-8")
            kv_file = f"{hashlib.sha256(content).hexdigest()[:16]}.safetensors"
            write_kv_shard(
                self.kv_dir / kv_file,
                [chunk_key(r.id) for r in records],
                kv,
                dtype=resolve_kv_dtype(self.manifest["kv"]["dtype"]),
                metadata={"model": self.manifest["model"]["name"], "format": "genembed-kv"},
            )
        rows = [_entity(r, e, kv_file) for r, e in zip(records, embeddings, strict=True)]
        for start in range(0, len(rows), _WRITE_BATCH):
            self.client.upsert(self.name, rows[start : start + _WRITE_BATCH])
        for row in rows:
            self._rows.pop(row["pk"], None)
        return len(rows)

    def delete(
        self,
        *,
        doc_ids: Sequence[str] | None = None,
        chunk_ids: Sequence[str] | None = None,
        filter: str | None = None,
    ) -> int:
        """Delete every chunk of ``doc_ids``, the chunks ``chunk_ids``, or those matching ``filter``.

        Returns the number of chunks deleted (counted before deleting). Their KV states stay in their
        shard files until the index is rebuilt.
        """
        given = [x for x in (doc_ids, chunk_ids, filter) if x]
        if len(given) != 1:
            raise ValueError("delete needs exactly one of doc_ids, chunk_ids or filter")
        if doc_ids:
            expression = f"doc_id in {json.dumps([str(d) for d in doc_ids], ensure_ascii=False)}"
        elif chunk_ids:
            expression = f"pk in {[chunk_key(c) for c in chunk_ids]}"
        else:
            expression = str(filter)
        pymilvus = _pymilvus()
        try:
            count = int(self.client.query(self.name, filter=expression, output_fields=["count(*)"])[0]["count(*)"])
            if count:
                self.client.delete(self.name, filter=expression)
        except pymilvus.exceptions.MilvusException as exc:
            raise ValueError(f"Milvus refused the delete filter {expression!r}: {_message(exc)}") from exc
        self._rows.clear()
        return count

    # ---- KV states -----------------------------------------------------------------------------
    @property
    def has_kv(self) -> bool:
        return self.manifest.get("kv") is not None

    @property
    def kv_dir(self) -> Path | None:
        kv = self.manifest.get("kv")
        return Path(kv["dir"]) if kv else None

    def kv(self, i: int, *, tokens: int | None = None) -> KV:
        """Chunk ``i``'s stored ``(keys, values)``, ``(layers, kv_heads, tokens, head_dim)``, memory-mapped.

        Args:
            i: the chunk's key.
            tokens: the length its passage segment has in the RAG prompt; checked when given.
        """
        if self.kv_dir is None:
            raise ValueError(f"index {self.where} stores no KV states: rebuild it with --store-kv for doc caching")
        row = self._row(int(i))
        name = row["kv_file"]
        if not name:
            raise IndexCorruptedError(f"{self.where}: chunk {row['chunk_id']!r} has no KV states stored")
        if name not in self._kv_files:  # one "shard" per file covering every key: the tensor is named str(pk)
            self._kv_files[name] = KVStore(self.kv_dir, [{"file": name, "start": 0, "stop": 1 << 63}])
        keys, values = self._kv_files[name].get(int(i))
        if tokens is not None and keys.shape[2] != tokens:
            raise IndexCorruptedError(
                f"chunk {row['chunk_id']!r}: {keys.shape[2]} stored KV positions, its passage has {tokens}"
            )
        return keys, values

    def __repr__(self) -> str:
        kv = f", kv={self.manifest['kv']['dtype']}" if self.has_kv else ""
        return f"MilvusStore({self.where!r}, method={self.settings.method!r}{kv})"


def read_manifest(client: Any, location: StoreLocation) -> dict[str, Any]:
    """The genembed manifest stored in a collection's properties, validated for format and version."""
    properties = client.describe_collection(location.collection).get("properties", {}) or {}
    raw = properties.get(MANIFEST_KEY)
    if not raw:
        raise IndexLoadError(f"{location} is not a genembed index: the collection has no {MANIFEST_KEY} property")
    try:
        manifest = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise IndexCorruptedError(f"{location}: the {MANIFEST_KEY} property is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IndexCorruptedError(f"{location}: the {MANIFEST_KEY} property is not a genembed manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise IndexVersionError(
            f"{location} uses Milvus index format version {manifest.get('format_version')}; this genembed reads "
            f"version {FORMAT_VERSION}. Rebuild the index with `genembed index build`."
        )
    for key in ("model", "embed", "milvus"):
        if key not in manifest:
            raise IndexCorruptedError(f"{location}: the manifest lacks the field {key!r}")
    return manifest


def _kv_dir(location: StoreLocation, kv_dir: str | Path | None) -> str:
    if kv_dir is not None:
        return str(Path(kv_dir).expanduser().resolve())
    if embedded(location):
        return str(Path(location.uri).expanduser().resolve().with_suffix(".kv"))
    raise ValueError(
        f"{location}: KV states stay on local disk beside a Milvus server; pass --kv-dir (kv_dir=) for their folder"
    )


def _settings(manifest: dict[str, Any]) -> dict[str, Any]:
    return {k: manifest.get(k) for k in ("model", "embed", "chunking", "kv", "milvus")}


def _schema(client: Any, dim: int) -> Any:
    data_type = _pymilvus().DataType
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pk", data_type.INT64, is_primary=True)
    schema.add_field("vector", data_type.FLOAT_VECTOR, dim=dim)
    schema.add_field("chunk_id", data_type.VARCHAR, max_length=ID_BYTES)
    schema.add_field("doc_id", data_type.VARCHAR, max_length=ID_BYTES)
    schema.add_field("number", data_type.INT64)
    schema.add_field("title", data_type.VARCHAR, max_length=TEXT_BYTES)
    schema.add_field("text", data_type.VARCHAR, max_length=TEXT_BYTES)
    schema.add_field("source", data_type.VARCHAR, max_length=SOURCE_BYTES)
    schema.add_field("tokens", data_type.INT64)
    schema.add_field("kv_file", data_type.VARCHAR, max_length=ID_BYTES)
    schema.add_field("meta", data_type.JSON)
    return schema


def _entity(record: ChunkRecord, embedding: np.ndarray, kv_file: str) -> dict[str, Any]:
    limits = {"chunk_id": ID_BYTES, "doc_id": ID_BYTES, "title": TEXT_BYTES, "text": TEXT_BYTES}
    values = {"chunk_id": record.id, "doc_id": record.doc_id, "title": record.title, "text": record.text}
    for field, value in values.items():
        size = len(value.encode("utf-8"))
        if size > limits[field]:
            raise ValueError(
                f"{record.source}: chunk {record.id[:80]!r} has a {field} of {size:,} bytes; a Milvus store holds at "
                f"most {limits[field]:,} (index it with `genembed index build`, which cuts documents into chunks)"
            )
    source = record.source.encode("utf-8")[:SOURCE_BYTES].decode("utf-8", "ignore")
    return {
        "pk": chunk_key(record.id),
        "vector": embedding,
        **values,
        "number": int(record.number),
        "source": source,
        "tokens": int(record.tokens),
        "kv_file": kv_file,
        "meta": record.meta or {},
    }


def _record(pk: int, row: dict[str, Any]) -> ChunkRecord:
    return ChunkRecord(
        row=pk,
        id=row["chunk_id"],
        doc_id=row["doc_id"],
        number=int(row["number"]),
        title=row["title"],
        text=row["text"],
        source=row["source"],
        tokens=int(row["tokens"]),
        meta=dict(row.get("meta") or {}),
    )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")

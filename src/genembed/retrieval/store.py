"""What every vector store offers (:class:`VectorStore`), and what the stores share: the location type,
the chunk record, the queries every manifest answers, and the fingerprint of a resumable write.

A store keeps a genembed index: one L2-normalized embedding per chunk, the chunk's metadata, optionally
its KV states, and a manifest (model, embedding settings, chunking, KV geometry, vector-index settings).
The stores are :class:`~genembed.retrieval.faiss_store.FaissStore` (a folder) and
:class:`~genembed.retrieval.milvus_store.MilvusStore` (milvus-lite or a Milvus server); which one a
location names is decided in :mod:`genembed.retrieval.stores`, the registry. Nothing outside the store
modules asks which store it holds: the index builder, ``ask``, ``search`` and the CLI use only the
protocol below.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..encoders.methods import method_rules
from ..encoders.output import OutputPipeline
from ..encoders.settings import IndexEmbedSettings
from ..generation.rag_prompt import RagPrompt
from ..models.adapters import current_name
from .kv_ops import KV

__all__ = ["DEFAULT_COLLECTION", "ChunkRecord", "ManifestQueries", "StoreLocation", "VectorStore", "fingerprint"]

DEFAULT_COLLECTION = "genembed"


@dataclass(frozen=True)
class StoreLocation:
    """A parsed index location (see :func:`genembed.retrieval.stores.parse_location`).

    Attributes:
        kind: the store's name in the registry (``"faiss"``, ``"milvus"``).
        uri: the folder, database file or server URI.
        collection: the collection in a database that holds several indexes ("" for a store without).
        token: credentials (``user:password`` or an API key); never shown in messages.
        timeout: seconds to wait for a server.
    """

    kind: str
    uri: str
    collection: str = ""
    token: str = field(default="", repr=False)
    timeout: float = 10.0

    def __str__(self) -> str:
        if not self.collection:
            return self.uri
        prefix = "" if "://" in self.uri else f"{self.kind}:"
        return f"{prefix}{self.uri} (collection {self.collection!r})"


@dataclass(frozen=True)
class ChunkRecord:
    """One indexed chunk. ``row`` is the store's key for it (a faiss row, a Milvus primary key), ``id`` its
    chunk id (``"doc#0"``) and ``doc_id`` the id of its document in the corpus. ``tokens`` is the length
    of its embedding prompt (= its KV states); ``meta`` holds a source record's extra fields."""

    row: int
    id: str
    doc_id: str
    number: int
    title: str
    text: str
    source: str
    tokens: int
    meta: dict[str, Any] | None = None

    @property
    def embed_text(self) -> str:
        """``title + " " + text`` (what was embedded and what a RAG prompt shows)."""
        return f"{self.title} {self.text}" if self.title else self.text


class VectorStore(Protocol):
    """A genembed index in some vector store. Adding a store means one module with a class that has these
    methods, and one line in :data:`genembed.retrieval.stores.STORES`.

    The class methods come first: the registry calls them before a store exists. Writes are resumable:
    a builder embeds in shards, records each finished one with :meth:`set_progress`, and skips those
    :meth:`progress` returns when it runs again; ``add`` with the same records twice (a shard redone
    after a crash) leaves one copy. :meth:`save` makes what was added searchable and durable (a store
    may do that at once, and then only mark the build complete).
    """

    @classmethod
    def claim(cls, text: str) -> StoreLocation | None:
        """The location if ``text`` names this store (a bad one raises ValueError naming it), else None."""
        ...

    @classmethod
    def check_location(cls, location: StoreLocation) -> StoreLocation:
        """The location after options (collection, token, timeout) replaced fields; ValueError if they do not fit."""
        ...

    @classmethod
    def index_settings(
        cls,
        dim: int,
        *,
        index_type: str | None = None,
        index_params: dict[str, Any] | None = None,
        search_params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The manifest section describing a new vector index (``{"faiss": {...}}``), checked before any work."""
        ...

    @classmethod
    def create(cls, location: StoreLocation, manifest: dict[str, Any], *, overwrite: bool = False) -> VectorStore:
        """An empty store for a new index (or the interrupted build of the same settings); FileExistsError if
        an index is there."""
        ...

    @classmethod
    def open(cls, location: StoreLocation, *, verify: bool = True) -> VectorStore:
        """The index at ``location``; FileNotFoundError / IndexLoadError saying what to do."""
        ...

    @classmethod
    def read_manifest(cls, location: StoreLocation) -> dict[str, Any]:
        """The stored manifest without loading the vectors ({} when nothing is at ``location`` yet)."""
        ...

    where: str
    manifest: dict[str, Any]

    @property
    def dim(self) -> int: ...

    @property
    def settings(self) -> IndexEmbedSettings: ...

    @property
    def has_kv(self) -> bool: ...

    @property
    def kv_source(self) -> dict[str, Any] | None: ...

    @property
    def rag_prompt(self) -> RagPrompt: ...

    def __len__(self) -> int: ...

    def search(
        self, query_embeddings: np.ndarray, k: int, *, filter: str | None = None, params: dict[str, float] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, keys)``, both ``(n, k)``: cosines best first and the chunks' keys (``chunk(key)``);
        -inf and -1 past the last hit. ``filter``: a metadata expression (ValueError where unsupported)."""
        ...

    def set_search_params(self, params: dict[str, float] | list[str] | None) -> None: ...

    def chunk(self, i: int) -> ChunkRecord: ...

    def text(self, i: int) -> str: ...

    def kv(self, i: int, *, tokens: int | None = None) -> KV: ...

    def encode_queries(self, model: Any, queries: list[str], *, batch_size: int = 16) -> np.ndarray: ...

    def check_model(self, model: Any) -> None: ...

    def prepare_documents(self, chunks_per_doc: dict[str, int]) -> None:
        """Before adding these documents (id -> number of chunks): a store that replaces documents deletes
        the chunks they will no longer have; one that cannot refuses ids it holds (ValueError)."""
        ...

    def add(self, records: Sequence[ChunkRecord], embeddings: np.ndarray, *, kv: list[KV] | None = None) -> int:
        """Add chunks (``records[i].row``: ``len(store) + i`` for a new chunk) with their embeddings and,
        for a store with KV states, their states. Returns the number added."""
        ...

    def upsert(self, records: Sequence[ChunkRecord], embeddings: np.ndarray, *, kv: list[KV] | None = None) -> int:
        """Insert or replace chunks by chunk id (ValueError for a store that cannot replace)."""
        ...

    def delete(
        self, *, doc_ids: Sequence[str] | None = None, chunk_ids: Sequence[str] | None = None, filter: str | None = None
    ) -> int:
        """Delete chunks by document id, chunk id or filter; the number deleted (ValueError where unsupported)."""
        ...

    def update_manifest(self, **changes: Any) -> None: ...

    def progress(self, fingerprint: str) -> set[int]: ...

    def set_progress(self, fingerprint: str, done: set[int]) -> None: ...

    def save(self) -> None: ...

    def describe(self) -> list[tuple[str, str]]:
        """``(what, value)`` rows for ``genembed index info``: size, model, settings, vector index, KV states."""
        ...


def fingerprint(manifest: dict[str, Any], shard_size: int, records: Sequence[ChunkRecord]) -> str:
    """The identity of a resumable write: the settings, the shard size and every chunk's text; a rerun
    resumes only the same job."""
    digest = hashlib.sha256()
    settings = {k: manifest.get(k) for k in ("model", "embed", "chunking", "kv")}
    digest.update(json.dumps([settings, shard_size], sort_keys=True).encode())
    for r in records:
        digest.update(json.dumps([r.id, r.title, r.text, r.tokens]).encode())
    return digest.hexdigest()


class ManifestQueries:
    """What every store derives from its manifest (a faiss folder's ``manifest.json`` or a Milvus
    collection's properties): the model it belongs to and how queries are embedded. Needs ``manifest``,
    ``where`` (the location named in messages) and ``chunk(i)``."""

    manifest: dict[str, Any]
    where: str

    @property
    def dim(self) -> int:
        return int(self.manifest["model"]["dim"])

    @property
    def kv_source(self) -> dict[str, Any] | None:
        """Which weights, attention and prompt made the stored KV states (:mod:`~genembed.retrieval.kv_source`)."""
        return (self.manifest.get("kv") or {}).get("source")

    @property
    def rag_prompt(self) -> RagPrompt:
        """The RAG prompt the stored KV states were made for (the default one for an index without them)."""
        stored = (self.kv_source or {}).get("prompt")
        return RagPrompt.from_dict(stored) if stored else RagPrompt()

    @property
    def settings(self) -> IndexEmbedSettings:
        """How chunks were embedded; queries must be embedded the same way (:meth:`encode_queries`)."""
        return IndexEmbedSettings.from_dict(self.manifest["embed"])

    @property
    def config(self) -> IndexEmbedSettings:
        """The former name of :attr:`settings` (deprecated; warns)."""
        warnings.warn("a store's .config is deprecated: use .settings", DeprecationWarning, stacklevel=2)
        return self.settings

    def encode_queries(self, model: Any, queries: list[str], *, batch_size: int = 16) -> np.ndarray:
        """Embed queries with the index's settings (method, steps, instruction): ``(n, dim)``."""
        from .kv_embed import encode_with_kv

        self.check_model(model)
        texts = list(queries)
        return encode_with_kv(
            model.backbone, texts, self.settings, kind="query", keep_kv=False, batch_size=batch_size
        ).embeddings

    def text(self, i: int) -> str:
        """The text of chunk ``i`` as embedded: ``title + " " + text``."""
        return self.chunk(i).embed_text  # type: ignore[attr-defined]  # every store defines chunk()

    def check_model(self, model: Any) -> None:
        """Raise ValueError unless ``model`` is the one the index was built with."""
        expected = self.manifest["model"]["name"]
        dim = OutputPipeline.of_index(self.settings).dim(model.dim)  # the index's vectors may keep only truncate_dim
        if current_name(model.name) != current_name(expected) or dim != self.dim:
            raise ValueError(
                f"index {self.where} was built with model {expected!r} (dim {self.dim}); got {model.name!r} "
                f"(dim {dim}). Load the same model (and adapter) to query it."
            )

    def check_queries(self, query_embeddings: np.ndarray, k: int) -> np.ndarray:
        """``query_embeddings`` as a contiguous ``(n, dim)`` float32 array; ValueError on a bad shape or k."""
        queries = np.ascontiguousarray(np.atleast_2d(np.asarray(query_embeddings, dtype=np.float32)))
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"query embeddings must have shape (n, {self.dim}), got {np.shape(query_embeddings)}")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return queries

    def check_added(self, records: Sequence[ChunkRecord], embeddings: np.ndarray, kv: list[KV] | None) -> np.ndarray:
        """``embeddings`` as float32 after checking them and ``kv`` against ``records`` and the index;
        ValueError on a wrong shape, or KV states missing (or given to an index without them)."""
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.shape != (len(records), self.dim):
            raise ValueError(
                f"{len(records)} chunks need ({len(records)}, {self.dim}) embeddings, got {embeddings.shape}"
            )
        stores_kv = self.manifest.get("kv") is not None
        if (kv is not None) != stores_kv or (kv is not None and len(kv) != len(records)):
            raise ValueError(
                f"index {self.where} stores KV states: give one per chunk"
                if stores_kv
                else f"index {self.where} does not store KV states: add chunks without them"
            )
        return embeddings

    def settings_rows(self) -> list[tuple[str, str]]:
        """The :meth:`VectorStore.describe` rows every store shows: model, embedding, chunking."""
        manifest, settings = self.manifest, self.settings
        steps = f", K={settings.steps}" if method_rules(settings.method).uses_steps else ""
        chunking = manifest.get("chunking")
        imported = f"imported from {manifest.get('imported_from')}"
        return [
            ("model", f"{manifest['model']['name']} (dim {self.dim})"),
            ("embedding", f"{settings.method}{steps}, {settings.attention} attention"),
            ("chunking", f"{chunking['chunk_tokens']} tokens, overlap {chunking['overlap']}" if chunking else imported),
        ]

"""An index on disk: a faiss inner-product index over normalized chunk embeddings, the chunks'
metadata, optionally their KV states, and a manifest that ties them together.

Layout of an index folder::

    manifest.json            format version, model, embedding settings, files, counts, checksums
    index-<gen>.faiss        faiss inner-product index: IndexFlatIP (exact cosine search over L2-normalized
                             embeddings) unless built from another index_factory string (``"faiss"`` in the manifest)
    chunks-<gen>.jsonl       one line per chunk, row order: id, doc_id, title, text, source, tokens
    kv/<gen>-<shard>.safetensors   KV states (``--store-kv``), see :mod:`genembed.retrieval.kv_store`
    .build/                  only while a build or add is running or was interrupted

Every write is atomic and the manifest is written last: it is the commit point. A new generation's
files are written beside the old ones and the old ones deleted only after the new manifest is in
place, so a crash at any moment leaves the previous complete index (plus a resumable ``.build/``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._files import atomic_write, atomic_write_json, check_file, read_json, remove_temp_files, sha256_file
from ..encoders.settings import EmbedSettings
from .errors import IndexCorruptedError, IndexIncompleteError, IndexVersionError, rebuild_hint
from .faiss_factory import (
    DEFAULT_FACTORY,
    add_blocks,
    apply_search_params,
    faiss_module,
    new_faiss_index,
    parse_search_params,
    train_on_sample,
)
from .kv_ops import KV
from .kv_store import KVStore
from .rag_prompt import RagPrompt
from .search import no_hits

__all__ = ["BUILD_DIR", "FORMAT_VERSION", "MANIFEST", "ChunkRecord", "Index"]

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
BUILD_DIR = ".build"


@dataclass(frozen=True)
class ChunkRecord:
    """One indexed chunk. ``tokens`` is the length of its embedding prompt (= its KV states); ``meta`` holds
    a source record's extra fields (Milvus stores keep them; faiss folders do not)."""

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


class ManifestQueries:
    """What every genembed index derives from its manifest (a faiss folder's ``manifest.json`` or a Milvus
    collection's properties): the model it belongs to and how queries are embedded. Needs ``manifest``
    and ``where`` (the location named in messages)."""

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
    def config(self) -> EmbedSettings:
        """How chunks were embedded; queries must be embedded the same way (:meth:`encode_queries`)."""
        return EmbedSettings.from_dict(self.manifest["embed"])

    def encode_queries(self, model: Any, queries: list[str], *, batch_size: int = 16) -> np.ndarray:
        """Embed queries with the index's settings (method, steps, instruction): ``(n, dim)``."""
        from .embed_kv import encode_with_kv

        self.check_model(model)
        texts = list(queries)
        return encode_with_kv(
            model.backbone, texts, self.config, kind="query", keep_kv=False, batch_size=batch_size
        ).embeddings

    def text(self, i: int) -> str:
        """The text of chunk ``i`` as embedded: ``title + " " + text`` (needs ``chunk(i)``)."""
        return self.chunk(i).embed_text

    def check_model(self, model: Any) -> None:
        """Raise ValueError unless ``model`` is the one the index was built with."""
        expected = self.manifest["model"]["name"]
        if model.name != expected or model.dim != self.dim:
            raise ValueError(
                f"index {self.where} was built with model {expected!r} (dim {self.dim}); got {model.name!r} "
                f"(dim {model.dim}). Load the same model (and adapter) to query it."
            )

    def check_queries(self, query_embeddings: np.ndarray, k: int) -> np.ndarray:
        """``query_embeddings`` as a contiguous ``(n, dim)`` float32 array; ValueError on a bad shape or k."""
        queries = np.ascontiguousarray(np.atleast_2d(np.asarray(query_embeddings, dtype=np.float32)))
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"query embeddings must have shape (n, {self.dim}), got {np.shape(query_embeddings)}")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return queries


class Index(ManifestQueries):
    """A loaded index. Build one with :func:`genembed.retrieval.build_index`, open one with :meth:`load`.

    Example:
        >>> index = Index.load("my-index")
        >>> scores, ids = index.search(index.encode_queries(model, ["what is RoPE?"]), k=3)
        >>> index.text(int(ids[0, 0]))
    """

    def __init__(self, path: Path, manifest: dict[str, Any], chunks: list[ChunkRecord], faiss_index: Any):
        self.path = Path(path)
        self.where = str(self.path)
        self.manifest = manifest
        self.chunks = chunks
        self.faiss_index = faiss_index
        kv = manifest.get("kv")
        self.kv_store = KVStore(self.path, kv["shards"]) if kv else None

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, *, verify: bool = True) -> Index:
        """Open an index folder.

        Args:
            path: the folder written by ``genembed index build``.
            verify: check the faiss and chunk files against the manifest's SHA-256 checksums.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            IndexIncompleteError: a build was interrupted before its first commit (rerun it to resume).
            IndexVersionError: written by an incompatible genembed.
            IndexCorruptedError: a file is missing, damaged or disagrees with the manifest.
        """
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"index folder not found: {path}")
        manifest = read_manifest(path)
        files = manifest["files"]
        faiss_path, chunks_path = path / files["faiss"], path / files["chunks"]
        fix = rebuild_hint(path)
        for file in (faiss_path, chunks_path):
            expected = {"sha256": manifest["sha256"][file.name]} if verify else None
            check_file(file, expected, fix=f"(It is listed in {path / MANIFEST}.) {fix}", error=IndexCorruptedError)
        try:
            faiss_index = faiss_module().read_index(str(faiss_path))
        except RuntimeError as exc:
            raise IndexCorruptedError(f"{faiss_path} is not a readable faiss index: {exc}. {fix}") from exc
        chunks = _read_chunks(chunks_path, fix)
        n = manifest["n_chunks"]
        if faiss_index.ntotal != n or len(chunks) != n:
            raise IndexCorruptedError(
                f"{path}: manifest says {n} chunks, faiss index has {faiss_index.ntotal}, {chunks_path.name} has "
                f"{len(chunks)}. {fix}"
            )
        if faiss_index.d != manifest["model"]["dim"]:
            raise IndexCorruptedError(
                f"{faiss_path}: dimension {faiss_index.d}, manifest says {manifest['model']['dim']}. {fix}"
            )
        for kv_shard in (manifest.get("kv") or {}).get("shards", []):
            file = path / kv_shard["file"]
            if not file.is_file() or file.stat().st_size != kv_shard["bytes"]:
                raise IndexCorruptedError(
                    f"KV shard {file} is missing or has the wrong size (manifest: {kv_shard['bytes']} B). {fix}"
                )
        apply_search_params(faiss_index, (manifest.get("faiss") or {}).get("search_params", {}))
        return cls(path, manifest, chunks, faiss_index)

    # ---- the search protocol -------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.chunks)

    def search(
        self,
        query_embeddings: np.ndarray,
        k: int,
        *,
        filter: str | None = None,
        params: dict[str, float] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` chunks per query by cosine similarity.

        Args:
            query_embeddings: ``(n, dim)`` (or ``(dim,)``) L2-normalized query embeddings.
            k: results per query; more than the index holds gives all of them.
            filter: metadata filters need a Milvus store (:mod:`genembed.retrieval.milvus_store`); a faiss
                folder refuses one.
            params: faiss search parameters for an approximate index (``{"efSearch": 128}`` for HNSW,
                ``{"nprobe": 16}`` for IVF); they stay set for later searches. The manifest's are set on load.

        Returns:
            ``(scores, ids)``, both ``(n, k)``: float32 cosines (best first) and int64 rows; past the
            end of a small index, ids are -1 and scores -inf (the :class:`~genembed.retrieval.search.SearchIndex`
            protocol).
        """
        queries = self.check_queries(query_embeddings, k)
        if filter:
            raise ValueError(
                f"index {self.path} is a faiss folder, which cannot filter on metadata: build the index into a "
                "Milvus store (--out milvus:FILE.db or a Milvus URI) to search with a filter"
            )
        apply_search_params(self.faiss_index, parse_search_params(params))
        top = min(k, len(self))
        scores, ids = no_hits(len(queries), k)
        if top:
            scores[:, :top], ids[:, :top] = self.faiss_index.search(queries, top)
        return scores, ids

    def set_search_params(self, params: dict[str, float] | list[str] | None) -> None:
        """Set faiss search parameters (``{"efSearch": 128}``, ``["nprobe=16"]``) for later searches."""
        apply_search_params(self.faiss_index, parse_search_params(params))

    def chunk(self, i: int) -> ChunkRecord:
        return self.chunks[i]

    # ---- KV states -----------------------------------------------------------------------------
    @property
    def has_kv(self) -> bool:
        return self.kv_store is not None

    def kv(self, i: int, *, tokens: int | None = None) -> KV:
        """Chunk ``i``'s stored ``(keys, values)``, ``(layers, kv_heads, tokens, head_dim)``, memory-mapped.

        Args:
            i: the chunk's row.
            tokens: the length its passage segment has in the RAG prompt; checked when given.
        """
        if self.kv_store is None:
            raise ValueError(f"index {self.path} stores no KV states: rebuild it with --store-kv for doc caching")
        keys, values = self.kv_store.get(i)
        if tokens is not None and keys.shape[2] != tokens:
            raise IndexCorruptedError(f"chunk {i}: {keys.shape[2]} stored KV positions, its passage has {tokens}")
        return keys, values

    @property
    def factory(self) -> str:
        """The faiss index description (``"Flat"`` = exact search)."""
        return (self.manifest.get("faiss") or {}).get("factory", DEFAULT_FACTORY)

    def __repr__(self) -> str:
        kv = f", kv={self.manifest['kv']['dtype']}" if self.has_kv else ""
        method, factory = self.config.method, self.factory
        return f"Index({str(self.path)!r}, chunks={len(self)}, method={method!r}, faiss={factory!r}{kv})"


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the index folder ``path``, validated for format and version."""
    file = path / MANIFEST
    if not file.is_file():
        if (path / BUILD_DIR).is_dir():
            raise IndexIncompleteError(
                f"{path} holds an interrupted build: rerun the same `genembed index build` command to resume it"
            )
        raise IndexCorruptedError(f"{path} is not a genembed index: it has no {MANIFEST}")
    manifest = read_json(file, fix=rebuild_hint(path), error=IndexCorruptedError)
    if not isinstance(manifest, dict) or manifest.get("format") != "genembed-index":
        raise IndexCorruptedError(f"{file} is not a genembed index manifest. {rebuild_hint(path)}")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise IndexVersionError(
            f"{path} uses index format version {version}; this genembed reads version {FORMAT_VERSION}. "
            "Rebuild the index with `genembed index build`."
        )
    for key in ("files", "sha256", "model", "embed", "n_chunks"):
        if key not in manifest:
            raise IndexCorruptedError(f"{file} lacks the field {key!r}. {rebuild_hint(path)}")
    return manifest


def _read_chunks(path: Path, fix: str) -> list[ChunkRecord]:
    try:
        lines = path.read_text("utf-8").split("\n")  # not splitlines(): JSON keeps U+2028 unescaped
    except UnicodeDecodeError as exc:
        raise IndexCorruptedError(f"{path} is not UTF-8 text ({exc}). {fix}") from exc
    if lines[-1] == "":
        lines.pop()
    chunks = []
    for number, line in enumerate(lines, start=1):
        try:
            chunks.append(ChunkRecord(**json.loads(line)))
        except (json.JSONDecodeError, TypeError) as exc:
            raise IndexCorruptedError(f"{path}:{number}: not a chunk record ({exc}). {fix}") from exc
        if chunks[-1].row != number - 1:
            raise IndexCorruptedError(f"{path}:{number}: row {chunks[-1].row}, expected {number - 1}. {fix}")
    return chunks


def commit(
    path: Path,
    *,
    base: Index | None,
    records: list[ChunkRecord],
    embeddings: np.ndarray | Sequence[np.ndarray],
    manifest: dict[str, Any],
    kv_shards: list[dict[str, Any]],
) -> Index:
    """Write a new generation holding ``base``'s chunks plus ``records`` and make it current.

    ``manifest`` carries the fields that do not depend on the files (model, embed, chunking, kv
    geometry, and ``faiss``: the index_factory description and search parameters); files, counts and
    checksums are filled in here. The manifest is written last. ``embeddings`` is one ``(n, dim)``
    array or a list of row blocks (e.g. memory-mapped shards), added a block at a time; a new
    approximate index is first trained on a sample of them.
    """
    faiss = faiss_module()
    generation = (base.manifest["generation"] + 1) if base is not None else 1
    blocks = [embeddings] if isinstance(embeddings, np.ndarray) else list(embeddings)
    if sum(len(b) for b in blocks) != len(records):
        raise ValueError(f"{len(records)} chunk records but {sum(len(b) for b in blocks)} embeddings")
    if base is not None:
        faiss_index = base.faiss_index
        old_records = base.chunks
    else:
        factory = (manifest.get("faiss") or {}).get("factory", DEFAULT_FACTORY)
        faiss_index = new_faiss_index(manifest["model"]["dim"], factory)
        train_on_sample(faiss_index, blocks, factory=factory)
        old_records = []
    add_blocks(faiss_index, blocks)
    all_records = [*old_records, *records]
    names = {"faiss": f"index-{generation:05d}.faiss", "chunks": f"chunks-{generation:05d}.jsonl"}
    atomic_write(path / names["faiss"], lambda tmp: faiss.write_index(faiss_index, str(tmp)))
    lines = "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in all_records)
    atomic_write(path / names["chunks"], lambda tmp: tmp.write_text(lines, "utf-8"))
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    full = {
        **manifest,
        "format": "genembed-index",
        "format_version": FORMAT_VERSION,
        "generation": generation,
        "n_chunks": len(all_records),
        "files": names,
        "sha256": {name: sha256_file(path / name) for name in names.values()},
        "created": base.manifest["created"] if base is not None else now,
        "updated": now,
    }
    if full.get("kv") is not None:
        full["kv"] = {**full["kv"], "shards": kv_shards}
    atomic_write_json(path / MANIFEST, full)
    keep = {*names.values(), *(s["file"] for s in kv_shards)}
    stale = [*path.glob("index-*.faiss"), *path.glob("chunks-*.jsonl"), *path.glob("kv/*.safetensors")]
    for old in stale:  # earlier generations, and KV shards of a discarded interrupted build
        if old.relative_to(path).as_posix() not in keep:
            old.unlink(missing_ok=True)
    for folder in (path, path / "kv"):  # temp files of a process killed mid-write
        remove_temp_files(folder)
    return Index(path, full, all_records, faiss_index)

"""The faiss store: an index in a folder on disk, a faiss inner-product index over normalized chunk
embeddings, the chunks' metadata, optionally their KV states, and a manifest that ties them together.

Layout of an index folder::

    manifest.json            format version, model, embedding settings, files, counts, checksums
    index-<gen>.faiss        faiss inner-product index: IndexFlatIP (exact cosine search over L2-normalized
                             embeddings) unless built from another index_factory string (``"faiss"`` in the manifest)
    chunks-<gen>.jsonl       one line per chunk, row order: id, doc_id, title, text, source, tokens
    kv/<gen>-<shard>.safetensors   KV states (``--store-kv``), see :mod:`genembed.retrieval.kv_store`
    .build/                  only while a build or add is running or was interrupted: state.json and,
                             per added shard, emb-<first row>.npy and chunks-<first row>.jsonl

Every write is atomic and the manifest is written last: it is the commit point. :meth:`FaissStore.add`
stages chunks in ``.build/`` (their KV states go straight to ``kv/``); :meth:`FaissStore.save` writes a
new generation's files beside the old ones and deletes the old ones only after the new manifest is in
place, so a crash at any moment leaves the previous complete index (plus a resumable ``.build/``).
A faiss folder cannot delete or replace chunks: rebuild it, or use a Milvus store.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from .._files import (
    atomic_write,
    atomic_write_json,
    atomic_write_npy,
    check_file,
    file_digest,
    read_json,
    remove_temp_files,
    sha256_file,
)
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
from .kv_store import KVStore, resolve_kv_dtype, write_kv_shard
from .search import no_hits
from .store import ChunkRecord, ManifestQueries, StoreLocation

__all__ = ["BUILD_DIR", "FORMAT_VERSION", "MANIFEST", "FaissStore", "load_manifest"]

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
BUILD_DIR = ".build"
_STATE = "state.json"


class FaissStore(ManifestQueries):
    """An index in a folder (a :class:`~genembed.retrieval.store.VectorStore`). Build one with
    :func:`genembed.retrieval.build_index`, open one with :meth:`load` (or ``open_index``). Keys in
    :meth:`search` results are row numbers.

    Example:
        >>> index = FaissStore.load("my-index")
        >>> scores, rows = index.search(index.encode_queries(model, ["what is RoPE?"]), k=3)
        >>> index.chunk(int(rows[0, 0])).doc_id
    """

    def __init__(self, path: Path, manifest: dict[str, Any], chunks: list[ChunkRecord], faiss_index: Any):
        self.path = Path(path)
        self.where = str(self.path)
        self.manifest = manifest
        self.chunks = chunks
        self.faiss_index = faiss_index
        kv = manifest.get("kv")
        self.kv_store = KVStore(self.path, kv.get("shards", [])) if kv else None
        self._state: dict[str, Any] | None = None  # .build/state.json while writing
        self._changes: dict[str, Any] = {}  # manifest changes written by save()

    # ---- the registry's class methods ----------------------------------------------------------
    @classmethod
    def claim(cls, text: str) -> StoreLocation | None:
        """Any path that is not a URI: the catch-all store."""
        return None if "://" in text else StoreLocation("faiss", text)

    @classmethod
    def check_location(cls, location: StoreLocation) -> StoreLocation:
        """A folder has no collection: one given is ignored."""
        return replace(location, collection="") if location.collection else location

    @classmethod
    def index_settings(
        cls,
        dim: int,
        *,
        index_type: str | None = None,
        index_params: dict[str, Any] | None = None,
        search_params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``{"faiss": {"factory", "search_params"}}``: ``index_type`` is a ``faiss.index_factory`` string
        (default ``"Flat"``, exact; ``"HNSW32"``, ``"IVF1024,PQ32"``).

        Raises:
            ValueError: faiss cannot parse the description or lacks a search parameter, or build
                parameters were given (they belong in the description, e.g. ``HNSW64``).
        """
        search = parse_search_params(search_params)
        build = parse_search_params(index_params)
        factory = (index_type or DEFAULT_FACTORY).strip()
        apply_search_params(new_faiss_index(dim, factory), search)  # ValueError: bad description or parameter
        if build:
            raise ValueError(
                f"faiss takes build settings in the index description (e.g. HNSW64, IVF4096,PQ48), not {sorted(build)}"
            )
        return {"faiss": {"factory": factory, "search_params": search}}

    @classmethod
    def read_manifest(cls, location: StoreLocation) -> dict[str, Any]:
        path = Path(location.uri)
        return load_manifest(path) if path.is_dir() else {}

    @classmethod
    def create(cls, location: StoreLocation, manifest: dict[str, Any], *, overwrite: bool = False) -> FaissStore:
        """An empty store for a new index in the folder ``location.uri`` (an interrupted build there resumes;
        KV states go to its ``kv/``, so ``kv.dir`` is dropped from the manifest).

        Raises:
            FileExistsError: the folder holds an index (and not ``overwrite``) or unrelated files.
        """
        path = Path(location.uri)
        _prepare_folder(path, overwrite)
        path.mkdir(parents=True, exist_ok=True)
        kv = manifest.get("kv")
        if kv is not None:  # KV states live in the folder's kv/: a folder given for them is not used
            kv = {k: v for k, v in kv.items() if k != "dir"}
        return cls(path, {**manifest, "kv": kv, "generation": 0}, [], None)

    @classmethod
    def open(cls, location: StoreLocation, *, verify: bool = True) -> FaissStore:
        return cls.load(location.uri, verify=verify)

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, *, verify: bool = True) -> FaissStore:
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
        manifest = load_manifest(path)
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

    def describe(self) -> list[tuple[str, str]]:
        manifest = self.manifest
        rows = [("chunks", f"{len(self):,} from {len({c.doc_id for c in self.chunks}):,} documents")]
        rows += self.settings_rows()
        params = ", ".join(f"{k}={v}" for k, v in (manifest.get("faiss") or {}).get("search_params", {}).items())
        rows.append(("vector index", f"faiss {self.factory}, inner product" + (f" ({params})" if params else "")))
        if self.kv_store is not None:
            kv, size = manifest["kv"], self.kv_store.nbytes
            tokens = sum(self.kv_store.tokens(c.row) for c in self.chunks)
            per_token = size / max(tokens, 1)
            rows.append(
                (
                    "KV states",
                    f"{kv['dtype']}, {kv['layers']} layers x {kv['kv_heads']} KV heads x {kv['head_dim']}: "
                    f"{size / 1e6:,.1f} MB on disk, {per_token:,.0f} B/token, "
                    f"{size / max(len(self), 1) / 1e3:,.0f} kB/chunk",
                )
            )
            source = kv.get("source")
            made_by = (
                f"{source['backbone']}, adapter {source['adapter']}, {source['attention']} attention, "
                f"{source['pass']} pass"
                if source
                else "unrecorded (an older index: rebuild with --store-kv to use doc caching)"
            )
            rows.append(("KV made by", made_by))
        else:
            rows.append(("KV states", "not stored (rebuild with --store-kv for --kv-cache doc/querydoc/docquery)"))
        rows.append(("generation", f"{manifest['generation']} (updated {manifest['updated']})"))
        return rows

    def __repr__(self) -> str:
        kv = f", kv={self.manifest['kv']['dtype']}" if self.has_kv else ""
        method, factory = self.settings.method, self.factory
        return f"FaissStore({str(self.path)!r}, chunks={len(self)}, method={method!r}, faiss={factory!r}{kv})"

    # ---- writing: staged in .build/, committed by save() ---------------------------------------
    def prepare_documents(self, chunks_per_doc: dict[str, int]) -> None:
        """Refuse documents the folder holds: a faiss folder cannot replace chunks."""
        known = {c.doc_id: c.source for c in self.chunks}
        for doc_id in chunks_per_doc:
            if doc_id in known:
                raise ValueError(f"document id {doc_id!r} is already in the index (from {known[doc_id]})")

    def add(self, records: Sequence[ChunkRecord], embeddings: np.ndarray, *, kv: list[KV] | None = None) -> int:
        """Stage chunks for the next :meth:`save`: rows ``len(self) ..`` in order, each shard once (a
        shard added again, as after a crash, replaces its staged copy). Embeddings that are a whole
        memory-mapped ``.npy`` file are staged by reference (its size is checked at :meth:`save`), others
        copied to ``.build/``.

        Raises:
            ValueError: counts or width disagree, rows do not follow the index's, or KV states are
                missing (or given to an index without them).
        """
        whole_file = _whole_npy(embeddings)
        embeddings = self.check_added(records, embeddings, kv)
        if not records:
            return 0
        first = records[0].row
        if first < len(self) or [r.row for r in records] != list(range(first, first + len(records))):
            raise ValueError(f"{self.path}: new chunks take consecutive rows from {len(self)}, got rows from {first}")
        kv_info = self.manifest.get("kv")
        state = self._load_state(None)
        build = self.path / BUILD_DIR
        entry: dict[str, Any] = {"count": len(records), "kv": None}
        if kv is not None:
            name = f"kv/{self.manifest['generation'] + 1:05d}-{first:05d}.safetensors"
            size = write_kv_shard(
                self.path / name,
                [r.row for r in records],
                kv,
                dtype=resolve_kv_dtype(kv_info["dtype"]),
                metadata={"model": self.manifest["model"]["name"], "format": "genembed-kv"},
            )
            entry["kv"] = {"file": name, "start": first, "stop": first + len(records), "bytes": size}
        lines = "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in records)
        atomic_write(build / f"chunks-{first:05d}.jsonl", lambda tmp: tmp.write_text(lines, "utf-8"))
        if whole_file is not None:  # already on disk (e.g. `genembed encode` shards): staged by reference
            entry["file"], entry["embeddings"] = str(whole_file), {"bytes": whole_file.stat().st_size}
        else:
            emb = build / f"emb-{first:05d}.npy"
            atomic_write_npy(emb, embeddings)
            entry["embeddings"] = file_digest(emb)
        state["staged"][str(first)] = entry
        atomic_write_json(build / _STATE, state)
        return len(records)

    def upsert(self, records: Sequence[ChunkRecord], embeddings: np.ndarray, *, kv: list[KV] | None = None) -> int:
        raise ValueError(
            f"{self.path} is a faiss folder, which cannot replace chunks: rebuild it, or use a Milvus store "
            "(--out milvus:FILE.db or a Milvus URI)"
        )

    def delete(
        self, *, doc_ids: Sequence[str] | None = None, chunk_ids: Sequence[str] | None = None, filter: str | None = None
    ) -> int:
        raise ValueError(
            f"{self.path} is a faiss folder; deleting needs a Milvus store (rebuild without the documents)"
        )

    def update_manifest(self, **changes: Any) -> None:
        """Change manifest fields (e.g. ``sources``) with the next :meth:`save`."""
        self._changes.update(changes)

    def progress(self, fingerprint: str) -> set[int]:
        """The shards a write with this fingerprint has finished (empty for a new one).

        Raises:
            FileExistsError: ``.build/`` holds an interrupted write of other sources or settings.
        """
        return set(self._load_state(fingerprint)["done"])

    def set_progress(self, fingerprint: str, done: set[int]) -> None:
        state = self._load_state(fingerprint)
        state["done"] = sorted(done)
        atomic_write_json(self.path / BUILD_DIR / _STATE, state)

    def _load_state(self, fingerprint: str | None) -> dict[str, Any]:
        """``.build/state.json``, created for ``fingerprint`` if absent; None: whichever is there."""
        key = None if fingerprint is None else f"{fingerprint}@{self.manifest['generation'] + 1}"
        if self._state is not None and (key is None or self._state["fingerprint"] in (key, None)):
            self._state["fingerprint"] = self._state["fingerprint"] or key
            return self._state
        build = self.path / BUILD_DIR
        file = build / _STATE
        state = None
        if file.is_file():
            try:
                state = json.loads(file.read_text("utf-8"))
            except json.JSONDecodeError:
                state = None  # a state file is only ever replaced atomically; treat damage as "start over"
        if state is not None and key is not None and state.get("fingerprint") not in (key, None):
            raise FileExistsError(
                f"{build} holds an interrupted build or add with other sources or settings. Rerun that exact "
                f"command to finish it, or delete {build} to discard it."
            )
        if state is None or "staged" not in state:  # none yet, or left by an older genembed: start over
            shutil.rmtree(build, ignore_errors=True)
            build.mkdir(parents=True, exist_ok=True)
            state = {"fingerprint": key, "done": [], "staged": {}}
            atomic_write_json(file, state)
        state["fingerprint"] = state.get("fingerprint") or key
        self._state = state
        return state

    def save(self) -> None:
        """Commit the staged chunks as a new generation (see the module docstring) and remove ``.build/``."""
        build = self.path / BUILD_DIR
        nothing_new = self._state is None and not (build / _STATE).is_file() and not self._changes
        if nothing_new and self.faiss_index is not None:
            return
        state = self._load_state(None)
        fix = f"Delete {build} and rerun the same command to embed the new chunks again."
        records: list[ChunkRecord] = []
        blocks, kv_shards = [], []
        for first, entry in sorted(state["staged"].items(), key=lambda item: int(item[0])):
            if int(first) != len(self) + len(records):
                raise IndexCorruptedError(
                    f"{build}: staged rows start at {first}, expected {len(self) + len(records)}. {fix}"
                )
            emb = Path(entry["file"]) if "file" in entry else build / f"emb-{int(first):05d}.npy"
            check_file(emb, entry["embeddings"], fix=fix)  # checked against what was recorded, then streamed
            records += _read_chunks(build / f"chunks-{int(first):05d}.jsonl", fix, first=int(first))
            blocks.append(np.load(emb, mmap_mode="r", allow_pickle=False))
            kv_shards += [entry["kv"]] if entry["kv"] else []
        self._commit(records, blocks, kv_shards)
        shutil.rmtree(build, ignore_errors=True)
        self._state, self._changes = None, {}

    def _commit(self, records: list[ChunkRecord], blocks: list[np.ndarray], kv_shards: list[dict[str, Any]]) -> None:
        """Write a new generation holding this index's chunks plus ``records`` and make it current.

        ``blocks`` are the new rows' embeddings (e.g. memory-mapped shards), added a block at a time; a
        new approximate index is first trained on a sample of them. The manifest is written last.
        """
        path, manifest = self.path, {**self.manifest, **self._changes}
        faiss = faiss_module()
        generation = manifest["generation"] + 1
        if self.faiss_index is None:
            factory = (manifest.get("faiss") or {}).get("factory", DEFAULT_FACTORY)
            self.faiss_index = new_faiss_index(manifest["model"]["dim"], factory)
            train_on_sample(self.faiss_index, blocks, factory=factory)
        add_blocks(self.faiss_index, blocks)
        all_records = [*self.chunks, *records]
        names = {"faiss": f"index-{generation:05d}.faiss", "chunks": f"chunks-{generation:05d}.jsonl"}
        atomic_write(path / names["faiss"], lambda tmp: faiss.write_index(self.faiss_index, str(tmp)))
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
            "created": manifest.get("created", now),
            "updated": now,
        }
        if full.get("kv") is not None:
            full["kv"] = {**full["kv"], "shards": [*full["kv"].get("shards", []), *kv_shards]}
        atomic_write_json(path / MANIFEST, full)
        keep = {*names.values(), *(s["file"] for s in (full.get("kv") or {}).get("shards", []))}
        stale = [*path.glob("index-*.faiss"), *path.glob("chunks-*.jsonl"), *path.glob("kv/*.safetensors")]
        for old in stale:  # earlier generations, and KV shards of a discarded interrupted build
            if old.relative_to(path).as_posix() not in keep:
                old.unlink(missing_ok=True)
        for folder in (path, path / "kv"):  # temp files of a process killed mid-write
            remove_temp_files(folder)
        self.manifest, self.chunks = full, all_records
        kv = full.get("kv")
        self.kv_store = KVStore(path, kv["shards"]) if kv else None


def _whole_npy(array: Any) -> Path | None:
    """The ``.npy`` file ``array`` maps, if it is that file's whole float32 array (not a slice or a copy)."""
    if not isinstance(array, np.memmap) or not array.filename or array.dtype != np.float32:
        return None
    path = Path(array.filename)
    try:
        whole = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return None
    same = whole.dtype == array.dtype and whole.shape == array.shape and whole.offset == array.offset
    return path if same and array.flags.c_contiguous else None


def _prepare_folder(out: Path, overwrite: bool) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a folder")
    is_index = (out / MANIFEST).is_file()
    if is_index and not overwrite:
        raise FileExistsError(f"{out} already holds an index: use `genembed index add` or pass --overwrite")
    if not is_index and not (out / BUILD_DIR).is_dir() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not an index folder; choose a new or empty folder")
    if overwrite:
        for item in out.iterdir():  # only what an index writes
            if item.name in (MANIFEST, "kv", BUILD_DIR) or item.name.startswith(("index-", "chunks-")):
                shutil.rmtree(item) if item.is_dir() else item.unlink()


def load_manifest(path: Path) -> dict[str, Any]:
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


def _read_chunks(path: Path, fix: str, *, first: int = 0) -> list[ChunkRecord]:
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
        if chunks[-1].row != first + number - 1:
            raise IndexCorruptedError(f"{path}:{number}: row {chunks[-1].row}, expected {first + number - 1}. {fix}")
    return chunks

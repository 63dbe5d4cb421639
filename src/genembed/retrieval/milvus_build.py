"""Build a Milvus-stored index from sources, or add sources to one: streaming, resumable, upserting.

Chunks are embedded ``shard_size`` at a time; each shard's KV states (``--store-kv``) are written to a
safetensors file in the index's KV folder, its entities upserted, and the shard recorded as done in the
collection's ``genembed.progress`` property. Only one shard's embeddings are ever in memory. Rerun an
interrupted command and it continues with the next shard; a shard redone after a crash upserts the
same primary keys (:func:`~genembed.retrieval.milvus_store.chunk_key`), so nothing is duplicated.

Adding a document whose id is already stored replaces it: its chunks are upserted and chunks it no
longer has are deleted (a faiss folder refuses such an add instead).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .chunking import Chunk, chunk_documents, read_sources
from .embed_kv import encode_with_kv
from .index import ChunkRecord
from .index_build import _fingerprint, embedding_pass_reusable, generation_states
from .kv_store import resolve_kv_dtype, write_kv_shard
from .milvus_store import MilvusIndex, chunk_key
from .stores import StoreLocation

__all__ = ["add_to_milvus_index", "build_milvus_index", "run_shards"]

_DELETE_BATCH = 256  # documents per stale-chunk delete expression


def build_milvus_index(
    model: Any,
    location: StoreLocation,
    chunks: list[Chunk],
    manifest: dict[str, Any],
    *,
    batch_size: int = 16,
    shard_size: int | None = None,
    overwrite: bool = False,
    show_progress_bar: bool = True,
) -> MilvusIndex:
    """Create the collection for ``manifest`` (or resume its interrupted build) and ingest ``chunks``.

    Called by :func:`genembed.retrieval.build_index` for a Milvus location; ``manifest`` is the one a
    faiss folder would get plus ``milvus`` (index settings) and, with KV states, ``kv.dir``.
    """
    index = MilvusIndex.create(location, manifest, overwrite=overwrite)
    _ingest(model, index, chunks, batch_size, shard_size, show_progress_bar)
    index.update_manifest(complete=True)
    return index


def add_to_milvus_index(
    model: Any,
    location: StoreLocation,
    sources: Sequence[str | Path],
    *,
    batch_size: int = 16,
    shard_size: int | None = None,
    show_progress_bar: bool = True,
) -> MilvusIndex:
    """Upsert the documents of ``sources`` into the index at ``location`` (same model and settings).

    Raises:
        ValueError: ``model`` is not the index's model.
    """
    index = MilvusIndex.open(location)
    index.check_model(model)
    if index.manifest.get("chunking") is None:
        raise ValueError(f"{location} was imported from `genembed encode` shards: import more the same way")
    chunks = chunk_documents(read_sources(sources), model.backbone.tokenizer, **index.manifest["chunking"])
    counts: dict[str, int] = {}
    for c in chunks:
        counts[c.doc_id] = counts.get(c.doc_id, 0) + 1
    docs = list(counts)
    for start in range(0, len(docs), _DELETE_BATCH):  # chunks a replaced document no longer has
        part = docs[start : start + _DELETE_BATCH]
        stale = " or ".join(f"(doc_id == {json.dumps(d, ensure_ascii=False)} and number >= {counts[d]})" for d in part)
        index.delete(filter=stale)
    _ingest(model, index, chunks, batch_size, shard_size, show_progress_bar)
    index.update_manifest(sources=[*index.manifest.get("sources", []), *(str(s) for s in sources)])
    return index


def _ingest(
    model: Any, index: MilvusIndex, chunks: list[Chunk], batch_size: int, shard_size: int | None, progress_bar: bool
) -> None:
    config = index.config
    kv_info = index.manifest.get("kv")
    kv_dtype = resolve_kv_dtype(kv_info["dtype"]) if kv_info else None
    texts = [c.embed_text for c in chunks]
    lengths = [len(ids) for ids in config.prompt_ids(model.backbone.tokenizer, texts, "doc")]
    records = [
        ChunkRecord(-1, c.id, c.doc_id, c.number, c.title, c.text, c.source, n, c.meta)
        for c, n in zip(chunks, lengths, strict=True)
    ]
    shard_size = shard_size or (64 if kv_info else 1024)
    fingerprint = _fingerprint(index.manifest, 0, shard_size, records)  # generation 0: Milvus has none
    # KV states come from the generator's own causal pass, as for a faiss folder (index_build.generation_states)
    prompt = index.rag_prompt
    reuse = kv_info is not None and embedding_pass_reusable(model, config, prompt, texts)

    def embed_shard(j: int, part: list[ChunkRecord]) -> None:
        part_texts = [r.embed_text for r in part]
        encoded = encode_with_kv(
            model.backbone, part_texts, config, kind="doc", keep_kv=reuse, batch_size=batch_size, kv_dtype=kv_dtype
        )
        kv_file = ""
        if kv_info is not None:
            kv_file = f"{fingerprint[:16]}-{j:05d}.safetensors"
            states = generation_states(
                model, prompt, part_texts, encoded.kv if reuse else None, batch_size=batch_size, kv_dtype=kv_dtype
            )
            write_kv_shard(
                Path(kv_info["dir"]) / kv_file,
                [chunk_key(r.id) for r in part],
                states,
                dtype=kv_dtype,  # type: ignore[arg-type]
                metadata={"model": index.manifest["model"]["name"], "format": "genembed-kv"},
            )
        index.upsert(part, encoded.embeddings, kv_file=kv_file)

    run_shards(index, fingerprint, records, shard_size, embed_shard, desc="index", progress_bar=progress_bar)


def run_shards(
    index: MilvusIndex,
    fingerprint: str,
    items: Sequence[Any],
    shard_size: int,
    work: Callable[[int, list[Any]], None],
    *,
    desc: str,
    progress_bar: bool,
    unit: str = "chunk",
) -> None:
    """Call ``work(j, items of shard j)`` for every shard not yet done under ``fingerprint``, recording
    each in the collection as it finishes; clear the record when all are done."""
    from tqdm.auto import tqdm

    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    done = index.progress(fingerprint)
    n_shards = -(-len(items) // shard_size)
    finished = sum(min(shard_size, len(items) - j * shard_size) for j in done if j < n_shards)
    with tqdm(total=len(items), initial=finished, desc=desc, unit=unit, disable=not progress_bar) as bar:
        for j in range(n_shards):
            if j in done:
                continue
            part = list(items[j * shard_size : (j + 1) * shard_size])
            work(j, part)
            done.add(j)
            index.set_progress(fingerprint, done)
            bar.update(len(part))
    index.clear_progress()


def default_kv_dir(location: StoreLocation, kv_dir: str | Path | None) -> str:
    """Where a Milvus index keeps KV shard files: ``kv_dir``, else ``<name>.kv`` beside a milvus-lite
    database; a server needs ``kv_dir`` (the states stay on local disk, memory-mapped)."""
    if kv_dir is not None:
        return str(Path(kv_dir).expanduser().resolve())
    if location.embedded:
        return str(Path(location.uri).expanduser().resolve().with_suffix(".kv"))
    raise ValueError(
        f"{location}: KV states stay on local disk beside a Milvus server; pass --kv-dir (kv_dir=) for their folder"
    )

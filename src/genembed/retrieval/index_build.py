"""Build an index from sources, or add sources to one, resumably.

The new chunks are embedded in shards of ``shard_size`` chunks. After each shard its embeddings go to
``.build/emb-<shard>.npy`` and its KV states to ``kv/``, and ``.build/state.json`` records it as done
(all atomic writes). When every shard is done, a new index generation is committed (see
:mod:`genembed.retrieval.index`) and ``.build/`` removed. Interrupt a build at any point and run the
same command again: finished shards are skipped. A pending build with different sources or settings
is never mixed in; the error says how to finish or discard it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._files import atomic_write_json, atomic_write_npy, check_file, file_digest
from ..adapter_info import warn_if_untrained
from ..encoders.settings import EmbedSettings
from ..generation.adapters import same_weights
from .chunking import Chunk, chunk_documents, read_sources
from .embed_kv import encode_with_kv
from .grit_cache import check_grit_kv_source, grit_kv_source, uses_grit_cache
from .index import BUILD_DIR, MANIFEST, ChunkRecord, Index, commit
from .kv_ops import KV
from .kv_source import check_kv_source, kv_source
from .kv_store import KVGeometry, dtype_name, resolve_kv_dtype, write_kv_shard
from .rag_prompt import RagPrompt
from .segment_kv import reusable_prefix, segment_states
from .stores import StoreLocation, parse_location, store_settings

__all__ = ["add_to_index", "build_index"]

_STATE = "state.json"
_TEMPLATE_ROOM = 256  # prompt tokens beyond a chunk's text: title, instruction and chat template


def build_index(
    model: Any,
    sources: Sequence[str | Path],
    out: str | Path | StoreLocation,
    *,
    config: EmbedSettings | None = None,
    chunk_tokens: int = 256,
    overlap: int = 32,
    store_kv: bool = False,
    kv_dtype: str = "float16",
    batch_size: int = 16,
    shard_size: int | None = None,
    overwrite: bool = False,
    show_progress_bar: bool = True,
    model_ref: dict[str, str | None] | None = None,
    prompt: RagPrompt | None = None,
    index_type: str | None = None,
    index_params: dict[str, float] | None = None,
    search_params: dict[str, float] | None = None,
    kv_dir: str | Path | None = None,
) -> Any:
    """Read, chunk and embed ``sources`` into a new index at ``out`` (resuming an interrupted build).

    Args:
        model: a :class:`~genembed.GenerativeEmbedder`.
        sources: JSONL / .txt / .md files or folders (see :mod:`genembed.retrieval.chunking`).
        out: the index folder to create, or a Milvus location (``milvus:./idx.db``, ``http://host:19530``
            or a :class:`~genembed.retrieval.stores.StoreLocation`; see :mod:`genembed.retrieval.stores`).
        config: embedding settings (default: GIRCSE K=5 with the model's tau and centering, prompts up
            to ``chunk_tokens + 256`` tokens so that titles and the template fit).
        chunk_tokens: tokens of document text per chunk.
        overlap: tokens shared by consecutive chunks of a document.
        store_kv: also store each chunk's KV states from the generator's own causal pass (for doc
            caching): taken from the embedding pass when it is that pass (same weights, causal attention,
            an embedding prompt that starts with the passage's RAG segment), else computed in a second
            pass with the generation weights, shard by shard. Which weights, attention and prompt made
            them is recorded in the manifest (``kv.source``) and checked by ``ask``.
        kv_dtype: ``float32``, ``float16`` or ``bfloat16`` storage for the KV states.
        batch_size: chunks per forward pass.
        shard_size: chunks per resumable unit (default 64 with KV states, 1024 without).
        overwrite: replace an existing index at ``out``.
        show_progress_bar: show a progress bar.
        model_ref: how to load the model again (``{"model": ..., "adapter": ...}`` as given to
            :func:`genembed.load`); stored so ``genembed ask`` can default to it.
        prompt: the RAG prompt the KV states are made for (default :class:`RagPrompt`).
        index_type: the vector index: a ``faiss.index_factory`` string for a folder (default ``"Flat"``,
            exact; e.g. ``"HNSW32"``, ``"IVF1024,PQ32"``), a Milvus index type for a Milvus store (default
            ``AUTOINDEX``).
        index_params: Milvus index build parameters (``{"M": 32, "efConstruction": 200}``).
        search_params: default search parameters stored with the index (faiss ``efSearch``/``nprobe``,
            Milvus ``ef``/``nprobe``).
        kv_dir: a Milvus store's folder for KV states (default ``<name>.kv`` beside a milvus-lite file).

    Returns:
        The :class:`~genembed.retrieval.index.Index`, or a :class:`~genembed.retrieval.milvus_store.MilvusIndex`.

    Raises:
        FileExistsError: ``out`` holds an index (and ``overwrite`` is False) or unrelated files.
        SourceError: a source cannot be read (the message names file, line and field).

    Warns:
        UntrainedAdapterWarning: the model's adapter was not trained for the embedding method.
    """
    location = parse_location(out)
    config = config or EmbedSettings(
        tau=getattr(model, "tau", 1.0),
        max_length=chunk_tokens + _TEMPLATE_ROOM,
        center=getattr(model, "center", False),
    )
    trained_for, adapter = getattr(model, "trained_for", None), getattr(model, "adapter", None)
    warn_if_untrained(trained_for, adapter, config.method, config.attention)
    store = store_settings(
        location, model.dim, index_type=index_type, index_params=index_params, search_params=search_params
    )
    if location.kind == "faiss":
        out = Path(location.uri)
        _prepare_folder(out, overwrite)
    elif store_kv:
        from .milvus_build import default_kv_dir

        kv_dir = default_kv_dir(location, kv_dir)
    chunks = chunk_documents(
        read_sources(sources), model.backbone.tokenizer, chunk_tokens=chunk_tokens, overlap=overlap
    )
    geometry = KVGeometry.of(model.backbone.model.config)
    manifest = {
        "model": {"name": model.name, "dim": model.dim, "ref": model_ref or {}},
        "embed": config.to_dict(),
        "chunking": {"chunk_tokens": chunk_tokens, "overlap": overlap},
        "kv": {"dtype": dtype_name(resolve_kv_dtype(kv_dtype)), **vars(geometry)} if store_kv else None,
        "sources": [str(s) for s in sources],
        **store,
    }
    if store_kv and uses_grit_cache(config):  # GRIT caching stores the embedding passes themselves
        if location.kind != "faiss":
            raise ValueError("GRIT caching (--store-kv with --prompt-format gritlm) needs a faiss folder index")
        manifest["kv"]["source"] = grit_kv_source(model)
    elif store_kv:
        prompt = prompt or RagPrompt()
        reused = embedding_pass_reusable(model, config, prompt, [c.embed_text for c in chunks])
        manifest["kv"]["source"] = kv_source(model, prompt, reused=reused)
    if location.kind == "milvus":
        from .milvus_build import build_milvus_index

        if store_kv:
            manifest["kv"]["dir"] = str(kv_dir)
        return build_milvus_index(
            model,
            location,
            chunks,
            manifest,
            batch_size=batch_size,
            shard_size=shard_size,
            overwrite=overwrite,
            show_progress_bar=show_progress_bar,
        )
    return _run(model, out, None, chunks, manifest, batch_size, shard_size, show_progress_bar)


def add_to_index(
    model: Any,
    index_dir: str | Path | StoreLocation,
    sources: Sequence[str | Path],
    *,
    batch_size: int = 16,
    shard_size: int | None = None,
    show_progress_bar: bool = True,
) -> Any:
    """Append the documents of ``sources`` to an existing index (same model, settings and KV storage).

    A Milvus store upserts instead: a document id it already holds is replaced (see
    :mod:`genembed.retrieval.milvus_build`).

    Raises:
        ValueError: a document id is already in the index, or ``model`` is not the index's model.
        KVSourceError: the index stores KV states of other generation weights than ``model``'s.
    """
    location = parse_location(index_dir)
    if location.kind == "milvus":
        from .milvus_build import add_to_milvus_index

        return add_to_milvus_index(
            model, location, sources, batch_size=batch_size, shard_size=shard_size, show_progress_bar=show_progress_bar
        )
    base = Index.load(location.uri)
    base.check_model(model)
    if base.has_kv and uses_grit_cache(base.config):
        check_grit_kv_source(base.kv_source, model, index=base.path)
    elif base.has_kv:
        check_kv_source(base.kv_source, model, base.rag_prompt, index=base.path)
    chunking = base.manifest["chunking"]
    if chunking is None:
        raise ValueError(f"{base.path} was imported from `genembed encode` shards: import more the same way")
    docs = read_sources(sources)
    known = {c.doc_id: c.source for c in base.chunks}
    for doc in docs:
        if doc.id in known:
            raise ValueError(f"{doc.source}: document id {doc.id!r} is already in the index (from {known[doc.id]})")
    chunks = chunk_documents(docs, model.backbone.tokenizer, **chunking)
    manifest = {k: v for k, v in base.manifest.items() if k in ("model", "embed", "chunking", "kv", "faiss")}
    manifest["sources"] = [*base.manifest.get("sources", []), *(str(s) for s in sources)]
    return _run(model, base.path, base, chunks, manifest, batch_size, shard_size, show_progress_bar)


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


def _run(
    model: Any,
    path: Path,
    base: Index | None,
    chunks: list[Chunk],
    manifest: dict[str, Any],
    batch_size: int,
    shard_size: int | None,
    show_progress_bar: bool,
) -> Index:
    config = EmbedSettings.from_dict(manifest["embed"])
    kv_info = manifest.get("kv")
    shard_size = shard_size or (64 if kv_info else 1024)
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    first_row = len(base) if base is not None else 0
    generation = (base.manifest["generation"] + 1) if base is not None else 1
    texts = [c.embed_text for c in chunks]
    lengths = [len(ids) for ids in config.prompt_ids(model.backbone.tokenizer, texts, "doc")]
    records = [
        ChunkRecord(first_row + j, c.id, c.doc_id, c.number, c.title, c.text, c.source, n)
        for j, (c, n) in enumerate(zip(chunks, lengths, strict=True))
    ]
    fingerprint = _fingerprint(manifest, generation, shard_size, records)
    build = path / BUILD_DIR
    state = _load_state(build, fingerprint)
    n_shards = (len(records) + shard_size - 1) // shard_size
    kv_dtype = resolve_kv_dtype(kv_info["dtype"]) if kv_info else None
    grit = kv_info is not None and uses_grit_cache(config)  # the embedding pass's states are stored as they are
    prompt = RagPrompt.from_dict(kv_info["source"]["prompt"]) if kv_info and not grit else RagPrompt()
    reuse = kv_info is not None and (grit or embedding_pass_reusable(model, config, prompt, texts))
    from tqdm.auto import tqdm

    done_chunks = sum(min(shard_size, len(records) - j * shard_size) for j in state["done"])
    with tqdm(
        total=len(records), initial=done_chunks, desc="index", unit="chunk", disable=not show_progress_bar
    ) as bar:
        for j in range(n_shards):
            if j in state["done"]:
                continue
            part = records[j * shard_size : (j + 1) * shard_size]
            part_texts = [r.embed_text for r in part]
            encoded = encode_with_kv(
                model.backbone,
                part_texts,
                config,
                kind="doc",
                keep_kv=reuse,
                batch_size=batch_size,
                kv_dtype=kv_dtype,
            )
            if kv_info is not None:
                states = encoded.kv if grit else None  # GRIT caching reuses the embedding passes as they are
                states = states or generation_states(
                    model, prompt, part_texts, encoded.kv if reuse else None, batch_size=batch_size, kv_dtype=kv_dtype
                )
                name = f"kv/{generation:05d}-{j:05d}.safetensors"
                size = write_kv_shard(
                    path / name,
                    [r.row for r in part],
                    states,
                    dtype=kv_dtype,  # type: ignore[arg-type]
                    metadata={"model": model.name, "format": "genembed-kv"},
                )
                state["kv_shards"][str(j)] = {
                    "file": name,
                    "start": part[0].row,
                    "stop": part[-1].row + 1,
                    "bytes": size,
                }
            emb = build / f"emb-{j:05d}.npy"
            atomic_write_npy(emb, encoded.embeddings)
            state["embeddings"][str(j)] = file_digest(emb)
            state["done"].append(j)
            atomic_write_json(build / _STATE, state)
            bar.update(len(part))
    fix = f"Delete {build} and rerun the same command to embed the new chunks again."
    shards = [build / f"emb-{j:05d}.npy" for j in range(n_shards)]
    for j, shard in enumerate(shards):  # checked against what was recorded, then streamed from disk
        check_file(shard, state["embeddings"].get(str(j)), fix=fix)
    embeddings = [np.load(shard, mmap_mode="r", allow_pickle=False) for shard in shards]
    old_shards = (base.manifest.get("kv") or {}).get("shards", []) if base is not None else []
    new_shards = [state["kv_shards"][str(j)] for j in range(n_shards)] if kv_info else []
    index = commit(
        path, base=base, records=records, embeddings=embeddings, manifest=manifest, kv_shards=old_shards + new_shards
    )
    shutil.rmtree(build, ignore_errors=True)
    return index


def generation_states(
    model: Any, prompt: RagPrompt, texts: list[str], embedding_kv: list[KV] | None, *, batch_size: int, kv_dtype: Any
) -> list[KV]:
    """Each passage segment's KV states as the generator computes them after ``prompt``'s head.

    ``embedding_kv``: the embedding pass's states when that pass is the generator's own (see
    :func:`embedding_pass_reusable`); its positions ``h .. h + L - 1`` are taken. None: a second,
    causal pass of the generation weights computes them.
    """
    tokenizer = model.backbone.tokenizer
    head = prompt.head_ids(tokenizer)
    segments = prompt.passage_ids(tokenizer, texts)
    if embedding_kv is None:
        return segment_states(model, head, segments, batch_size=batch_size, kv_dtype=kv_dtype)[1]
    h = len(head)
    return [
        (k[:, :, h : h + len(s)], v[:, :, h : h + len(s)]) for (k, v), s in zip(embedding_kv, segments, strict=True)
    ]


def embedding_pass_reusable(model: Any, config: EmbedSettings, prompt: RagPrompt, texts: list[str]) -> bool:
    """Whether the chunks' embedding pass is the generator's own pass over ``head + passage segment``:
    same weights, causal attention, and every embedding prompt starting with those tokens."""
    if not same_weights(model) or config.attention != "causal":
        return False
    tokenizer = model.backbone.tokenizer
    head = prompt.head_ids(tokenizer)
    embed_ids = config.prompt_ids(tokenizer, texts, "doc")
    segments = prompt.passage_ids(tokenizer, texts)
    return all(reusable_prefix(e, head, s) for e, s in zip(embed_ids, segments, strict=True))


def _fingerprint(manifest: dict[str, Any], generation: int, shard_size: int, records: list[ChunkRecord]) -> str:
    digest = hashlib.sha256()
    settings = {k: manifest[k] for k in ("model", "embed", "chunking", "kv")}
    digest.update(json.dumps([settings, generation, shard_size], sort_keys=True).encode())
    for r in records:
        digest.update(json.dumps([r.id, r.title, r.text, r.tokens]).encode())
    return digest.hexdigest()


def _load_state(build: Path, fingerprint: str) -> dict[str, Any]:
    file = build / _STATE
    if file.is_file():
        try:
            state = json.loads(file.read_text("utf-8"))
        except json.JSONDecodeError:
            state = None  # a state file is only ever replaced atomically; treat damage as "start over"
        if state is not None and state.get("fingerprint") != fingerprint:
            raise FileExistsError(
                f"{build} holds an interrupted build or add with other sources or settings. Rerun that exact "
                f"command to finish it, or delete {build} to discard it."
            )
        if state is not None:
            state.setdefault("embeddings", {})  # absent in a build left by an older genembed
            return state
    build.mkdir(parents=True, exist_ok=True)
    state = {"fingerprint": fingerprint, "done": [], "kv_shards": {}, "embeddings": {}}
    atomic_write_json(file, state)
    return state

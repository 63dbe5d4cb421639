"""Build an index from sources, or add sources to one, resumably, in any store.

The builder speaks only the :class:`~genembed.retrieval.store.VectorStore` protocol: the location names
the store (:mod:`genembed.retrieval.stores`), the store checks its own index settings, and the new
chunks are embedded in shards of ``shard_size`` chunks. Each shard's embeddings and KV states go to
the store (``add``), which records the shard as done (``set_progress``); ``save`` makes the whole
write current (a faiss folder commits a new generation, a Milvus store marks the build complete).
Interrupt a build at any point and run the same command again: finished shards are skipped. A pending
build with different sources or settings is never mixed in; the error says how to finish or discard it.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..encoders.output import OutputPipeline
from ..encoders.settings import EmbedSettings, IndexEmbedSettings
from ..generation.adapters import same_weights
from ..generation.rag_prompt import RagPrompt
from ..models.trained_for import warn_if_untrained
from .chunking import Chunk, chunk_documents, read_sources
from .grit_cache import check_grit_kv_source, grit_kv_source, uses_grit_cache
from .kv_embed import encode_with_kv
from .kv_ops import KV
from .kv_segment import reusable_prefix, segment_states
from .kv_source import check_kv_source, kv_source
from .kv_store import KVGeometry, dtype_name, resolve_kv_dtype
from .store import ChunkRecord, StoreLocation, VectorStore, fingerprint
from .stores import create_index, index_settings, open_index, parse_location

__all__ = ["add_to_index", "build_index", "run_shards"]

_TEMPLATE_ROOM = 256  # prompt tokens beyond a chunk's text: title, instruction and chat template


def build_index(
    model: Any,
    sources: Sequence[str | Path],
    out: str | Path | StoreLocation,
    *,
    settings: IndexEmbedSettings | EmbedSettings | None = None,
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
    config: IndexEmbedSettings | EmbedSettings | None = None,
) -> VectorStore:
    """Read, chunk and embed ``sources`` into a new index at ``out`` (resuming an interrupted build).

    Args:
        model: a :class:`~genembed.GenerativeEmbedder`.
        sources: JSONL / .txt / .md files or folders (see :mod:`genembed.retrieval.chunking`).
        out: where the index goes: a folder, ``milvus:./idx.db``, ``http://host:19530`` or a
            :class:`~genembed.retrieval.store.StoreLocation` (see :mod:`genembed.retrieval.stores`).
        settings: the index's settings, :class:`~genembed.encoders.settings.IndexEmbedSettings` (default: the
            model's own, :meth:`~genembed.GenerativeEmbedder.embed_settings`, with its centering and
            ``truncate_dim``, prompts up to ``chunk_tokens + 256`` tokens so that titles and the template
            fit); an :class:`~genembed.encoders.settings.EmbedSettings` gets the index defaults.
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
        config: the former name of ``settings`` (deprecated; warns).

    Returns:
        The store holding the new index.

    Raises:
        FileExistsError: ``out`` holds an index (and ``overwrite`` is False) or unrelated files.
        SourceError: a source cannot be read (the message names file, line and field).

    Warns:
        UntrainedAdapterWarning: the model's adapter was not trained for the embedding method.
    """
    location = parse_location(out)
    if config is not None:
        if settings is not None:
            raise TypeError("build_index takes settings= (config= is its deprecated name), not both")
        warnings.warn("build_index(config=...) is deprecated: pass settings=...", DeprecationWarning, stacklevel=2)
        settings = config
    if settings is None:  # the model's own settings (what model.save recorded) and centering
        own = model.embed_settings(max_length=chunk_tokens + _TEMPLATE_ROOM)
        settings = IndexEmbedSettings(embed=own, center=model.center, truncate_dim=model.truncate_dim)
    settings = IndexEmbedSettings.of(settings)
    trained_for, adapter = getattr(model, "trained_for", None), getattr(model, "adapter", None)
    warn_if_untrained(trained_for, adapter, settings.method, settings.attention)
    dim = OutputPipeline.of_index(settings).dim(model.dim)
    store_settings = index_settings(
        location, dim, index_type=index_type, index_params=index_params, search_params=search_params
    )
    chunks = chunk_documents(
        read_sources(sources), model.backbone.tokenizer, chunk_tokens=chunk_tokens, overlap=overlap
    )
    geometry = KVGeometry.of(model.backbone.model.config)
    manifest = {
        "model": {"name": model.name, "dim": dim, "ref": model_ref or {}},
        "embed": settings.to_dict(),
        "chunking": {"chunk_tokens": chunk_tokens, "overlap": overlap},
        "kv": {"dtype": dtype_name(resolve_kv_dtype(kv_dtype)), **vars(geometry)} if store_kv else None,
        "sources": [str(s) for s in sources],
        **store_settings,
    }
    if store_kv and uses_grit_cache(settings):  # GRIT caching stores the embedding passes themselves
        if location.kind != "faiss":
            raise ValueError("GRIT caching (--store-kv with --prompt-format gritlm) needs a faiss folder index")
        manifest["kv"]["source"] = grit_kv_source(model)
    elif store_kv:
        prompt = prompt or RagPrompt()
        reused = embedding_pass_reusable(model, settings, prompt, [c.embed_text for c in chunks])
        manifest["kv"]["source"] = kv_source(model, prompt, reused=reused)
        if kv_dir is not None:
            manifest["kv"]["dir"] = str(kv_dir)
    store = create_index(location, manifest, overwrite=overwrite)
    _ingest(model, store, chunks, batch_size, shard_size, show_progress_bar)
    store.save()
    return store


def add_to_index(
    model: Any,
    index_dir: str | Path | StoreLocation,
    sources: Sequence[str | Path],
    *,
    batch_size: int = 16,
    shard_size: int | None = None,
    show_progress_bar: bool = True,
) -> VectorStore:
    """Add the documents of ``sources`` to an existing index (same model, settings and KV storage).

    A store that replaces documents (Milvus) replaces a document id it already holds; one that cannot
    (a faiss folder) refuses it (:meth:`~genembed.retrieval.store.VectorStore.prepare_documents`).

    Raises:
        ValueError: a document id is already in a faiss folder, or ``model`` is not the index's model.
        KVSourceError: the index stores KV states of other generation weights than ``model``'s.
    """
    store = open_index(index_dir)
    store.check_model(model)
    if store.has_kv and uses_grit_cache(store.settings):
        check_grit_kv_source(store.kv_source, model, index=store.where)
    elif store.has_kv:
        check_kv_source(store.kv_source, model, store.rag_prompt, index=store.where)
    chunking = store.manifest.get("chunking")
    if chunking is None:
        raise ValueError(f"{store.where} was imported from `genembed encode` shards: import more the same way")
    chunks = chunk_documents(read_sources(sources), model.backbone.tokenizer, **chunking)
    store.prepare_documents(dict(Counter(c.doc_id for c in chunks)))
    _ingest(model, store, chunks, batch_size, shard_size, show_progress_bar)
    store.update_manifest(sources=[*store.manifest.get("sources", []), *(str(s) for s in sources)])
    store.save()
    return store


def _ingest(
    model: Any, store: VectorStore, chunks: list[Chunk], batch_size: int, shard_size: int | None, progress_bar: bool
) -> None:
    """Embed ``chunks`` shard by shard (with KV states if the store keeps them) and add them to ``store``."""
    settings = store.settings
    kv_info = store.manifest.get("kv")
    kv_dtype = resolve_kv_dtype(kv_info["dtype"]) if kv_info else None
    texts = [c.embed_text for c in chunks]
    lengths = [len(ids) for ids in settings.prompt_ids(model.backbone.tokenizer, texts, "doc")]
    first = len(store)
    records = [
        ChunkRecord(first + j, c.id, c.doc_id, c.number, c.title, c.text, c.source, n, c.meta)
        for j, (c, n) in enumerate(zip(chunks, lengths, strict=True))
    ]
    shard_size = shard_size or (64 if kv_info else 1024)
    prompt = store.rag_prompt
    grit = kv_info is not None and uses_grit_cache(settings)  # the embedding pass's states are stored as they are
    reuse = kv_info is not None and (grit or embedding_pass_reusable(model, settings, prompt, texts))

    def embed_shard(j: int, part: list[ChunkRecord]) -> None:
        part_texts = [r.embed_text for r in part]
        encoded = encode_with_kv(
            model.backbone, part_texts, settings, kind="doc", keep_kv=reuse, batch_size=batch_size, kv_dtype=kv_dtype
        )
        states = None
        if grit:  # GRIT caching reuses the embedding passes as they are
            states = encoded.kv
        elif kv_info is not None:
            states = generation_states(
                model, prompt, part_texts, encoded.kv if reuse else None, batch_size=batch_size, kv_dtype=kv_dtype
            )
        store.add(part, encoded.embeddings, kv=states)

    job = fingerprint(store.manifest, shard_size, records)
    run_shards(store, job, records, shard_size, embed_shard, desc="index", progress_bar=progress_bar)


def run_shards(
    store: VectorStore,
    job: str,
    items: Sequence[Any],
    shard_size: int,
    work: Callable[[int, list[Any]], None],
    *,
    desc: str,
    progress_bar: bool,
    unit: str = "chunk",
) -> None:
    """Call ``work(j, items of shard j)`` for every shard the store has not recorded as done for ``job``
    (a fingerprint), recording each as it finishes."""
    from tqdm.auto import tqdm

    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    done = store.progress(job)
    n_shards = -(-len(items) // shard_size)
    finished = sum(min(shard_size, len(items) - j * shard_size) for j in done if j < n_shards)
    with tqdm(total=len(items), initial=finished, desc=desc, unit=unit, disable=not progress_bar) as bar:
        for j in range(n_shards):
            if j in done:
                continue
            part = list(items[j * shard_size : (j + 1) * shard_size])
            work(j, part)
            done.add(j)
            store.set_progress(job, done)
            bar.update(len(part))


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


def embedding_pass_reusable(model: Any, settings: IndexEmbedSettings, prompt: RagPrompt, texts: list[str]) -> bool:
    """Whether the chunks' embedding pass is the generator's own pass over ``head + passage segment``:
    same weights, causal attention, and every embedding prompt starting with those tokens."""
    if not same_weights(model) or settings.attention != "causal":
        return False
    tokenizer = model.backbone.tokenizer
    head = prompt.head_ids(tokenizer)
    embed_ids = settings.prompt_ids(tokenizer, texts, "doc")
    segments = prompt.passage_ids(tokenizer, texts)
    return all(reusable_prefix(e, head, s) for e, s in zip(embed_ids, segments, strict=True))

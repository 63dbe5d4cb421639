"""Answer a question from an index with one model: embed the query, retrieve (and optionally rerank)
passages, lay out the prompt, reuse KV states from the embedding passes where the caching mode says so,
and generate.

>>> index = open_index("my-index")
>>> answer = ask(model, index, "What does RoPE rotate?", cache="doc", top_k=3)
>>> print(answer.text); [s.id for s in answer.sources]

See :mod:`genembed.retrieval.context` for the layout and the caching modes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Unpack

from ..generation.adapters import adapter_mode, each_step_in, same_weights
from ..generation.chat import eos_token_ids
from ..generation.decoding import decode_stream
from ..generation.detokenize import stream_pieces
from ..generation.rag_prompt import RagPrompt, passage_order
from ..generation.sampling import ANSWER_SAMPLING, SamplingKwargs, SamplingOptions
from .context import Context, Segment, assemble, fresh_input, mode_layout
from .grit_cache import grit_context, uses_grit_cache
from .kv_embed import encode_with_kv
from .kv_ops import KV
from .kv_segment import reusable_prefix, segment_states
from .kv_source import check_kv_source
from .search import rerank_hits, retrieve_hits
from .store import VectorStore

__all__ = ["ANSWER_SAMPLING", "Answer", "Query", "Source", "ask", "build_context", "retrieve"]


@dataclass
class Query:
    """The question and its embedding pass: ``embedding`` ``(1, D)``, ``ids`` the embedding prompt's
    tokens and ``kv`` their states (kept with ``keep_query_kv``; reused for a cached query segment only
    when that pass is the generator's own, see :mod:`genembed.retrieval.kv_segment`)."""

    text: str
    embeddings: Any
    ids: list[int]
    kv: KV | None = None


@dataclass(frozen=True)
class Source:
    """A retrieved passage: the store's key for it (``row``: a faiss row, a Milvus primary key), its chunk
    and document ids from the corpus, where it came from, and its scores."""

    row: int
    id: str
    doc_id: str
    title: str
    text: str
    source: str
    score: float  # cosine similarity to the query
    rerank_score: float | None = None  # the reranker's raw score (RerankResult.score), when reranked


@dataclass
class Answer:
    """The generated answer and how it was made.

    ``timings`` (seconds since the call started unless noted): ``embed_query``, ``search``, ``rerank``
    (durations), ``first_token`` (time to first token), ``total``. Token counts: ``prompt_tokens``
    (the whole context), ``cached_tokens`` (taken from KV states; ``recomputed_tokens`` of them recomputed),
    ``new_tokens`` (generated).
    """

    question: str
    text: str
    sources: list[Source]
    mode: str
    order: str
    timings: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    new_tokens: int = 0
    recomputed_tokens: int = 0


def retrieve(
    model: Any,
    index: VectorStore,
    question: str,
    *,
    top_k: int = 3,
    rerank: bool = False,
    rerank_candidates: int = 10,
    keep_query_kv: bool = False,
    timings: dict[str, float] | None = None,
    filter: str | None = None,
    max_length: int | None = None,
) -> tuple[Query, list[Source]]:
    """Embed the question (keeping its KV states if asked) and return it with the top passages.

    With ``rerank``, the best ``max(top_k, rerank_candidates)`` by embedding are reordered by
    :meth:`~genembed.GenerativeEmbedder.rerank` and the first ``top_k`` kept. ``filter`` restricts the
    search to chunks whose metadata match it (a Milvus store's boolean expression). ``max_length``
    (None: the index's) cuts the prompt the question is embedded in.
    """
    timings = timings if timings is not None else {}
    index.check_model(model)
    t0 = time.perf_counter()
    # the query's embedding-pass states serve a cached query segment when that pass is the generator's own
    # (causal), or in GRIT's caching, which reuses the bidirectional embedding pass (grit_cache)
    reusable = index.settings.attention == "causal" or uses_grit_cache(index.settings)
    keep = keep_query_kv and same_weights(model) and reusable
    settings = index.settings if max_length is None else index.settings.replace(max_length=max_length)
    encoded = encode_with_kv(model.backbone, [question], settings, kind="query", keep_kv=keep)
    query = Query(question, encoded.embeddings, encoded.ids[0], encoded.kv[0] if encoded.kv else None)
    timings["embed_query"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    n_candidates = max(top_k, rerank_candidates) if rerank else top_k
    hits = retrieve_hits(index, query.embeddings, n_candidates, filter=filter)
    timings["search"] = time.perf_counter() - t0
    if rerank and hits:
        t0 = time.perf_counter()
        hits = rerank_hits(model, question, hits, len(hits))
        timings["rerank"] = time.perf_counter() - t0
    sources = []
    for hit in hits[:top_k]:
        c = index.chunk(hit.index)
        sources.append(
            Source(hit.index, c.id, c.doc_id, c.title, c.text, c.source, hit.retrieval_score, hit.rerank_score)
        )
    return query, sources


def build_context(
    model: Any,
    index: VectorStore,
    query: Query,
    sources: list[Source],
    *,
    mode: str = "none",
    order: str | None = None,
    prompt: RagPrompt | None = None,
    recompute: float = 0.0,
) -> Context:
    """Lay out ``[head] [passages] [query] [tail]`` (or ``[head] [query] [passages, best last] [tail]``)
    and take the mode's segments from caches.

    Passages come from the index's stored states, checked to be the generator's own
    (:func:`~genembed.retrieval.kv_source.check_kv_source`). The query's states come from its embedding
    pass when that pass is the generator's own and its prompt starts with ``head + query segment``;
    otherwise (e.g. the shipped embedding-only adapter) from a causal pass with the generation weights
    here, which gives the same prompt and answer but saves no time.

    Args:
        prompt: the prompt's text (default: the one the index's KV states were made for, else
            :class:`~genembed.generation.rag_prompt.RagPrompt`'s defaults).
        recompute: share of the isolated cached tokens (cached segments after the first) recomputed
            with the passages before them in view (:mod:`~genembed.retrieval.kv_blend`); 0: none.

    An index embedded in GritLM's format (``prompt_format="gritlm"``) answers with GritLM's own caching
    formats and its embedding passes' states instead (:mod:`~genembed.retrieval.grit_cache`).

    Raises:
        ValueError: the index stores no KV states for a doc-caching mode.
        KVSourceError: the stored states were made by other weights, attention or prompt.
    """
    order, query_cached, docs_cached = mode_layout(mode, order)
    if uses_grit_cache(index.settings):  # GritLM's own formats and states (its order; no prompt to choose)
        return _fits(model, grit_context(model, index, query, sources, mode))
    prompt = prompt or index.rag_prompt
    tok = model.backbone.tokenizer
    head = prompt.head_ids(tok)
    q_ids = prompt.query_ids(tok, query.text, order)
    d_ids = prompt.passage_ids(tok, [index.text(s.row) for s in sources])
    d_kv: list[KV | None] = [None] * len(sources)
    if docs_cached:
        if not index.has_kv:
            raise ValueError(f"index {index.where} stores no KV states: rebuild it with --store-kv for doc caching")
        check_kv_source(index.kv_source, model, prompt, index=index.where)
        d_kv = [index.kv(s.row, tokens=len(ids)) for s, ids in zip(sources, d_ids, strict=True)]
    head_kv, q_kv = None, None
    if query_cached:
        head_kv, q_kv = _query_states(model, query, head, q_ids)
    # the head is cached only before a cached segment: computed with the passages after it, one pass
    # from position 0 takes the fast causal path (a prefill on top of a cache builds an explicit mask)
    first_cached = query_cached if order == "query_first" else docs_cached
    if not first_cached:
        head_kv = None
    elif head_kv is None and head:
        head_kv = segment_states(model, [], [head])[1][0]
    h = len(head)
    q_seg = Segment("query", q_ids, q_kv, at=h)
    d_segs = [Segment(s.id, ids, kv, at=h) for s, ids, kv in zip(sources, d_ids, d_kv, strict=True)]
    d_segs = passage_order(d_segs, order)  # the best passage first, or last when the question comes first
    segments = [q_seg, *d_segs] if order == "query_first" else [*d_segs, q_seg]
    lm = model.backbone.model
    with adapter_mode(lm, getattr(model, "generation_adapter", False)):  # prefills run the generator
        context = assemble(lm, [Segment("head", head, head_kv), *segments], prompt.tail_ids(tok), recompute=recompute)
    return _fits(model, context)


def _fits(model: Any, context: Context) -> Context:
    """``context``, or ValueError when it leaves no room in the model's context window."""
    limit = getattr(model.backbone.model.config, "max_position_embeddings", None)
    if limit is not None and context.total_tokens >= limit:
        raise ValueError(f"the RAG prompt has {context.total_tokens} tokens; the model's context holds {limit}")
    return context


def _query_states(model: Any, query: Query, head: list[int], q_ids: list[int]) -> tuple[KV | None, KV]:
    """(head, query segment) states: from the embedding pass when it is the generator's own, else computed."""
    h, n = len(head), len(head) + len(q_ids)
    if query.kv is not None and same_weights(model) and reusable_prefix(query.ids, head, q_ids):
        keys, values = query.kv
        return ((keys[:, :, :h], values[:, :, :h]) if h else None), (keys[:, :, h:n], values[:, :, h:n])
    head_kv, (q_kv,) = segment_states(model, head, [q_ids])
    return head_kv, q_kv


def ask(
    model: Any,
    index: VectorStore,
    question: str,
    *,
    cache: str = "none",
    order: str | None = None,
    top_k: int = 3,
    rerank: bool = False,
    rerank_candidates: int = 10,
    sampling: SamplingOptions | None = None,
    on_text: Callable[[str], None] | None = None,
    filter: str | None = None,
    recompute: float = 0.0,
    max_length: int | None = None,
    **options: Unpack[SamplingKwargs],
) -> Answer:
    """Retrieve passages for ``question`` and generate an answer with them in context.

    Args:
        model: the :class:`~genembed.GenerativeEmbedder` the index was built with.
        index: the index, in any store (:func:`~genembed.retrieval.stores.open_index`; with KV states for
            the doc-caching modes).
        question: the question.
        cache: ``none``, ``query``, ``doc``, ``querydoc`` or ``docquery`` (see :mod:`~genembed.retrieval.context`).
        order: ``doc_first`` (default) or ``query_first``; ``querydoc`` and ``docquery`` fix it.
        top_k: passages put in the prompt (more than one works in every mode).
        rerank: rerank ``rerank_candidates`` retrieved passages generatively before keeping ``top_k``.
        rerank_candidates: passages retrieved for reranking.
        sampling: how the answer is decoded (None: :data:`ANSWER_SAMPLING`), changed by ``options``, the
            keywords of :class:`~genembed.generation.sampling.SamplingOptions` (``max_new_tokens``,
            ``temperature``, ``top_p``, ``seed``, ``no_repeat_ngram_size``, ``repetition_penalty``).
        on_text: called with each piece of answer text as it is generated (streaming).
        filter: retrieve only chunks matching this metadata expression (a Milvus store, e.g.
            ``'source like "docs/%"'``).
        recompute: share of the isolated cached tokens to recompute, those whose states isolation changed
            most (CacheBlend; :mod:`~genembed.retrieval.kv_blend`): 0 keeps every cached state, 1 equals
            plain RAG. Only the cached segments after the first are concerned.
        max_length: tokens of the prompt the question is embedded in, cut from the end (None: the
            index's own).

    Returns:
        The :class:`Answer` with its sources, timings and token counts.

    Raises:
        ValueError: a bad setting, or a mode that needs stored KV states the index lacks.
        KVSourceError: the index's KV states were made by other weights, attention or prompt than the
            model generates with.
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    sampling = SamplingOptions.build(sampling or ANSWER_SAMPLING, **options)
    mode_order, query_cached, _ = mode_layout(cache, order)
    start = time.perf_counter()
    timings: dict[str, float] = {}
    query, sources = retrieve(
        model,
        index,
        question,
        top_k=top_k,
        rerank=rerank,
        rerank_candidates=rerank_candidates,
        keep_query_kv=query_cached,
        timings=timings,
        filter=filter,
        max_length=max_length,
    )
    context = build_context(model, index, query, sources, mode=cache, order=order, recompute=recompute)
    pieces, stats = [], {}
    for piece in generate_from_context(model, context, sampling=sampling, stats=stats):
        pieces.append(piece)
        if on_text is not None:
            on_text(piece)
    timings["total"] = time.perf_counter() - start
    if "first_token_at" in stats:
        timings["first_token"] = stats["first_token_at"] - start
    return Answer(
        question,
        "".join(pieces).strip(),
        sources,
        cache,
        mode_order,
        timings,
        prompt_tokens=context.total_tokens,
        cached_tokens=context.cached_tokens,
        new_tokens=stats.get("new_tokens", 0),
        recomputed_tokens=context.recomputed,
    )


def generate_from_context(
    model: Any,
    context: Context,
    *,
    sampling: SamplingOptions | None = None,
    stats: dict[str, float] | None = None,
    **options: Unpack[SamplingKwargs],
) -> Iterator[str]:
    """Text pieces of the answer, decoded after ``context`` (its cache is extended in place) with
    ``sampling`` (None: :data:`ANSWER_SAMPLING`) changed by ``options``.

    ``stats``, if given, receives ``new_tokens`` (the count so far) and ``first_token_at`` (the
    ``time.perf_counter()`` at which the first token was produced).
    """
    backbone = model.backbone
    sampling = SamplingOptions.build(sampling or ANSWER_SAMPLING, **options)
    device = next(backbone.model.parameters()).device
    input_ids, mask, positions = fresh_input(context, device)
    tokens = decode_stream(
        backbone.model,
        input_ids,
        cache=context.cache,
        attention_mask=mask,
        position_ids=positions,
        sampling=sampling,
        eos_token_ids=eos_token_ids(backbone),
    )
    weights = getattr(model, "generation_adapter", False)
    tokens = each_step_in(functools.partial(adapter_mode, backbone.model, weights), tokens)
    if stats is not None:
        tokens = _counted(tokens, stats)
    return stream_pieces(backbone.tokenizer, tokens, list(sampling.stop))


def _counted(tokens: Iterator[int], stats: dict[str, float]) -> Iterator[int]:
    stats["new_tokens"] = 0
    for token in tokens:
        if not stats["new_tokens"]:
            stats["first_token_at"] = time.perf_counter()
        stats["new_tokens"] += 1
        yield token

"""Retrieve-then-rerank: embedding search over a list of texts or an index, then generative reranking
of the top candidates with the same model (GRIT's "one model" pipeline).

An index is anything with ``search(query_embeddings, k) -> (scores, ids)`` and ``text(i)`` (see
:class:`SearchIndex`); :class:`ExactIndex` is the in-memory one used for plain lists of texts.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..encoders.defaults import DEFAULT_BATCH_SIZE

__all__ = ["ExactIndex", "SearchHit", "SearchIndex", "no_hits", "rerank_hits", "retrieve_hits", "search"]


@runtime_checkable
class SearchIndex(Protocol):
    """What :func:`search` needs from an index.

    ``search`` takes ``(n, dim)`` float32 query embeddings (L2-normalized, encoded with the settings
    the index was built with) and returns ``(scores, ids)``, both ``(n, k')`` with ``k' <= k``, best
    first; ids of -1 mark missing results. ``text(i)`` returns the text with id ``i``.

    Optionally an index also offers ``encode_queries(model, queries) -> (n, dim)`` to embed queries
    with its own build settings (method, steps, query instruction), and ``chunk(i)`` with the chunk's
    corpus ids (``.id``, ``.doc_id``), as every :class:`~genembed.retrieval.store.VectorStore` does;
    :func:`search` then uses them.
    """

    def search(self, query_embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def text(self, i: int) -> str: ...


def no_hits(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, ids)`` for ``n`` queries and ``k`` results before any is found: -inf float32 scores and
    -1 int64 ids, the padding an index returns past its last result."""
    return np.full((n, k), -np.inf, dtype=np.float32), np.full((n, k), -1, dtype=np.int64)


@dataclass(frozen=True)
class SearchHit:
    """One search result.

    Every store gives the same fields. ``index`` is the store's key for the hit (a position in a list, a
    faiss row, a Milvus primary key: pass it to ``index.chunk()`` / ``index.kv()``); ``id`` and ``doc_id``
    are the chunk's and its document's ids from the corpus (``"doc#0"`` and ``"doc"``; a list's position
    as a string for both).

    Attributes:
        index: the store's key for the text (its position in a list).
        score: the final score: the raw rerank score for reranked hits (``RerankResult.score``: the mean
            log-probability of the query's tokens for ``query_likelihood``, the log-odds of "Yes" for
            ``yes_no``), else the embedding score.
        text: the text.
        retrieval_score: the embedding similarity (inner product of normalized embeddings).
        retrieval_rank: 0-based rank by embedding similarity.
        rerank_score: the rerank score, or None when the hit was not reranked.
        id: the chunk's id (``"doc#0"``), from the corpus.
        doc_id: the id of the chunk's document in the corpus.
    """

    index: int
    score: float
    text: str
    retrieval_score: float
    retrieval_rank: int
    rerank_score: float | None = None
    id: str = ""
    doc_id: str = ""


class ExactIndex:
    """Exact inner-product search over embeddings held in memory (numpy; fine up to ~10^5 texts).

    Args:
        embeddings: ``(n, dim)`` document embeddings (normalize them for cosine similarity).
        texts: the ``n`` texts, in the same order.
    """

    def __init__(self, embeddings: np.ndarray, texts: Sequence[str]):
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.ndim != 2 or embeddings.shape[0] != len(texts):
            raise ValueError(f"need (n, dim) embeddings for n={len(texts)} texts, got shape {embeddings.shape}")
        self.embeddings, self.texts = embeddings, list(texts)

    def __len__(self) -> int:
        return len(self.texts)

    def search(self, query_embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` by inner product for each query: ``(scores, ids)``, ``(n, k)``, -1 ids past the end."""
        queries = np.atleast_2d(np.asarray(query_embeddings, dtype=np.float32))
        sims = queries @ self.embeddings.T  # (n, N)
        top = min(k, sims.shape[1])
        ids = np.argpartition(-sims, top - 1, axis=1)[:, :top] if top else np.zeros((len(queries), 0), dtype=int)
        part = np.take_along_axis(sims, ids, axis=1)
        order = np.argsort(-part, axis=1, kind="stable")
        ids, part = np.take_along_axis(ids, order, axis=1), np.take_along_axis(part, order, axis=1)
        scores, out = no_hits(len(queries), k)
        scores[:, :top], out[:, :top] = part, ids
        return scores, out

    def text(self, i: int) -> str:
        return self.texts[i]


def search(
    model: Any,
    query: str,
    corpus_or_index: Sequence[str] | SearchIndex,
    *,
    k: int = 10,
    rerank: bool = True,
    rerank_top: int | None = None,
    instruction: str | None = None,
    rerank_instruction: str | None = None,
    rerank_scoring: str = "query_likelihood",
    batch_size: int = DEFAULT_BATCH_SIZE,
    filter: str | None = None,
    **encode_kwargs: Any,
) -> list[SearchHit]:
    """Embed the query, retrieve candidates, and rerank the best ones generatively.

    Args:
        model: a :class:`~genembed.GenerativeEmbedder`.
        query: the query text.
        corpus_or_index: a list of texts (embedded here as documents, on every call: build an index
            to search a corpus repeatedly) or an object implementing :class:`SearchIndex`.
        k: hits returned.
        rerank: rerank candidates with :meth:`~genembed.GenerativeEmbedder.rerank`.
        rerank_top: candidates reranked (default ``k``). With ``rerank_top > k`` more candidates are
            retrieved and the best ``k`` after reranking are returned; with ``rerank_top < k`` the
            hits after the reranked ones keep their retrieval order.
        instruction: the query's embedding instruction (default: the model's query instruction; an
            index with ``encode_queries`` uses its own). It also describes the task in the rerank
            prompt unless ``rerank_instruction`` is given.
        rerank_instruction: the rerank prompt's task description (default: ``instruction`` if given,
            else the reranker's default).
        rerank_scoring: ``"yes_no"`` or ``"query_likelihood"`` (see :meth:`~genembed.GenerativeEmbedder.rerank`).
        batch_size: texts per forward pass when embedding and reranking.
        filter: search only the texts whose metadata match this expression: an index whose ``search``
            takes ``filter=`` (a Milvus store: ``'doc_id in ["a", "b"]'``).
        **encode_kwargs: embedding settings for :meth:`~genembed.GenerativeEmbedder.encode`
            (``method``, ``steps``, ...); for an index without ``encode_queries``, use the settings it
            was built with.

    Returns:
        Up to ``k`` hits, best first.

    Raises:
        TypeError: ``corpus_or_index`` is neither a list of strings nor a :class:`SearchIndex`.
        ValueError: ``k`` or ``rerank_top`` below 1, or a filter for an index that cannot filter.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    if k < 1 or (rerank_top is not None and rerank_top < 1):
        raise ValueError(f"k and rerank_top must be >= 1, got k={k}, rerank_top={rerank_top}")
    index = _as_index(model, corpus_or_index, batch_size, encode_kwargs)
    if isinstance(index, ExactIndex) and not len(index):
        return []
    n_rerank = (k if rerank_top is None else rerank_top) if rerank else 0
    if callable(getattr(index, "encode_queries", None)):
        if encode_kwargs:
            raise ValueError(f"this index embeds queries with its own settings; drop {sorted(encode_kwargs)}")
        query_embedding = index.encode_queries(model, [query])
    else:
        query_embedding = model.encode_query(
            [query], instruction=instruction, batch_size=batch_size, normalize=True, **encode_kwargs
        )
    hits = retrieve_hits(index, np.asarray(query_embedding, dtype=np.float32), max(k, n_rerank), filter=filter)
    hits = rerank_hits(
        model,
        query,
        hits,
        n_rerank,
        instruction=rerank_instruction or instruction,
        batch_size=batch_size,
        scoring=rerank_scoring,
    )
    return hits[:k]


def retrieve_hits(
    index: SearchIndex, query_embedding: np.ndarray, k: int, *, filter: str | None = None
) -> list[SearchHit]:
    """The best ``k`` hits of one query ``(1, dim)`` by embedding score, best first (fewer when the index
    holds fewer). ``filter``: see :func:`search`.

    Raises:
        ValueError: a filter for an index whose ``search`` takes none.
    """
    if filter and "filter" not in inspect.signature(index.search).parameters:
        raise ValueError(f"{type(index).__name__} cannot filter on metadata; a Milvus store can")
    scores, ids = index.search(query_embedding, k, **({"filter": filter} if filter else {}))
    candidates = [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if int(i) >= 0]
    chunk = getattr(index, "chunk", None)  # a store's chunk records carry the corpus ids
    hits = []
    for rank, (i, s) in enumerate(candidates):
        record = chunk(i) if callable(chunk) else None
        chunk_id, doc_id = (record.id, record.doc_id) if record is not None else (str(i), str(i))
        hits.append(SearchHit(i, s, index.text(i), s, rank, id=chunk_id, doc_id=doc_id))
    return hits


def rerank_hits(model: Any, query: str, hits: list[SearchHit], top: int, **rerank_kwargs: Any) -> list[SearchHit]:
    """``hits`` with the first ``top`` reordered by :meth:`~genembed.GenerativeEmbedder.rerank` (their
    ``score`` and ``rerank_score`` become the rerank score); the hits after them keep their order.

    Args:
        rerank_kwargs: passed to ``model.rerank`` (``instruction``, ``batch_size``, ``scoring``).
    """
    if not top or not hits:
        return hits
    head, tail = hits[:top], hits[top:]
    reranked = model.rerank(query, [h.text for h in head], **rerank_kwargs)
    head = [replace(head[r.index], score=r.score, rerank_score=r.score) for r in reranked]
    return head + tail


def _as_index(model: Any, corpus_or_index: Any, batch_size: int, encode_kwargs: dict) -> SearchIndex:
    if isinstance(corpus_or_index, SearchIndex):
        return corpus_or_index
    if isinstance(corpus_or_index, str) or not isinstance(corpus_or_index, Sequence):
        raise TypeError(
            "corpus_or_index must be a list of texts or an index with search(query_embeddings, k) and text(i), "
            f"got {type(corpus_or_index).__name__}"
        )
    for i, text in enumerate(corpus_or_index):
        if not isinstance(text, str):
            raise TypeError(f"corpus_or_index[{i}] must be a string, got {type(text).__name__}")
    if not corpus_or_index:
        return ExactIndex(np.zeros((0, model.dim), dtype=np.float32), [])
    embeddings = model.encode_document(list(corpus_or_index), batch_size=batch_size, normalize=True, **encode_kwargs)
    return ExactIndex(embeddings, corpus_or_index)

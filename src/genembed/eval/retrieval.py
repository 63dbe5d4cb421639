"""Retrieval: nDCG@10 (x100, linear gain) of exact inner-product search over normalised embeddings.

Queries are embedded with the task ``instruction``, documents (``title + " " + text``) with
``doc_instruction``. Search is faiss ``IndexFlatIP`` (exact). With ``rerank_top=N`` the first-stage
top N of each query are re-ordered by a generative reranker (``model.rerank``); the first-stage
score is kept as the ``first_stage`` detail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .metrics import ndcg_at_k
from .results import TaskScores
from .tasks import Task

__all__ = ["evaluate_retrieval", "exact_search"]

K = 10


def exact_search(queries: np.ndarray, docs: np.ndarray, top: int) -> np.ndarray:
    """Indices ``(n_queries, min(top, n_docs))`` of the highest inner products, best first (faiss flat IP)."""
    import faiss

    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(np.ascontiguousarray(docs, dtype=np.float32))
    _, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), min(top, docs.shape[0]))
    return ids


def evaluate_retrieval(
    task: Task,
    embed: Callable[..., np.ndarray],
    *,
    reranker: Any = None,
    rerank_top: int | None = None,
    rerank_batch_size: int = 8,
) -> TaskScores:
    """Score a retrieval task, optionally re-ranking the top ``rerank_top`` documents with ``reranker``."""
    if rerank_top is not None and (reranker is None or rerank_top < 1):
        raise ValueError("rerank_top needs a reranker (an object with .rerank) and a value >= 1")
    data = task.data
    queries = embed(data.query_texts, task.instruction, f"{task.name} queries")  # (Q, V, D)
    docs = embed(data.doc_texts, task.doc_instruction, f"{task.name} corpus")  # (N, V, D)
    rerank_scores: dict[tuple[int, int], float] = {}  # (query, doc) -> score, shared by all views
    scores, details = [], []
    for v in range(queries.shape[1]):
        ranked = exact_search(queries[:, v], docs[:, v], max(K, rerank_top or 0))
        first = _mean_ndcg(data, ranked)
        if rerank_top is None:
            scores.append(first)
            details.append({})
            continue
        reordered = [
            _rerank(reranker, task, q, list(row[row >= 0]), rerank_top, rerank_scores, rerank_batch_size)
            for q, row in enumerate(ranked)
        ]
        scores.append(_mean_ndcg(data, reordered))
        details.append({"first_stage": first})
    info: dict[str, Any] = {"queries": len(data.query_ids), "documents": len(data.doc_ids)}
    info |= {"judgements": sum(len(j) for j in data.qrels.values())}
    if rerank_top is not None:
        info["rerank_top"] = rerank_top
        info["reranked_pairs"] = len(rerank_scores)
    if data.warnings:
        info["warnings"] = list(data.warnings)
    return TaskScores(scores=scores, details=details, info=info)


def _mean_ndcg(data: Any, ranked: Any) -> float:
    per_query = [
        ndcg_at_k([data.doc_ids[i] for i in row if i >= 0], data.qrels[qid], K)
        for qid, row in zip(data.query_ids, ranked, strict=True)
    ]
    return float(np.mean(per_query))


def _rerank(
    reranker: Any,
    task: Task,
    q: int,
    candidates: list[int],
    top: int,
    known: dict[tuple[int, int], float],
    batch_size: int,
) -> list[int]:
    """The candidates with the first ``top`` re-ordered by reranker score (ties keep first-stage order)."""
    head, tail = candidates[:top], candidates[top:]
    todo = [d for d in head if (q, d) not in known]
    if todo:
        data = task.data
        results = reranker.rerank(
            data.query_texts[q],
            [data.doc_texts[d] for d in todo],
            top_n=None,
            instruction=task.instruction or None,
            batch_size=batch_size,
        )
        if sorted(r.index for r in results) != list(range(len(todo))):
            raise ValueError(f"reranker returned indices {sorted(r.index for r in results)} for {len(todo)} documents")
        for r in results:
            known[q, todo[r.index]] = float(r.score)
    order = sorted(range(len(head)), key=lambda i: (-known[q, head[i]], i))
    return [head[i] for i in order] + tail

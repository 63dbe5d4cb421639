"""``POST /v1/rerank`` (Cohere v1 / Jina format) and ``POST /v2/rerank`` (Cohere v2), scored
generatively by the served model.

``relevance_score`` is a probability in [0, 1], as Cohere's and Jina's are; what it is a probability
of depends on the scoring (``scoring`` in the request, else the server's ``--rerank-scoring``; see
:func:`genembed.generation.rerank.relevance_probabilities`):

- ``query_likelihood`` (default): the probability that the query was written for this document rather
  than for another of the request's documents, ``P(q | d_i) / sum_j P(q | d_j)``. The scores of all
  the documents sum to 1 (``top_n`` only cuts the list), so they compare documents within one request;
  a lone document scores 1.
- ``yes_no``: ``P("Yes") / (P("Yes") + P("No"))`` when the model is asked "Is the document relevant to
  the query?", judged for each document on its own.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from fastapi import APIRouter, Depends

from ..generation.query_likelihood import MAX_QUERY_TOKENS
from ..generation.rerank import RerankResult as Ranked
from .errors import APIError, error_responses
from .schemas import (
    ApiVersion,
    MetaTokens,
    RerankDocument,
    RerankMeta,
    RerankRequest,
    RerankResponse,
    RerankResult,
    RerankUsage,
    V2RerankMeta,
    V2RerankRequest,
    V2RerankResponse,
    V2RerankResult,
)
from .state import ServingState, get_state

__all__ = ["router", "router_v2"]

router = APIRouter()  # mounted at /v1
router_v2 = APIRouter()  # mounted at /v2
_ERRORS = error_responses(400, 413, 422, 429)


@dataclass
class _Reranked:
    ranked: list[Ranked]  # best first
    tokens: int  # tokens read: the query once per document, and each document as cut
    cut: list[int]  # indices of the documents cut to fit the server's limit


def document_room(state: ServingState, query_tokens: int) -> int:
    """Document tokens that fit ``max_input_tokens`` beside a query of ``query_tokens`` tokens.

    Raises:
        APIError: 413 when the query alone leaves no room for a document.
    """
    limit = state.settings.max_input_tokens
    room = limit - query_tokens
    if room < 1:
        raise APIError(
            413,
            f"the query is {query_tokens} tokens long; this server takes at most {limit} tokens of query and "
            "document together (max_input_tokens), so no document fits beside it",
            param="query",
            code="too_many_tokens",
        )
    return room


async def _rerank(
    state: ServingState,
    query: str,
    documents: list[str],
    *,
    top_n: int | None,
    instruction: str | None,
    scoring: str | None,
    truncation: bool,
    max_tokens_per_doc: int | None = None,
) -> _Reranked:
    """Rerank within the server's limits: each document (first cut to ``max_tokens_per_doc``, when given)
    must fit ``max_input_tokens`` with the query; with ``truncation`` a longer one is cut to fit (as
    Cohere and Jina do), without it the request is refused with 413 naming the document and its length."""
    s = state.settings
    if len(documents) > s.max_inputs:  # refuse before tokenizing a huge request
        state.check_sizes([0] * len(documents), field="documents", what="documents")
    query_tokens = min(state.count_tokens([query])[0], MAX_QUERY_TOKENS)  # the model reads at most this much
    room = document_room(state, query_tokens)
    lengths = [min(n, max_tokens_per_doc or n) for n in state.count_tokens(documents)]
    cut = [i for i, n in enumerate(lengths) if n > room]
    if cut and not truncation:
        i = cut[0]
        given = " (after max_tokens_per_doc)" if max_tokens_per_doc else ""
        raise APIError(
            413,
            f"documents[{i}] is {lengths[i]} tokens long{given} and the query {query_tokens}: "
            f"{lengths[i] + query_tokens} in all; this server takes at most {s.max_input_tokens} per document with "
            "its query (max_input_tokens); leave truncation on (the default) to cut long documents to fit",
            param=f"documents.{i}",
            code="too_many_tokens",
        )
    kept = [min(n, room) for n in lengths]
    tokens = len(documents) * query_tokens + sum(kept)
    state.check_request_tokens(tokens, field="documents")
    state.worker.check_capacity()
    with state.worker.admit():
        ranked = await state.worker.run(
            state.model.rerank,
            query,
            documents,
            top_n=top_n,
            instruction=instruction,
            max_length=min(max_tokens_per_doc or room, room),
            scoring=scoring or s.rerank_scoring,
        )
    state.metrics.count_tokens("rerank", "prompt", tokens)
    return _Reranked(ranked, tokens, cut)


def _cut_warning(result: _Reranked, state: ServingState) -> list[str] | None:
    if not result.cut:
        return None
    shown = ", ".join(map(str, result.cut[:10])) + (" ..." if len(result.cut) > 10 else "")
    return [
        f"{len(result.cut)} document(s) cut to fit this server's max_input_tokens={state.settings.max_input_tokens} "
        f"with the query (indices {shown}); send truncation=false to be refused instead"
    ]


@router.post(
    "/rerank",
    response_model=RerankResponse,
    summary="Rerank documents for a query (Cohere v1 / Jina format)",
    response_model_exclude_none=True,
    responses=_ERRORS,
)
async def rerank(body: RerankRequest, state: ServingState = Depends(get_state)) -> RerankResponse:
    """Score every document against the query; results are sorted by ``relevance_score``, best first.

    ``truncation`` (on by default) cuts a document too long for the server's ``max_input_tokens`` with the
    query; ``meta.warnings`` (Cohere v1's field, sent only then) says which were cut."""
    documents = [d if isinstance(d, str) else d.text for d in body.documents]
    reranked = await _rerank(
        state,
        body.query,
        documents,
        top_n=body.top_n,
        instruction=body.instruction,
        scoring=body.scoring,
        truncation=body.truncation,
    )
    results = [
        RerankResult(
            index=r.index,
            relevance_score=r.probability,
            document=RerankDocument(text=documents[r.index]) if body.return_documents else None,
        )
        for r in reranked.ranked
    ]
    warnings = _cut_warning(reranked, state)
    return RerankResponse(
        id=str(uuid.uuid4()),
        model=state.model_id,
        results=results,
        usage=RerankUsage(total_tokens=reranked.tokens),
        meta=RerankMeta(api_version=ApiVersion(version="1"), warnings=warnings) if warnings else None,
    )


@router_v2.post(
    "/rerank",
    response_model=V2RerankResponse,
    summary="Rerank documents for a query (Cohere v2 format)",
    response_model_exclude_none=True,
    responses=_ERRORS,
)
async def rerank_v2(body: V2RerankRequest, state: ServingState = Depends(get_state)) -> V2RerankResponse:
    """Score every document against the query; results are sorted by ``relevance_score``, best first.

    ``max_tokens_per_doc`` cuts documents; ``truncation`` (on by default) cuts them further to fit the
    server's ``max_input_tokens`` with the query (``meta.warnings`` says which were cut)."""
    reranked = await _rerank(
        state,
        body.query,
        list(body.documents),
        top_n=body.top_n,
        instruction=body.instruction,
        scoring=body.scoring,
        max_tokens_per_doc=body.max_tokens_per_doc,
        truncation=body.truncation,
    )
    return V2RerankResponse(
        id=str(uuid.uuid4()),
        results=[V2RerankResult(index=r.index, relevance_score=r.probability) for r in reranked.ranked],
        meta=V2RerankMeta(
            api_version=ApiVersion(version="2"),
            tokens=MetaTokens(input_tokens=reranked.tokens),
            warnings=_cut_warning(reranked, state),
        ),
    )

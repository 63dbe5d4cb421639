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

from fastapi import APIRouter, Depends

from ..generation.rerank import RerankResult as Ranked
from .errors import error_responses
from .schemas import (
    ApiVersion,
    MetaTokens,
    RerankDocument,
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


async def _rerank(
    state: ServingState,
    query: str,
    documents: list[str],
    *,
    top_n: int | None,
    instruction: str | None,
    scoring: str | None,
    max_tokens_per_doc: int | None = None,
) -> tuple[list[Ranked], int]:
    """Results best first (``probability`` over all documents) and the tokens read."""
    s = state.settings
    if len(documents) > s.max_inputs:  # refuse before tokenizing a huge request
        state.check_sizes([0] * len(documents), field="documents", what="documents")
    max_length = min(max_tokens_per_doc or s.max_input_tokens, s.max_input_tokens)
    query_tokens = state.count_tokens([query])[0]
    doc_tokens = [min(n, max_length) for n in state.count_tokens(documents)]
    state.check_sizes([query_tokens + n for n in doc_tokens], field="documents", what="documents")
    state.worker.check_capacity()
    with state.worker.admit():
        ranked = await state.worker.run(
            state.model.rerank,
            query,
            documents,
            top_n=top_n,
            instruction=instruction,
            max_length=max_length,
            scoring=scoring or s.rerank_scoring,
        )
    tokens = len(documents) * query_tokens + sum(doc_tokens)
    state.metrics.count_tokens("rerank", "prompt", tokens)
    return ranked, tokens


@router.post(
    "/rerank",
    response_model=RerankResponse,
    summary="Rerank documents for a query (Cohere v1 / Jina format)",
    response_model_exclude_none=True,
    responses=_ERRORS,
)
async def rerank(body: RerankRequest, state: ServingState = Depends(get_state)) -> RerankResponse:
    """Score every document against the query; results are sorted by ``relevance_score``, best first."""
    documents = [d if isinstance(d, str) else d.text for d in body.documents]
    ranked, tokens = await _rerank(
        state, body.query, documents, top_n=body.top_n, instruction=body.instruction, scoring=body.scoring
    )
    results = [
        RerankResult(
            index=r.index,
            relevance_score=r.probability,
            document=RerankDocument(text=documents[r.index]) if body.return_documents else None,
        )
        for r in ranked
    ]
    return RerankResponse(
        id=str(uuid.uuid4()), model=state.model_id, results=results, usage=RerankUsage(total_tokens=tokens)
    )


@router_v2.post(
    "/rerank",
    response_model=V2RerankResponse,
    summary="Rerank documents for a query (Cohere v2 format)",
    responses=_ERRORS,
)
async def rerank_v2(body: V2RerankRequest, state: ServingState = Depends(get_state)) -> V2RerankResponse:
    """Score every document against the query; results are sorted by ``relevance_score``, best first.

    ``max_tokens_per_doc`` cuts documents (to at most the server's ``max_input_tokens``)."""
    ranked, tokens = await _rerank(
        state,
        body.query,
        list(body.documents),
        top_n=body.top_n,
        instruction=body.instruction,
        scoring=body.scoring,
        max_tokens_per_doc=body.max_tokens_per_doc,
    )
    return V2RerankResponse(
        id=str(uuid.uuid4()),
        results=[V2RerankResult(index=r.index, relevance_score=r.probability) for r in ranked],
        meta=V2RerankMeta(api_version=ApiVersion(version="2"), tokens=MetaTokens(input_tokens=tokens)),
    )

"""``POST /v1/rerank`` in the Cohere/Jina format, scored generatively by the served model.

``relevance_score`` is in [0, 1], as Cohere's and Jina's are: the model's probability of answering
"yes" rather than "no" to "Is the document relevant to the query?", i.e. the sigmoid of the
log-odds :meth:`GenerativeEmbedder.rerank` returns (same order).
"""

from __future__ import annotations

import math
import uuid

from fastapi import APIRouter, Depends

from .schemas import RerankDocument, RerankRequest, RerankResponse, RerankResult, RerankUsage
from .state import ServingState, get_state

__all__ = ["router"]

router = APIRouter()


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


@router.post(
    "/rerank",
    response_model=RerankResponse,
    summary="Rerank documents for a query (Cohere/Jina format)",
    response_model_exclude_none=True,
    responses={401: {}, 413: {}, 422: {}, 429: {}},
)
async def rerank(body: RerankRequest, state: ServingState = Depends(get_state)) -> RerankResponse:
    """Score every document against the query; results are sorted by ``relevance_score``, best first."""
    documents = [d if isinstance(d, str) else d.text for d in body.documents]
    if len(documents) > state.settings.max_inputs:  # refuse before tokenizing a huge request
        state.check_sizes([0] * len(documents), field="documents", what="documents")
    query_tokens = state.count_tokens([body.query])[0]
    doc_tokens = state.count_tokens(documents)
    state.check_sizes([query_tokens + n for n in doc_tokens], field="documents", what="documents")
    state.worker.check_capacity()
    with state.worker.admit():
        ranked = await state.worker.run(
            state.model.rerank,
            body.query,
            documents,
            top_n=body.top_n,
            instruction=body.instruction,
            max_length=state.settings.max_input_tokens,
        )
    results = [
        RerankResult(
            index=r.index,
            relevance_score=_sigmoid(float(r.score)),
            document=RerankDocument(text=documents[r.index]) if body.return_documents else None,
        )
        for r in ranked
    ]
    return RerankResponse(
        id=str(uuid.uuid4()),
        model=state.model_id,
        results=results,
        usage=RerankUsage(total_tokens=len(documents) * query_tokens + sum(doc_tokens)),
    )

"""Routes for operating the server: ``/health`` and ``/metrics`` (open, for probes and scrapers) and
``/info`` and ``/tokenize`` (behind the API key, like ``/v1``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from ..generation.adapters import base_weights_note
from ..generation.rerank import SCORINGS
from .errors import error_responses
from .instructions import INPUT_TYPES, TASKS
from .schemas import Health, Info, RerankUsage, TokenizeData, TokenizeRequest, TokenizeResponse
from .settings import CENTERING_LIMITS, LIMITS
from .state import ServingState, get_state

__all__ = ["keyed", "public"]

public = APIRouter()
keyed = APIRouter()


@public.get("/health", response_model=Health, summary="Liveness, queue depth and batching counters")
async def health(state: ServingState = Depends(get_state)) -> Health:
    batcher = state.batcher
    return Health(
        status="draining" if batcher is not None and batcher.closing else "ok",
        model=state.model_id,
        queued_embedding_requests=batcher.queued if batcher else 0,
        active_generation_requests=state.worker.active,
        batches=batcher.batches if batcher else 0,
        batched_requests=batcher.batched_requests if batcher else 0,
        largest_batch=batcher.largest_batch if batcher else 0,
        centering_instructions=state.centers.active if state.centers else 0,
        queued_centering=state.centers.waiting if state.centers else 0,
        background_batches=batcher.background_batches if batcher else 0,
    )


@public.get(
    "/metrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Metrics"}},
)
async def metrics(state: ServingState = Depends(get_state)) -> Response:
    """Requests by route and status, latency, embedding batch sizes, queue depths and tokens."""
    body, content_type = state.metrics.render()
    return Response(body, media_type=content_type)


@keyed.get("/info", response_model=Info, summary="The served model and how it is served")
async def info(state: ServingState = Depends(get_state)) -> Info:
    """Model, embedding size, method, K, named instructions and their client aliases, limits."""
    from genembed import __version__

    s = state.settings
    return Info(
        model=state.model_id,
        version=__version__,
        dimension=state.output.dim(state.model.dim),
        method=state.embed_settings(s.default_steps).method,
        default_steps=s.default_steps,
        max_steps=s.max_steps,
        instructions=state.instructions,
        input_types=INPUT_TYPES,
        tasks=TASKS,
        token_encoding=state.token_decoder.name,
        rerank_scorings=list(SCORINGS),
        default_rerank_scoring=s.rerank_scoring,
        device=str(state.model.device),
        dtype=str(state.model.backbone.model.dtype).removeprefix("torch."),
        limits={name: getattr(s, name) for name in (*LIMITS, *CENTERING_LIMITS)},
        generation_weights=state.model.generation_weights,
        generation_note=base_weights_note(state.model),
        **published_contract(state),
    )


def published_contract(state: ServingState) -> dict[str, Any]:
    """``family`` and ``contract`` of ``/info`` for a published model (empty for any other)."""
    from ..models.published import published_for

    entry = published_for(state.model)
    if entry is None:
        return {}
    settings = state.embed_settings(state.settings.default_steps)
    contract = {"id": entry.id, "prompt_format": settings.prompt_format, "method": settings.method}
    contract |= {"attention": settings.attention, "published_method": entry.method, "pooling": entry.pooling}
    contract |= {"query": state.instructions.get("query", ""), "document": state.instructions.get("document", "")}
    contract |= {"matryoshka": list(entry.matryoshka) if entry.matryoshka else None, "details": entry.contract}
    return {"family": entry.family or None, "contract": contract}


@keyed.post(
    "/tokenize",
    response_model=TokenizeResponse,
    summary="Token ids of texts, with the served model's tokenizer",
    responses=error_responses(400, 413, 422),
)
async def tokenize(body: TokenizeRequest, state: ServingState = Depends(get_state)) -> TokenizeResponse:
    """Each text's token ids and the text of each token (no instruction or prompt template added)."""
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    if len(texts) > state.settings.max_inputs:
        state.check_sizes([0] * len(texts), field="input", what="inputs")
    tokenizer = state.tokenizer
    ids = tokenizer(texts, add_special_tokens=body.add_special_tokens)["input_ids"]
    total = sum(map(len, ids))
    state.check_request_tokens(total, field="input")
    data = [
        TokenizeData(index=i, ids=row, tokens=[tokenizer.decode([t], clean_up_tokenization_spaces=False) for t in row])
        for i, row in enumerate(ids)
    ]
    return TokenizeResponse(model=state.model_id, data=data, usage=RerankUsage(total_tokens=total))

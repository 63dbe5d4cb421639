"""``POST /v1/inspect``: the top vocabulary tokens of each GIRCSE soft token (used by the page at ``/``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from .errors import error_responses
from .schemas import InspectRequest, InspectResponse, SoftTokenStepOut, TokenProb
from .state import ServingState, get_state

__all__ = ["router"]

router = APIRouter()


@router.post(
    "/inspect",
    response_model=InspectResponse,
    summary="Top tokens of each soft token (genembed)",
    responses=error_responses(400, 413, 422, 429),
)
async def inspect_soft_tokens(body: InspectRequest, state: ServingState = Depends(get_state)) -> InspectResponse:
    """Per GIRCSE step k, the ``top`` most probable tokens of the soft token ``p_k`` for one text."""
    steps = state.check_steps(body.steps)
    instruction = body.instruction or ""
    prompt_lengths, _ = state.embedding_prompt_lengths([body.input], instruction)
    state.check_sizes(prompt_lengths, field="input", what="inputs")
    state.worker.check_capacity()
    with state.worker.admit():
        result = await state.worker.run(
            state.model.inspect, body.input, instruction=instruction, steps=steps, top=body.top
        )
    return InspectResponse(
        model=state.model_id,
        steps=[
            SoftTokenStepOut(step=s.step, tokens=[TokenProb(token=t, probability=p) for t, p in s.tokens])
            for s in result
        ],
    )

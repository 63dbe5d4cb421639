"""``POST /v1/embeddings`` in the OpenAI format, plus ``instruction`` and ``steps``."""

from __future__ import annotations

import base64

import numpy as np
from fastapi import APIRouter, Depends

from .errors import APIError
from .schemas import EmbeddingData, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage
from .state import ServingState, get_state

__all__ = ["router", "to_base64", "truncate_dimensions"]

router = APIRouter()


def truncate_dimensions(vectors: np.ndarray, dimensions: int) -> np.ndarray:
    """Keep the first ``dimensions`` columns and L2-normalize each row again."""
    cut = vectors[:, :dimensions]
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return cut / np.maximum(norms, 1e-12)


def to_base64(vector: np.ndarray) -> str:
    """Little-endian float32 bytes, base64-encoded (what OpenAI clients decode)."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


@router.post(
    "/embeddings",
    response_model=EmbeddingResponse,
    summary="Embed texts (OpenAI format)",
    responses={401: {}, 413: {}, 422: {}, 429: {}, 503: {}},
)
async def create_embeddings(body: EmbeddingRequest, state: ServingState = Depends(get_state)) -> EmbeddingResponse:
    """Embed one text or a list of texts. ``instruction`` and ``steps`` are genembed extensions."""
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    if body.dimensions is not None and body.dimensions > state.model.dim:
        raise APIError(
            422,
            f"dimensions={body.dimensions} exceeds the model's embedding size {state.model.dim}",
            param="dimensions",
        )
    steps = state.check_steps(body.steps)
    instruction = body.instruction or ""
    if len(texts) > state.settings.max_inputs:  # refuse before tokenizing a huge request
        state.check_sizes([0] * len(texts), field="input", what="inputs")
    prompt_lengths, text_lengths = state.embedding_prompt_lengths(texts, instruction)
    state.check_sizes(prompt_lengths, field="input", what="inputs")
    assert state.batcher is not None
    if state.settings.method != "gircse":  # single-pass methods ignore steps: let such requests share batches
        steps = 0
    cost = sum(prompt_lengths) + steps * len(texts)  # soft tokens run through the model too
    vectors = await state.batcher.submit(texts, key=(instruction, steps), cost=cost)
    vectors = np.asarray(vectors, dtype=np.float32)
    if body.dimensions is not None:
        vectors = truncate_dimensions(vectors, body.dimensions)
    encode = to_base64 if body.encoding_format == "base64" else (lambda v: v.tolist())
    data = [EmbeddingData(index=i, embedding=encode(v)) for i, v in enumerate(vectors)]
    tokens = sum(text_lengths)
    return EmbeddingResponse(
        data=data, model=state.model_id, usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)
    )

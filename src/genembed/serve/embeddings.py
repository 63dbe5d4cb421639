"""``POST /v1/embeddings`` in the OpenAI format (texts or token arrays), plus the side of a text
(``instruction``, ``prompt_name``, Cohere's ``input_type``, Jina's ``task``) and ``steps``."""

from __future__ import annotations

import base64

import numpy as np
from fastapi import APIRouter, Depends

from .errors import APIError, error_responses
from .instructions import choose_instruction
from .schemas import EmbeddingData, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage
from .state import ServingState, get_state

__all__ = ["embed_texts", "request_texts", "router", "to_base64", "truncate_dimensions"]

router = APIRouter()


def truncate_dimensions(vectors: np.ndarray, dimensions: int) -> np.ndarray:
    """Keep the first ``dimensions`` columns and L2-normalize each row again."""
    cut = vectors[:, :dimensions]
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return cut / np.maximum(norms, 1e-12)


def check_dimensions(requested: int | None, state: ServingState, param: str) -> None:
    """HTTP 422 when a request asks for more dimensions than the model's embeddings have."""
    if requested is not None and requested > state.model.dim:
        raise APIError(422, f"{param}={requested} exceeds the model's embedding size {state.model.dim}", param=param)


def to_base64(vector: np.ndarray) -> str:
    """Little-endian float32 bytes, base64-encoded (what OpenAI clients decode)."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


def request_texts(body: EmbeddingRequest, state: ServingState) -> list[str]:
    """The request's texts; token arrays are decoded (422 naming an id outside the vocabulary)."""
    given = body.input
    if isinstance(given, str):
        return [given]
    if isinstance(given[0], int):  # one token array
        return state.token_decoder.decode([given], nested=False)
    if len(given) > state.settings.max_inputs:  # refuse before decoding or tokenizing a huge request
        state.check_sizes([0] * len(given), field="input", what="inputs")
    if isinstance(given[0], list):
        return state.token_decoder.decode(given)
    return list(given)


@router.post(
    "/embeddings",
    response_model=EmbeddingResponse,
    summary="Embed texts or token arrays (OpenAI format; Cohere input_type, Jina task)",
    responses=error_responses(400, 413, 422, 429, 503),
)
async def create_embeddings(body: EmbeddingRequest, state: ServingState = Depends(get_state)) -> EmbeddingResponse:
    """Embed one text, a list of texts or token arrays.

    The side of the text (a query, a document, ...) is ``instruction``, or the named instruction that
    ``prompt_name``, ``input_type`` (Cohere) or ``task`` (Jina) picks; ``steps`` is GIRCSE's K.
    """
    instruction = choose_instruction(
        state.instructions,
        instruction=body.instruction,
        prompt_name=body.prompt_name,
        input_type=body.input_type,
        task=body.task,
    )
    texts = request_texts(body, state)
    check_dimensions(body.dimensions, state, "dimensions")
    vectors, tokens = await embed_texts(state, texts, instruction, steps=body.steps, field="input")
    if body.dimensions is not None:
        vectors = truncate_dimensions(vectors, body.dimensions)
    encode = to_base64 if body.encoding_format == "base64" else (lambda v: v.tolist())
    data = [EmbeddingData(index=i, embedding=encode(v)) for i, v in enumerate(vectors)]
    return EmbeddingResponse(
        data=data, model=state.model_id, usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)
    )


async def embed_texts(
    state: ServingState,
    texts: list[str],
    instruction: str,
    *,
    steps: int | str | None = None,
    field: str,
    cut: bool = False,
) -> tuple[np.ndarray, int]:
    """Embed ``texts`` through the batcher: ``(n, dim)`` float32 vectors and the texts' tokens.

    Args:
        steps: GIRCSE's K or ``"auto"`` (None: the server's default).
        field: the request field holding the texts, named in errors.
        cut: texts too long for ``max_input_tokens`` are cut by the encoder (from the end) rather
            than refused with 413 (unless the instruction and template alone are too long).
    """
    steps = state.check_steps(steps)
    prompts = state.embedding_prompts(texts, instruction)  # the only tokenization of these texts
    text_lengths = [p.text_end - p.text_start for p in prompts]
    if cut:
        prompts = state.cut_prompts(texts, prompts, instruction)
    prompt_lengths = [len(p.ids) for p in prompts]
    state.check_sizes(prompt_lengths, field=field, what="inputs")
    assert state.batcher is not None
    if not state.embed_settings(state.settings.default_steps).rules.uses_steps:  # single-pass: steps change nothing
        steps = state.settings.default_steps
    cost = sum(prompt_lengths) + state.soft_tokens(steps) * len(texts)  # soft tokens run through the model too
    key = await state.embed_key(instruction, steps)  # a new instruction's center is computed first
    items = list(zip(texts, prompts, strict=True))  # the model thread embeds these prompts, tokenizing nothing
    vectors = await state.batcher.submit(items, key=key, cost=cost)
    tokens = sum(text_lengths)
    state.metrics.count_tokens("embeddings", "prompt", tokens)
    return np.asarray(vectors, dtype=np.float32), tokens

"""``POST /v1/embed`` and ``POST /v2/embed`` in Cohere's shapes, so ``cohere.Client(base_url=...).embed``
and ``cohere.ClientV2(...).embed`` work against the server.

- ``input_type`` picks a named instruction (:data:`genembed.serve.instructions.INPUT_TYPES`):
  ``search_query`` -> ``query``, ``search_document`` -> ``document``, ``classification`` and
  ``clustering`` -> theirs. Without one (v1 only), texts are embedded with no instruction.
- ``embedding_types``: ``float`` (the model's L2-normalised embedding, centered as the model centers),
  ``int8``/``uint8``/``binary``/``ubinary`` made from it by
  :func:`genembed.encoders.quantize.quantize_embeddings` (sentence-transformers' semantics: int8/uint8
  scale each dimension over the request's texts, so they need two or more texts and compare only
  with vectors quantized together), and ``base64`` (the float32 bytes).
- ``truncate``: ``END`` (default) cuts a text longer than the server's ``max_input_tokens`` (or v2's
  ``max_tokens``) from its end, ``START`` from its start, ``NONE`` refuses it (413, or 422 over
  ``max_tokens``).

v1 answers ``embeddings_floats`` (a list of vectors) without ``embedding_types`` and
``embeddings_by_type`` with them; v2 always answers by type. ``texts`` in the answer are the texts as
sent (before any cut). Errors have the server's OpenAI shape.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from fastapi import APIRouter, Depends

from ..encoders.quantize import quantize_embeddings
from .embeddings import check_dimensions, embed_texts, to_base64, truncate_dimensions
from .errors import APIError, error_responses
from .instructions import choose_instruction
from .schemas import (
    ApiVersion,
    BilledUnits,
    CohereEmbedByTypeResponse,
    CohereEmbeddings,
    CohereEmbedFloatsResponse,
    CohereEmbedMeta,
    CohereEmbedRequest,
    V2CohereEmbedRequest,
)
from .state import ServingState, get_state

__all__ = ["cut_texts", "embeddings_by_type", "router", "router_v2"]

router = APIRouter()  # mounted at /v1
router_v2 = APIRouter()  # mounted at /v2
_ERRORS = error_responses(400, 413, 422, 429, 503)


def cut_texts(tokenizer: Any, texts: list[str], budgets: list[int], truncate: str) -> list[str]:
    """Each text cut to at most its budget of tokens (``END``: keep its start; ``START``: keep its end),
    at token boundaries of ``tokenizer``."""
    out = []
    encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    for text, offsets, budget in zip(texts, encoded["offset_mapping"], budgets, strict=True):
        if budget < 1 or len(offsets) <= budget:
            out.append(text)  # fits, or cannot fit at all (the size check refuses it)
        elif truncate == "END":
            out.append(text[: offsets[budget - 1][1]])
        else:
            out.append(text[offsets[len(offsets) - budget][0] :])
    return out


def embeddings_by_type(vectors: np.ndarray, types: list[str]) -> CohereEmbeddings:
    """The vectors in each of Cohere's ``embedding_types`` (see the module docstring).

    Raises:
        APIError: 422 for int8/uint8 with a single text (their ranges come from the request's texts).
    """
    out = {}
    for kind in dict.fromkeys(types):
        if kind == "float":
            out["float"] = vectors.tolist()
        elif kind == "base64":
            out["base64"] = [to_base64(v) for v in vectors]
        else:
            if kind in ("int8", "uint8") and len(vectors) < 2:
                raise APIError(
                    422,
                    f"embedding_types {kind!r} scales each dimension over the request's texts, so it needs two or "
                    "more texts; send more texts, or ask for float, binary or ubinary",
                    param="embedding_types",
                )
            out[kind] = quantize_embeddings(vectors, kind).tolist()
    return CohereEmbeddings(**out)


async def _embed(
    state: ServingState, body: CohereEmbedRequest, *, max_tokens: int | None = None
) -> tuple[np.ndarray, int]:
    """The request's vectors (of its texts cut as ``truncate`` says) and their tokens."""
    if body.images:
        raise APIError(422, "images are not supported: genembed embeds text only", param="images")
    instruction = choose_instruction(state.instructions, input_type=body.input_type)
    texts = list(body.texts)
    if len(texts) > state.settings.max_inputs:  # refuse before tokenizing a huge request
        state.check_sizes([0] * len(texts), field="texts", what="inputs")
    prompt_lengths, text_lengths = state.embedding_prompt_lengths(texts, instruction)
    budgets = [
        min(state.settings.max_input_tokens - (prompt - text), max_tokens or text)
        for prompt, text in zip(prompt_lengths, text_lengths, strict=True)
    ]
    if body.truncate == "NONE":
        for i, n in enumerate(text_lengths):
            if max_tokens is not None and n > max_tokens:
                raise APIError(
                    422,
                    f"texts[{i}] is {n} tokens long, over max_tokens={max_tokens}; truncate END or START cuts it",
                    param=f"texts.{i}",
                )
    else:
        texts = cut_texts(state.tokenizer, texts, budgets, body.truncate)
    return await embed_texts(state, texts, instruction, field="texts", cut=body.truncate == "END")


def _meta(version: str, tokens: int) -> CohereEmbedMeta:
    return CohereEmbedMeta(api_version=ApiVersion(version=version), billed_units=BilledUnits(input_tokens=tokens))


@router.post(
    "/embed",
    response_model=CohereEmbedFloatsResponse | CohereEmbedByTypeResponse,
    response_model_exclude_none=True,
    summary="Embed texts (Cohere v1 format)",
    responses=_ERRORS,
)
async def embed_v1(
    body: CohereEmbedRequest, state: ServingState = Depends(get_state)
) -> CohereEmbedFloatsResponse | CohereEmbedByTypeResponse:
    """Embed texts; ``embedding_types`` asks for other types than float (then answered by type)."""
    vectors, tokens = await _embed(state, body)
    texts, meta = list(body.texts), _meta("1", tokens)
    if body.embedding_types is None:
        return CohereEmbedFloatsResponse(id=str(uuid.uuid4()), embeddings=vectors.tolist(), texts=texts, meta=meta)
    embeddings = embeddings_by_type(vectors, body.embedding_types)
    return CohereEmbedByTypeResponse(id=str(uuid.uuid4()), embeddings=embeddings, texts=texts, meta=meta)


@router_v2.post(
    "/embed",
    response_model=CohereEmbedByTypeResponse,
    response_model_exclude_none=True,
    summary="Embed texts (Cohere v2 format)",
    responses=_ERRORS,
)
async def embed_v2(body: V2CohereEmbedRequest, state: ServingState = Depends(get_state)) -> CohereEmbedByTypeResponse:
    """Embed texts in each of ``embedding_types`` (default float); ``max_tokens`` cuts texts as
    ``truncate`` says and ``output_dimension`` keeps the first dimensions (renormalised)."""
    if body.inputs:
        raise APIError(422, "inputs (mixed text and image content) are not supported: give texts", param="inputs")
    check_dimensions(body.output_dimension, state, "output_dimension")
    vectors, tokens = await _embed(state, body, max_tokens=body.max_tokens)
    if body.output_dimension is not None:
        vectors = truncate_dimensions(vectors, body.output_dimension)
    embeddings = embeddings_by_type(vectors, body.embedding_types or ["float"])
    return CohereEmbedByTypeResponse(
        id=str(uuid.uuid4()), embeddings=embeddings, texts=list(body.texts), meta=_meta("2", tokens)
    )

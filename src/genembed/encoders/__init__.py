"""Encoders: prompts, batching, pooling, GIRCSE soft tokens and the ``encode`` orchestration."""

from __future__ import annotations

from .batching import Batch, collate, length_sorted_batches
from .embedder import METHODS, EncodeOptions, encode_texts, to_output, validate_texts
from .inspect_tokens import SoftTokenStep, inspect_soft_tokens
from .instructions import DEFAULT_QUERY_INSTRUCTION, default_prompts, resolve_instruction
from .pooling import last_token_pool, masked_mean
from .prompts import PROMPT_FORMATS, EncodedPrompt, encode_prompts, prompt_spans
from .quantize import PRECISIONS, quantize_embeddings
from .similarity import SIMILARITY_FUNCTIONS, similarity, similarity_pairwise
from .soft_tokens import SoftTokenOutput, generate_soft_tokens, output_head

__all__ = [
    "DEFAULT_QUERY_INSTRUCTION",
    "METHODS",
    "PRECISIONS",
    "PROMPT_FORMATS",
    "SIMILARITY_FUNCTIONS",
    "Batch",
    "EncodeOptions",
    "EncodedPrompt",
    "SoftTokenOutput",
    "SoftTokenStep",
    "collate",
    "default_prompts",
    "encode_prompts",
    "encode_texts",
    "generate_soft_tokens",
    "inspect_soft_tokens",
    "last_token_pool",
    "length_sorted_batches",
    "masked_mean",
    "output_head",
    "prompt_spans",
    "quantize_embeddings",
    "resolve_instruction",
    "similarity",
    "similarity_pairwise",
    "to_output",
    "validate_texts",
]

"""Encoders: the method rules, prompts, batching, pooling, GIRCSE soft tokens and the ``encode``
orchestration.

Importing the package does no work (the CLI reads :mod:`genembed.encoders.methods` for its help
without loading torch); names load from their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Batch": "batching",
    "collate": "batching",
    "length_sorted_batches": "batching",
    "EmbedSettings": "settings",
    "BatchEmbeddings": "core",
    "embed_prepared": "core",
    "encode_texts": "embedder",
    "to_output": "embedder",
    "validate_texts": "embedder",
    "SoftTokenStep": "inspect_tokens",
    "inspect_soft_tokens": "inspect_tokens",
    "DEFAULT_QUERY_INSTRUCTION": "instructions",
    "default_prompts": "instructions",
    "resolve_instruction": "instructions",
    "DEFAULT_METHOD": "methods",
    "METHODS": "methods",
    "METHOD_RULES": "methods",
    "MethodRules": "methods",
    "method_rules": "methods",
    "last_token_pool": "pooling",
    "masked_mean": "pooling",
    "EncodedPrompt": "prompts",
    "PROMPT_FORMATS": "prompts",
    "encode_prompts": "prompts",
    "prompt_spans": "prompts",
    "PRECISIONS": "quantize",
    "quantize_embeddings": "quantize",
    "SIMILARITY_FUNCTIONS": "similarity",
    "similarity": "similarity",
    "similarity_pairwise": "similarity",
    "SoftTokenOutput": "soft_tokens",
    "generate_soft_tokens": "soft_tokens",
    "output_head": "soft_tokens",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)

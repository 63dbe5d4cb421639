"""Encoders: the method rules, prompts, batching, pooling, GIRCSE soft tokens and the ``encode``
orchestration.

Importing the package does no work (the CLI reads :mod:`genembed.encoders.methods` for its help
without loading torch); names load from their modules on first use.
"""

from __future__ import annotations

from .._lazy import lazy_names

_MODULES = {  # submodule -> the names it exports here
    "batching": ("Batch", "collate", "length_sorted_batches"),
    "core": ("BatchEmbeddings", "embed_prepared"),
    "defaults": ("DEFAULT_BATCH_SIZE", "DEFAULT_BATCH_TOKENS", "DEFAULT_MAX_LENGTH"),
    "embedder": ("encode_texts", "validate_texts"),
    "inspect_tokens": ("SoftTokenStep", "inspect_soft_tokens"),
    "instructions": ("DEFAULT_QUERY_INSTRUCTION", "default_prompts", "resolve_instruction"),
    "methods": (
        "DEFAULT_METHOD",
        "DEFAULT_STEPS",
        "DEFAULT_TAU",
        "METHODS",
        "METHOD_RULES",
        "MethodRules",
        "method_rules",
    ),
    "output": ("OutputPipeline",),
    "pooling": ("last_token_pool", "masked_mean"),
    "prompts": ("EncodedPrompt", "PROMPT_FORMATS", "encode_prompts", "prompt_spans", "tokenize"),
    "quantize": ("PRECISIONS", "quantize_embeddings"),
    "settings": ("EmbedSettings", "IndexEmbedSettings", "OutputSettings", "RunOptions"),
    "similarity": ("SIMILARITY_FUNCTIONS", "similarity", "similarity_pairwise"),
    "soft_tokens": ("SoftTokenOutput", "generate_soft_tokens", "output_head"),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY)

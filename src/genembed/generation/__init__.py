"""Generation with the embedding model's own weights: decoding, chat and generative reranking.

``GenerativeEmbedder.generate`` and ``.rerank`` are the user-facing entry points; the functions here
are the building blocks (``decode_stream`` is also what RAG decodes with). Importing the package does
no work: each name loads its module on first use.
"""

from __future__ import annotations

from .._lazy import lazy_names

__all__ = [
    "DEFAULT_RERANK_INSTRUCTION",
    "IncrementalDetokenizer",
    "RerankResult",
    "SamplingOptions",
    "StopScanner",
    "adapter_mode",
    "chat_prompt_ids",
    "decode_stream",
    "generate_pieces",
    "lm_head",
    "rerank",
    "sample_next",
    "score_pairs",
    "stream_pieces",
]

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "DEFAULT_RERANK_INSTRUCTION": "rerank",
        "IncrementalDetokenizer": "detokenize",
        "RerankResult": "rerank",
        "SamplingOptions": "sampling",
        "StopScanner": "detokenize",
        "adapter_mode": "adapters",
        "chat_prompt_ids": "chat",
        "decode_stream": "decoding",
        "generate_pieces": "chat",
        "lm_head": "decoding",
        "rerank": "rerank",
        "sample_next": "decoding",
        "score_pairs": "rerank",
        "stream_pieces": "detokenize",
    },
)

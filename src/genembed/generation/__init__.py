"""Generation with the embedding model's own weights: decoding, chat and generative reranking.

``GenerativeEmbedder.generate`` and ``.rerank`` are the user-facing entry points; the functions here
are the building blocks (``decode_stream`` is also what RAG decodes with).
"""

from __future__ import annotations

from .adapters import adapter_mode
from .chat import chat_prompt_ids, generate_pieces
from .decoding import decode_stream, lm_head, sample_next
from .detokenize import IncrementalDetokenizer, StopScanner, stream_pieces
from .rerank import DEFAULT_RERANK_INSTRUCTION, RerankResult, rerank, score_pairs
from .sampling import SamplingOptions

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

"""Backbone: load the decoder LLM and tokenizer, choose dtype and attention per call."""

from __future__ import annotations

from .attention import Attention, check_attention, decoder_stack, position_ids_from_mask, run_decoder
from .cache import atomic_directory, cache_root
from .default_model import DEFAULT_MODEL_NAME, MissingModelError, default_gguf_path
from .device import resolve_device
from .loading import Backbone, default_dtype, load_backbone, resolve_dtype
from .memory import InsufficientMemoryError
from .tiny import tiny_backbone

__all__ = [
    "DEFAULT_MODEL_NAME",
    "Attention",
    "Backbone",
    "InsufficientMemoryError",
    "MissingModelError",
    "atomic_directory",
    "cache_root",
    "check_attention",
    "decoder_stack",
    "default_dtype",
    "default_gguf_path",
    "load_backbone",
    "position_ids_from_mask",
    "resolve_device",
    "resolve_dtype",
    "run_decoder",
    "tiny_backbone",
]

"""Training data: JSONL readers with file/line/field errors, mixtures, samplers and batch layout."""

from __future__ import annotations

from .batches import ContrastiveBatch, build_contrastive_batch
from .contrastive import ContrastiveRow, read_contrastive
from .generative import (
    GenerativeBatch,
    GenerativeRow,
    collate_generative,
    read_generative,
    render_chat,
    tokenize_chat,
    tokenize_row,
)
from .jsonl import DataError
from .sampler import MixtureSampler, ShareSchedule
from .single import read_single_texts
from .streams import ContrastiveStream, FileSpec, GenerativeStream, SingleStream, expand_files

__all__ = [
    "ContrastiveBatch",
    "ContrastiveRow",
    "ContrastiveStream",
    "DataError",
    "FileSpec",
    "GenerativeBatch",
    "GenerativeRow",
    "GenerativeStream",
    "MixtureSampler",
    "ShareSchedule",
    "SingleStream",
    "build_contrastive_batch",
    "collate_generative",
    "expand_files",
    "read_contrastive",
    "read_generative",
    "read_single_texts",
    "render_chat",
    "tokenize_chat",
    "tokenize_row",
]

"""Training losses: one small ``nn.Module`` per file, each testable on plain tensors."""

from __future__ import annotations

from .distill import SimilarityDistillation
from .embedding_distill import EMBEDDING_LOSSES, EmbeddingDistillation
from .generative import AGGREGATIONS, NextTokenLoss
from .icr import ICRLoss, ICRTerms
from .info_nce import InfoNCE, default_labels

__all__ = [
    "AGGREGATIONS",
    "EMBEDDING_LOSSES",
    "EmbeddingDistillation",
    "ICRLoss",
    "ICRTerms",
    "InfoNCE",
    "NextTokenLoss",
    "SimilarityDistillation",
    "default_labels",
]

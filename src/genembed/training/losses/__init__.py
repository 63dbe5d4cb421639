"""Training losses: one small ``nn.Module`` per file, each testable on plain tensors, registered by name
in :mod:`.registry` (the table the ``loss:`` config section and the objective are built from)."""

from __future__ import annotations

from .distill import SimilarityDistillation
from .embedding_distill import EMBEDDING_LOSSES, EmbeddingDistillation
from .generative import AGGREGATIONS, NextTokenLoss
from .icr import ICRLoss
from .info_nce import ContrastiveTerms, InfoNCE, default_labels
from .registry import LOSSES, ContrastiveLoss, LossContext, ObjectiveTerm, TrainedTerm, build_losses

__all__ = [
    "AGGREGATIONS",
    "EMBEDDING_LOSSES",
    "LOSSES",
    "ContrastiveLoss",
    "ContrastiveTerms",
    "EmbeddingDistillation",
    "ICRLoss",
    "InfoNCE",
    "LossContext",
    "NextTokenLoss",
    "ObjectiveTerm",
    "SimilarityDistillation",
    "TrainedTerm",
    "build_losses",
    "default_labels",
]

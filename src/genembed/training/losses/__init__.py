"""Training losses: one small ``nn.Module`` per file, each testable on plain tensors, registered by name
in :mod:`.registry` (the table the ``loss:`` config section and the objective are built from)."""

from __future__ import annotations

from .base_distill import BaseDistillLoss
from .distill import SimilarityDistillation
from .embedding_distill import EMBEDDING_LOSSES, EmbeddingDistillation
from .generative import AGGREGATIONS, GENERATIVE_LOSSES, GenerativeLoss, NextTokenLoss, build_generative_loss
from .icr import ICRLoss
from .info_nce import ContrastiveTerms, InfoNCE, default_labels
from .registry import LOSSES, ContrastiveLoss, LossContext, ObjectiveTerm, TrainedTerm, build_losses

__all__ = [
    "AGGREGATIONS",
    "GENERATIVE_LOSSES",
    "BaseDistillLoss",
    "EMBEDDING_LOSSES",
    "LOSSES",
    "ContrastiveLoss",
    "ContrastiveTerms",
    "EmbeddingDistillation",
    "GenerativeLoss",
    "ICRLoss",
    "InfoNCE",
    "LossContext",
    "NextTokenLoss",
    "ObjectiveTerm",
    "SimilarityDistillation",
    "TrainedTerm",
    "build_generative_loss",
    "build_losses",
    "default_labels",
]

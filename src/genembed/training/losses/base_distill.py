"""Keep generation as it was: a KL from the base model's next-token distributions to the adapted model's.

Joint training with a next-token loss on the base model's own answers (GRIT's recipe on self-generated
data) teaches one sampled continuation per position and only the chat format it was written in. This loss
teaches the whole distribution the base weights (the adapter switched off) give at each position, on any
text: chat answers and plain text alike. Its minimum is "generate exactly as before"; at the logits'
temperature ``T`` it is Hinton et al.'s distillation term::

    KL(p_base || p_model) = sum_v p_base(v) (log p_base(v) - log p_model(v)),   p = softmax(logits / T)

scaled by ``T**2`` so that its gradient does not shrink with ``T``, and aggregated over positions as the
next-token loss is (:func:`~._tokens.aggregate`).

Reference: Hinton, Vinyals and Dean, "Distilling the Knowledge in a Neural Network" (2015); the logit
distillation of a model into its own fine-tuned copy is the "self-distillation" of e.g. Yang et al.,
"Self-Distillation Bridges Distribution Gap in Language Model Fine-Tuning" (2024).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._tokens import AGGREGATIONS, aggregate

__all__ = ["BaseDistillLoss"]


class BaseDistillLoss(nn.Module):
    """KL divergence from the base weights' next-token distribution to the model's, per predicted token.

    Example:
        >>> loss = BaseDistillLoss()
        >>> model_logits, base_logits = torch.randn(6, 10), torch.randn(6, 10)
        >>> loss.loss_from_logits(model_logits, base_logits, torch.tensor([0, 0, 0, 1, 1, 1]), 2)
    """

    def __init__(self, aggregation: str = "mixed", temperature: float = 1.0):
        super().__init__()
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.aggregation = aggregation
        self.temperature = temperature

    def loss_from_logits(
        self, logits: torch.Tensor, base_logits: torch.Tensor, sample_index: torch.Tensor, num_samples: int
    ) -> torch.Tensor:
        """Aggregate the KL of ``M`` predicted tokens.

        Args:
            logits: ``(M, V)`` the trained model's logits at the positions that predict a labelled token.
            base_logits: ``(M, V)`` the base weights' logits at the same positions (no gradient needed).
            sample_index: ``(M,)`` which sample (0..num_samples-1) each position belongs to.
            num_samples: sequences in the batch.
        """
        if logits.shape[0] == 0:
            return logits.sum() * 0.0  # keeps the graph (and DDP) intact when no sample has a labelled token
        return aggregate(self.token_losses(logits, base_logits), sample_index, num_samples, self.aggregation)

    def token_losses(self, logits: torch.Tensor, base_logits: torch.Tensor) -> torch.Tensor:
        """``(M,)`` the KL at each of ``M`` positions (``logits``, ``base_logits`` ``(M, V)``)."""
        t = self.temperature
        log_model = F.log_softmax(logits.float() / t, dim=-1)  # (M, V)
        log_base = F.log_softmax(base_logits.detach().float() / t, dim=-1)  # (M, V)
        return (log_base.exp() * (log_base - log_model)).sum(-1) * t * t  # (M,)

"""Next-token loss on response tokens only, with three ways to weigh samples against tokens.

``aggregation``:

- ``sample``: the mean over a sample's response tokens, then the mean over samples: every sample
  weighs the same, however long (BLOOMZ-style; favours short answers).
- ``token``: the sum over all response tokens divided by the number of samples in the batch: every
  token weighs the same across batches of a fixed size (GritLM's ``token``).
- ``mixed``: the mean over all response tokens of the batch: tokens weigh the same within a batch,
  batches the same as each other (GritLM's ``mixed``, what a plain ``CrossEntropyLoss`` gives).

Reference: Muennighoff et al., "Generative Representational Instruction Tuning" (GRIT, 2024).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._tokens import AGGREGATIONS, aggregate
from .base_distill import BaseDistillLoss

__all__ = ["AGGREGATIONS", "GENERATIVE_LOSSES", "NextTokenLoss", "build_generative_loss"]

IGNORE = -100


class NextTokenLoss(nn.Module):
    """Cross-entropy of each response token given the tokens before it.

    ``forward(logits (B, T, V), labels (B, T))`` takes full-sequence logits and labels with
    ``-100`` on non-response positions (shifted inside). Training computes logits only at response
    positions and calls :meth:`loss_from_logits` directly.

    Example:
        >>> loss = NextTokenLoss("sample")
        >>> loss(torch.randn(2, 5, 10), torch.tensor([[-100, -100, 3, 4, 5], [-100, 7, 8, -100, -100]]))
    """

    def __init__(self, aggregation: str = "mixed"):
        super().__init__()
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
        self.aggregation = aggregation

    def loss_from_logits(
        self, logits: torch.Tensor, targets: torch.Tensor, sample_index: torch.Tensor, num_samples: int
    ) -> torch.Tensor:
        """Aggregate the loss of ``M`` predicted tokens.

        Args:
            logits: ``(M, V)`` logits at the positions that predict a response token.
            targets: ``(M,)`` the response tokens.
            sample_index: ``(M,)`` which sample (0..num_samples-1) each token belongs to.
            num_samples: sequences in the batch.
        """
        if logits.shape[0] == 0:
            return logits.sum() * 0.0  # keeps the graph (and DDP) intact when no sample has a response
        token_loss = F.cross_entropy(logits.float(), targets, reduction="none")  # (M,)
        return aggregate(token_loss, sample_index, num_samples, self.aggregation)

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        targets = labels[:, 1:]  # (B, T-1): position t predicts token t+1
        selected = targets != IGNORE
        sample_index = torch.arange(labels.shape[0], device=labels.device)[:, None].expand_as(targets)[selected]
        return self.loss_from_logits(logits[:, :-1][selected], targets[selected], sample_index, labels.shape[0])


# the generative losses by the name ``generative.loss`` takes
GENERATIVE_LOSSES = {"next_token": NextTokenLoss, "base_kl": BaseDistillLoss}


def build_generative_loss(name: str, aggregation: str = "mixed", temperature: float = 1.0) -> Any:
    """The generative loss called ``name`` (a key of :data:`GENERATIVE_LOSSES`)."""
    if name not in GENERATIVE_LOSSES:
        raise ValueError(f"generative loss must be one of {', '.join(GENERATIVE_LOSSES)}, got {name!r}")
    if name == "base_kl":
        return BaseDistillLoss(aggregation, temperature)
    return NextTokenLoss(aggregation)

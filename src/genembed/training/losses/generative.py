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

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["AGGREGATIONS", "NextTokenLoss"]

AGGREGATIONS = ("sample", "token", "mixed")
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
        if self.aggregation == "mixed":
            return token_loss.mean()
        if self.aggregation == "token":
            return token_loss.sum() / num_samples
        sums = token_loss.new_zeros(num_samples).index_add(0, sample_index, token_loss)  # (num_samples,)
        counts = torch.bincount(sample_index, minlength=num_samples).to(token_loss.dtype)
        has = counts > 0
        return (sums[has] / counts[has]).mean()

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        targets = labels[:, 1:]  # (B, T-1): position t predicts token t+1
        selected = targets != IGNORE
        sample_index = torch.arange(labels.shape[0], device=labels.device)[:, None].expand_as(targets)[selected]
        return self.loss_from_logits(logits[:, :-1][selected], targets[selected], sample_index, labels.shape[0])

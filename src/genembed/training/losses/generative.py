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

from ._tokens import AGGREGATIONS, aggregate
from .base_distill import BaseDistillLoss

__all__ = ["AGGREGATIONS", "GENERATIVE_LOSSES", "GenerativeLoss", "NextTokenLoss", "build_generative_loss"]

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
        return aggregate(self.token_losses(logits, targets), sample_index, num_samples, self.aggregation)

    @staticmethod
    def token_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``(M,)`` the cross-entropy of each of ``M`` predicted tokens (``logits`` ``(M, V)``)."""
        return F.cross_entropy(logits.float(), targets, reduction="none")

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        targets = labels[:, 1:]  # (B, T-1): position t predicts token t+1
        selected = targets != IGNORE
        sample_index = torch.arange(labels.shape[0], device=labels.device)[:, None].expand_as(targets)[selected]
        return self.loss_from_logits(logits[:, :-1][selected], targets[selected], sample_index, labels.shape[0])


# the generative losses by the name ``generative.loss`` / ``generative.text_loss`` take
GENERATIVE_LOSSES = ("next_token", "base_kl")


class GenerativeLoss(nn.Module):
    """The objective's generative term: each sequence's labelled tokens scored by the loss its kind names,
    conversations by ``chat``, plain-text rows by ``text``, the per-token losses then aggregated together.

    ``next_token`` is the cross-entropy of the labelled token (:class:`NextTokenLoss`, GRIT); ``base_kl`` the
    KL from the base weights' distribution at that position (:class:`~.base_distill.BaseDistillLoss`), which
    needs the base weights' logits at the same positions (:attr:`needs_base`).

    Example:
        >>> loss = GenerativeLoss(chat="next_token", text="base_kl")
        >>> logits, base = torch.randn(4, 10), torch.randn(4, 10)
        >>> rows, text_rows = torch.tensor([0, 0, 1, 1]), torch.tensor([False, True])
        >>> loss.loss_from_logits(logits, torch.tensor([1, 2, 3, 4]), rows, 2, base_logits=base, text_rows=text_rows)
    """

    def __init__(
        self, chat: str = "next_token", text: str | None = None, aggregation: str = "mixed", temperature: float = 1.0
    ):
        super().__init__()
        text = chat if text is None else text
        for name in (chat, text):
            if name not in GENERATIVE_LOSSES:
                raise ValueError(f"generative loss must be one of {', '.join(GENERATIVE_LOSSES)}, got {name!r}")
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
        self.chat, self.text, self.aggregation = chat, text, aggregation
        self.distill = BaseDistillLoss(aggregation, temperature)

    def needs_base(self, text_rows: torch.Tensor | None) -> bool:
        """Whether a batch whose plain-text rows are ``text_rows`` ``(B,)`` needs the base weights' logits."""
        has_text = text_rows is not None and bool(text_rows.any())
        has_chat = text_rows is None or not bool(text_rows.all())
        return (self.chat == "base_kl" and has_chat) or (self.text == "base_kl" and has_text)

    def loss_from_logits(
        self,
        logits: torch.Tensor,
        targets: torch.Tensor,
        sample_index: torch.Tensor,
        num_samples: int,
        *,
        base_logits: torch.Tensor | None = None,
        text_rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The loss of ``M`` predicted tokens.

        Args:
            logits: ``(M, V)`` the model's logits at the positions that predict a labelled token.
            targets: ``(M,)`` the labelled tokens.
            sample_index: ``(M,)`` which sequence each position belongs to.
            num_samples: sequences in the batch.
            base_logits: ``(M, V)`` the base weights' logits at the same positions, when :meth:`needs_base`.
            text_rows: ``(num_samples,)`` which sequences are plain text (None: none).
        """
        if logits.shape[0] == 0:
            return logits.sum() * 0.0  # keeps the graph (and DDP) intact when no sample has a labelled token
        is_text = torch.zeros(num_samples, dtype=torch.bool, device=logits.device) if text_rows is None else text_rows
        distilled = torch.where(is_text, self.text == "base_kl", self.chat == "base_kl")[sample_index]  # (M,)
        if bool(distilled.any()) and base_logits is None:
            raise ValueError("base_kl needs the base weights' logits (base_logits)")
        token_loss = torch.zeros(logits.shape[0], device=logits.device, dtype=torch.float32)
        if bool(distilled.any()):
            token_loss = token_loss.index_put(
                (distilled,), self.distill.token_losses(logits[distilled], base_logits[distilled])
            )
        if not bool(distilled.all()):
            kept = ~distilled
            token_loss = token_loss.index_put((kept,), NextTokenLoss.token_losses(logits[kept], targets[kept]))
        return aggregate(token_loss, sample_index, num_samples, self.aggregation)


def build_generative_loss(
    name: str, aggregation: str = "mixed", temperature: float = 1.0, text: str | None = None
) -> GenerativeLoss:
    """The generative term: ``name`` (a loss of :data:`GENERATIVE_LOSSES`) on conversations, ``text`` (default:
    the same) on plain-text rows."""
    return GenerativeLoss(name, text, aggregation, temperature)

"""InfoNCE over cosine similarities: in-batch negatives plus hard negatives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ContrastiveTerms", "InfoNCE", "default_labels"]


@dataclass
class ContrastiveTerms:
    """A contrastive loss's ``total`` (scalar), ``step_losses`` ``(K,)`` = L_1..L_K and ``reg`` (scalar,
    before its weight; 0 without a regulariser)."""

    total: torch.Tensor
    step_losses: torch.Tensor
    reg: torch.Tensor


def default_labels(num_queries: int, num_documents: int, device: torch.device | None = None) -> torch.Tensor:
    """Labels for documents laid out in equal groups ``[pos_0, negs_0..., pos_1, negs_1..., ...]``."""
    if num_documents % num_queries:
        raise ValueError(
            f"{num_documents} documents do not split into equal groups for {num_queries} queries; pass labels"
        )
    return torch.arange(num_queries, device=device) * (num_documents // num_queries)


class InfoNCE(nn.Module):
    """Cross-entropy over cosine similarities divided by a temperature.

    Every document in the batch is a candidate for every query: its own positive, its own hard
    negatives, and the other queries' positives and negatives (in-batch negatives).

    Inputs: ``queries`` ``(B, D)``, ``documents`` ``(N, D)``, ``labels`` ``(B,)`` the index of each
    query's positive among the documents (default: equal groups ``[pos, negs...]`` per query), and an
    optional boolean ``mask`` ``(B, N)`` that removes known false negatives (True = not a candidate).

    Example:
        >>> loss = InfoNCE(temperature=0.05)
        >>> q, d = torch.randn(4, 8), torch.randn(8, 8)   # 4 queries, each with 1 pos + 1 hard neg
        >>> loss(q, d)                                      # positives at documents 0, 2, 4, 6

    Reference: van den Oord et al., "Representation Learning with Contrastive Predictive Coding" (2018).
    """

    OPTIONS = ()  # loss.temperature is shared by every loss

    def __init__(self, temperature: float = 0.02):
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature

    def scores(self, queries: torch.Tensor, documents: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Cosine similarities over the temperature ``(B, N)``; masked entries are ``-inf``."""
        sims = F.normalize(queries.float(), dim=-1) @ F.normalize(documents.float(), dim=-1).T  # (B, N)
        scores = sims / self.temperature
        return scores if mask is None else scores.masked_fill(mask, float("-inf"))

    def loss_from_embeddings(
        self,
        queries: torch.Tensor,
        documents: torch.Tensor,
        labels: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The mean InfoNCE loss over the queries (a scalar)."""
        if labels is None:
            labels = default_labels(queries.shape[0], documents.shape[0], queries.device)
        if mask is not None and bool(mask.gather(1, labels[:, None]).any()):
            raise ValueError("mask removes a query's own positive")
        return F.cross_entropy(self.scores(queries, documents, mask), labels)

    forward = loss_from_embeddings

    @classmethod
    def from_config(cls, config: Any, context: Any) -> InfoNCE:
        """The loss a ``loss:`` config section describes (see :mod:`.registry`)."""
        return cls(config.temperature)

    def terms(
        self,
        queries: torch.Tensor,
        documents: torch.Tensor,
        labels: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> ContrastiveTerms:
        """The objective's view: InfoNCE on the last step of ``(B, K, D)`` and ``(N, K, D)`` embeddings."""
        loss = self(queries[:, -1], documents[:, -1], labels, mask)
        return ContrastiveTerms(loss, loss[None], loss.new_zeros(()))

    def trained_steps(self, steps: int) -> list[int]:
        """Only the last step is trained."""
        return [steps - 1]

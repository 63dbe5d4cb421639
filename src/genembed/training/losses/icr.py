"""ICR, the GIRCSE training loss: InfoNCE at every soft-token step plus a refinement regulariser.

With ``z_k`` the embedding after k soft tokens and ``L_k = InfoNCE(z_k(queries), z_k(documents))``:

    stepwise = mean_{k=1..K} L_k                  (reduction="mean"; "sum" adds them up)
    reg      = mean_{k<K} relu(log L_{k+1} - log L_k)
    loss     = stepwise + lambda * reg

The stepwise term teaches every step to embed well (so fewer steps still work at test time); the
regulariser penalises any step whose loss is higher than the step before, so more steps never
hurt. Ablations: ``final_step_only`` trains ``L_K`` alone; ``regularizer=False`` drops ``reg``.
``log`` uses ``max(L, 1e-12)`` so a perfectly separated batch gives no infinities.

Reference: GIRCSE, "Generative Iterative Refinement for Contrastive Sentence Embeddings".
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .info_nce import ContrastiveTerms, InfoNCE
from .options import Option

__all__ = ["ICRLoss"]

_EPS = 1e-12


class ICRLoss(nn.Module):
    """Stepwise InfoNCE over K embeddings per text plus the refinement regulariser.

    Inputs: ``queries`` ``(B, K, D)`` and ``documents`` ``(N, K, D)`` (``z_1..z_K`` per text),
    ``labels`` ``(B,)`` index of each query's positive document (default: equal ``[pos, negs...]``
    groups), optional boolean ``mask`` ``(B, N)`` of false negatives to ignore.

    Example:
        >>> loss = ICRLoss(temperature=0.02, reg_weight=1.0)
        >>> loss(torch.randn(4, 5, 64), torch.randn(8, 5, 64))   # 4 queries, 1 pos + 1 neg each, K=5

    Reference: GIRCSE, "Generative Iterative Refinement for Contrastive Sentence Embeddings".
    """

    OPTIONS = (
        Option("reg_weight", float, 1.0, "lambda, weight of the ICR refinement regulariser", check="non_negative"),
        Option("reduction", str, "mean", "mean or sum of the K stepwise losses", check=("mean", "sum")),
        Option("final_step_only", bool, False, "experiment switch (paper ablation): train only z_K"),
        Option("regularizer", bool, True, "experiment switch (paper ablation): False drops the regulariser"),
    )

    def __init__(
        self,
        temperature: float = 0.02,
        reg_weight: float = 1.0,
        reduction: str = "mean",
        *,
        final_step_only: bool = False,
        regularizer: bool = True,
    ):
        super().__init__()
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        if reg_weight < 0:
            raise ValueError(f"reg_weight must be >= 0, got {reg_weight}")
        self.info_nce = InfoNCE(temperature)
        self.reg_weight = reg_weight
        self.reduction = reduction
        self.final_step_only = final_step_only
        self.regularizer = regularizer

    def terms(
        self,
        queries: torch.Tensor,
        documents: torch.Tensor,
        labels: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> ContrastiveTerms:
        """Every term of the loss (for logging), computed once."""
        if queries.dim() != 3 or documents.dim() != 3 or queries.shape[1] != documents.shape[1]:
            raise ValueError(
                f"expected (B, K, D) and (N, K, D), got {tuple(queries.shape)} and {tuple(documents.shape)}"
            )
        steps = queries.shape[1]
        step_losses = torch.stack(
            [self.info_nce(queries[:, k], documents[:, k], labels, mask) for k in range(steps)]
        )  # (K,)
        if self.final_step_only:
            main = step_losses[-1]
        else:
            main = step_losses.mean() if self.reduction == "mean" else step_losses.sum()
        if steps > 1:
            logs = step_losses.clamp_min(_EPS).log()
            reg = torch.relu(logs[1:] - logs[:-1]).mean()
        else:
            reg = step_losses.new_zeros(())
        total = main + self.reg_weight * reg if self.regularizer else main
        return ContrastiveTerms(total=total, step_losses=step_losses, reg=reg)

    def loss_from_embeddings(
        self,
        queries: torch.Tensor,
        documents: torch.Tensor,
        labels: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The ICR loss (a scalar)."""
        return self.terms(queries, documents, labels, mask).total

    forward = loss_from_embeddings

    @classmethod
    def from_config(cls, config: Any, context: Any) -> ICRLoss:
        """The loss a ``loss:`` config section describes (see :mod:`.registry`)."""
        return cls(
            config.temperature,
            config.reg_weight,
            config.reduction,
            final_step_only=config.final_step_only,
            regularizer=config.regularizer,
        )

    def trained_steps(self, steps: int) -> list[int]:
        """Every step, or the last with ``final_step_only``."""
        return [steps - 1] if self.final_step_only else list(range(steps))

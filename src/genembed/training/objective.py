"""The training objective as one ``nn.Module``: encode, gather across processes, apply the losses.

Everything that touches the model happens inside :meth:`Objective.forward`, so data-parallel
wrappers (DDP through accelerate) see one forward call per micro-batch.

    loss = representation loss (ICR for gircse, InfoNCE for grit) + gen_weight * next-token loss
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..encoders.batching import Batch
from .data.generative import GenerativeBatch
from .distributed import gather_with_grad, rank_and_world
from .forward import EmbedSettings, embed_batch, response_logits
from .losses import ICRLoss, InfoNCE, NextTokenLoss

__all__ = ["Objective"]


class Objective(nn.Module):
    """Representation loss (plus an optional generative loss) for one micro-batch.

    Args:
        model: the causal LM being trained (a peft model for LoRA).
        settings: how texts are embedded.
        rep_loss: :class:`ICRLoss` (``(B, K, D)`` embeddings) or :class:`InfoNCE` (grit, K = 1).
        gen_loss: next-token loss on response tokens, or None.
        gen_weight: factor on the generative loss.
        cross_device_negatives: with several processes, score against every process's documents.
    """

    def __init__(
        self,
        model: Any,
        settings: EmbedSettings,
        rep_loss: ICRLoss | InfoNCE,
        gen_loss: NextTokenLoss | None = None,
        gen_weight: float = 1.0,
        cross_device_negatives: bool = True,
    ):
        super().__init__()
        self.model = model
        self.settings = settings
        self.rep_loss = rep_loss
        self.gen_loss = gen_loss
        self.gen_weight = gen_weight
        self.cross_device_negatives = cross_device_negatives

    def forward(
        self,
        queries: Batch,
        documents: Batch,
        labels: torch.Tensor,
        mask: torch.Tensor | None = None,
        generative: GenerativeBatch | None = None,
    ) -> dict[str, torch.Tensor]:
        """Loss terms of one micro-batch.

        Args:
            queries, documents: this process's tokenized texts.
            labels, mask: targets over the documents: the global batch's when cross-device negatives
                are on and several processes run, else this process's.
            generative: this process's generative batch, if any.

        Returns:
            ``objective`` (what to backpropagate), ``loss`` (its value as reported), ``rep``,
            ``step_losses`` ``(K,)``, ``reg`` and ``gen``.
        """
        q = embed_batch(self.model, queries, self.settings)  # (B, K, D)
        d = embed_batch(self.model, documents, self.settings)  # (N, K, D)
        _, world = rank_and_world()
        gathered = self.cross_device_negatives and world > 1
        if gathered:
            q, d = gather_with_grad(q), gather_with_grad(d)
        rep, steps, reg = self.representation_terms(q, d, labels, mask)
        # every process computes the same global loss; scaling by the world size turns DDP's gradient
        # average into the sum of the processes' local contributions, i.e. the global loss's gradient
        objective = rep * world if gathered else rep
        gen = self.generative_loss(generative)
        if gen is not None:
            objective = objective + self.gen_weight * gen
        else:
            gen = rep.new_zeros(())
        loss = rep + self.gen_weight * gen
        return {"objective": objective, "loss": loss, "rep": rep, "step_losses": steps, "reg": reg, "gen": gen}

    def representation_terms(
        self, q: torch.Tensor, d: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(rep, step_losses (K,), reg)`` of query and document embeddings ``(B, K, D)``, ``(N, K, D)``."""
        if isinstance(self.rep_loss, ICRLoss):
            terms = self.rep_loss.terms(q, d, labels, mask)
            return terms.total, terms.step_losses, terms.reg
        rep = self.rep_loss(q[:, -1], d[:, -1], labels, mask)
        return rep, rep[None], rep.new_zeros(())

    def generative_loss(self, generative: GenerativeBatch | None) -> torch.Tensor | None:
        """The next-token loss of a generative batch, or None without a generative loss or batch."""
        if self.gen_loss is None or generative is None:
            return None
        logits, targets, rows = response_logits(self.model, generative, self.settings.checkpoint_chunk)
        return self.gen_loss.loss_from_logits(logits, targets, rows, generative.input_ids.shape[0])

"""The training objective as one ``nn.Module``: encode, gather across processes, apply the losses.

Everything that touches the model happens inside :meth:`Objective.forward`, so data-parallel
wrappers (DDP through accelerate) see one forward call per micro-batch.

    loss = representation loss (ICR for gircse, InfoNCE for grit)
         + distill_weight * KL(teacher || student) over the in-batch documents (when distilling)
         + gen_weight * next-token loss
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..encoders.batching import Batch
from ..encoders.settings import EmbedSettings
from .data.generative import GenerativeBatch
from .distributed import gather_with_grad, rank_and_world
from .forward import embed_batch, response_logits
from .losses import ICRLoss, InfoNCE, NextTokenLoss, SimilarityDistillation

__all__ = ["Objective", "RepresentationTerms"]


@dataclass
class RepresentationTerms:
    """The representation loss of one batch's embeddings.

    ``total`` is what is backpropagated: ``rep + distill_weight * distill``. ``rep`` is the contrastive
    loss (ICR or InfoNCE), ``step_losses`` ``(K,)`` its L_1..L_K, ``reg`` the ICR regulariser (before
    lambda) and ``distill`` the KL to the teacher averaged over the trained steps (0 when not distilling).
    """

    total: torch.Tensor
    rep: torch.Tensor
    step_losses: torch.Tensor
    reg: torch.Tensor
    distill: torch.Tensor

    def logged(self) -> dict[str, torch.Tensor]:
        """The terms recorded in the metrics (``total`` is part of ``loss``)."""
        return {"rep": self.rep, "step_losses": self.step_losses, "reg": self.reg, "distill": self.distill}


class Objective(nn.Module):
    """Representation loss (plus an optional generative loss) for one micro-batch.

    Args:
        model: the causal LM being trained (a peft model for LoRA).
        settings: how texts are embedded.
        rep_loss: :class:`ICRLoss` (``(B, K, D)`` embeddings) or :class:`InfoNCE` (grit, K = 1).
        gen_loss: next-token loss on response tokens, or None.
        gen_weight: factor on the generative loss.
        cross_device_negatives: with several processes, score against every process's documents.
        distill: the similarity-distillation loss, or None; it then needs teacher scores with every batch.
        distill_weight: factor on the distillation loss.
    """

    def __init__(
        self,
        model: Any,
        settings: EmbedSettings,
        rep_loss: ICRLoss | InfoNCE,
        gen_loss: NextTokenLoss | None = None,
        gen_weight: float = 1.0,
        cross_device_negatives: bool = True,
        distill: SimilarityDistillation | None = None,
        distill_weight: float = 0.0,
    ):
        super().__init__()
        self.model = model
        self.settings = settings
        self.rep_loss = rep_loss
        self.gen_loss = gen_loss
        self.gen_weight = gen_weight
        self.cross_device_negatives = cross_device_negatives
        self.distill = distill
        self.distill_weight = distill_weight

    def forward(
        self,
        queries: Batch,
        documents: Batch,
        labels: torch.Tensor,
        mask: torch.Tensor | None = None,
        generative: GenerativeBatch | None = None,
        *,
        teacher_scores: torch.Tensor | None = None,
        distill_rows: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Loss terms of one micro-batch.

        Args:
            queries, documents: this process's tokenized texts.
            labels, mask: targets over the documents: the global batch's when cross-device negatives
                are on and several processes run, else this process's.
            generative: this process's generative batch, if any.
            teacher_scores, distill_rows: when distilling, the teacher's similarities ``(B, N)`` and which
                queries are distilled ``(B,)``, over the same queries and documents as ``labels``.

        Returns:
            ``objective`` (what to backpropagate), ``loss`` (its value as reported), ``rep``,
            ``step_losses`` ``(K,)``, ``reg``, ``distill`` and ``gen``.
        """
        q = embed_batch(self.model, queries, self.settings)  # (B, K, D)
        d = embed_batch(self.model, documents, self.settings)  # (N, K, D)
        _, world = rank_and_world()
        gathered = self.cross_device_negatives and world > 1
        if gathered:
            q, d = gather_with_grad(q), gather_with_grad(d)
        terms = self.representation_terms(q, d, labels, mask, teacher_scores, distill_rows)
        # every process computes the same global loss; scaling by the world size turns DDP's gradient
        # average into the sum of the processes' local contributions, i.e. the global loss's gradient
        objective = terms.total * world if gathered else terms.total
        gen = self.generative_loss(generative)
        if gen is not None:
            objective = objective + self.gen_weight * gen
        else:
            gen = terms.total.new_zeros(())
        return {"objective": objective, "loss": terms.total + self.gen_weight * gen, **terms.logged(), "gen": gen}

    def representation_terms(
        self,
        q: torch.Tensor,
        d: torch.Tensor,
        labels: torch.Tensor,
        mask: torch.Tensor | None,
        teacher_scores: torch.Tensor | None = None,
        distill_rows: torch.Tensor | None = None,
    ) -> RepresentationTerms:
        """The representation loss of query and document embeddings ``(B, K, D)``, ``(N, K, D)``.

        When distilling, the KL term is computed at every step z_k and averaged, as the stepwise ICR
        loss trains every step (only at z_K with ``final_step_only``; the single embedding for grit).
        """
        if isinstance(self.rep_loss, ICRLoss):
            icr = self.rep_loss.terms(q, d, labels, mask)
            rep, steps, reg = icr.total, icr.step_losses, icr.reg
            trained = [q.shape[1] - 1] if self.rep_loss.final_step_only else range(q.shape[1])
        else:
            rep = self.rep_loss(q[:, -1], d[:, -1], labels, mask)
            steps, reg, trained = rep[None], rep.new_zeros(()), [q.shape[1] - 1]
        if self.distill is None:
            return RepresentationTerms(rep, rep, steps, reg, rep.new_zeros(()))
        if teacher_scores is None:
            raise ValueError("this objective distills from a teacher: pass teacher_scores with every batch")
        distill = torch.stack(
            [self.distill(q[:, k], d[:, k], teacher_scores, mask, distill_rows) for k in trained]
        ).mean()
        return RepresentationTerms(rep + self.distill_weight * distill, rep, steps, reg, distill)

    def generative_loss(self, generative: GenerativeBatch | None) -> torch.Tensor | None:
        """The next-token loss of a generative batch, or None without a generative loss or batch."""
        if self.gen_loss is None or generative is None:
            return None
        logits, targets, rows = response_logits(self.model, generative, self.settings.checkpoint_chunk)
        return self.gen_loss.loss_from_logits(logits, targets, rows, generative.input_ids.shape[0])

"""The training objective as one ``nn.Module``: encode, gather across processes, apply the losses.

Everything that touches the model happens inside :meth:`Objective.forward`, so data-parallel
wrappers (DDP through accelerate) see one forward call per micro-batch.

    loss = representation loss (ICR for gircse, InfoNCE for grit)
         + distill_weight * KL(teacher || student) over the in-batch documents (when distilling)
         + regress_weight * distance(map(z_k), teacher's vector) over the batch's texts (when regressing)
         + gen_weight * next-token loss

A single-text batch (``texts=``) has no contrastive loss: the KL runs over its texts x texts
similarities (each text's own entry masked) and the regression over its texts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..encoders.batching import Batch
from ..encoders.settings import EmbedSettings
from .data.generative import GenerativeBatch
from .distributed import gather_with_grad, rank_and_world
from .forward import embed_batch, response_logits
from .losses import EmbeddingDistillation, ICRLoss, InfoNCE, NextTokenLoss, SimilarityDistillation

__all__ = ["Objective", "RepresentationTerms"]


@dataclass
class RepresentationTerms:
    """The representation loss of one batch's embeddings.

    ``total`` is what is backpropagated: ``rep + distill_weight * distill + regress_weight * regress``.
    ``rep`` is the contrastive loss (ICR or InfoNCE), ``step_losses`` ``(K,)`` its L_1..L_K, ``reg`` the
    ICR regulariser (before lambda), ``distill`` the KL to the teacher averaged over the trained steps
    (0 when not distilling) and ``regress`` the embedding-distillation loss averaged likewise (0 when
    not regressing).
    """

    total: torch.Tensor
    rep: torch.Tensor
    step_losses: torch.Tensor
    reg: torch.Tensor
    distill: torch.Tensor
    regress: torch.Tensor

    def logged(self) -> dict[str, torch.Tensor]:
        """The terms recorded in the metrics (``total`` is part of ``loss``)."""
        names = ("rep", "step_losses", "reg", "distill", "regress")
        return {name: getattr(self, name) for name in names}


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
        regress: the embedding-distillation loss (its linear map is trained with the model), or None; it
            then needs the teacher's vectors of the batch's texts.
        regress_weight: factor on the embedding-distillation loss.
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
        regress: EmbeddingDistillation | None = None,
        regress_weight: float = 0.0,
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
        self.regress = regress
        self.regress_weight = regress_weight

    def forward(
        self,
        queries: Batch | None = None,
        documents: Batch | None = None,
        labels: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        generative: GenerativeBatch | None = None,
        *,
        texts: Batch | None = None,
        **teacher: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        """Loss terms of one micro-batch: a contrastive one (``queries``, ``documents``, ``labels``), or a
        single-text one (``texts``, with ``teacher_texts``).

        Args:
            queries, documents: this process's tokenized texts.
            labels, mask: targets over the documents: the global batch's when cross-device negatives
                are on and several processes run, else this process's.
            generative: this process's generative batch, if any.
            texts: a single-text batch (this process's; its losses stay local).
            teacher: the teacher's inputs :meth:`representation_terms` (contrastive) or
                :meth:`single_terms` (``teacher_texts``) takes.

        Returns:
            ``objective`` (what to backpropagate), ``loss`` (its value as reported), ``rep``,
            ``step_losses`` ``(K,)``, ``reg``, ``distill``, ``regress`` and ``gen``.
        """
        if texts is not None:
            terms = self.single_terms(embed_batch(self.model, texts, self.settings), teacher["teacher_texts"])
            zero = terms.total.new_zeros(())
            return {"objective": terms.total, "loss": terms.total, **terms.logged(), "gen": zero}
        q = embed_batch(self.model, queries, self.settings)  # (B, K, D)
        d = embed_batch(self.model, documents, self.settings)  # (N, K, D)
        _, world = rank_and_world()
        gathered = self.cross_device_negatives and world > 1
        if gathered:
            q, d = gather_with_grad(q), gather_with_grad(d)
        terms = self.representation_terms(q, d, labels, mask, **teacher)
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
        teacher_queries: torch.Tensor | None = None,
        teacher_documents: torch.Tensor | None = None,
        document_rows: torch.Tensor | None = None,
    ) -> RepresentationTerms:
        """The representation loss of query and document embeddings ``(B, K, D)``, ``(N, K, D)``.

        When distilling, the KL term is computed at every step z_k and averaged, as the stepwise ICR
        loss trains every step (only at z_K with ``final_step_only``; the single embedding for grit);
        the regression term likewise, over the distilled queries (``distill_rows``) and documents
        (``document_rows``) against the teacher's vectors ``teacher_queries`` ``(B, T)`` and
        ``teacher_documents`` ``(N, T)``.
        """
        if isinstance(self.rep_loss, ICRLoss):
            icr = self.rep_loss.terms(q, d, labels, mask)
            rep, steps, reg = icr.total, icr.step_losses, icr.reg
        else:
            rep = self.rep_loss(q[:, -1], d[:, -1], labels, mask)
            steps, reg = rep[None], rep.new_zeros(())
        trained = self._trained_steps(q.shape[1])
        distill = regress = rep.new_zeros(())
        if self.distill is not None:
            if teacher_scores is None:
                raise ValueError("this objective distills from a teacher: pass teacher_scores with every batch")
            distill = torch.stack(
                [self.distill(q[:, k], d[:, k], teacher_scores, mask, distill_rows) for k in trained]
            ).mean()
        if self.regress is not None:
            if teacher_queries is None or teacher_documents is None:
                raise ValueError("this objective regresses on the teacher's vectors: pass teacher_queries/documents")
            targets = torch.cat([teacher_queries, teacher_documents])  # (B + N, T)
            rows = None if distill_rows is None or document_rows is None else torch.cat([distill_rows, document_rows])
            both = torch.cat([q, d])  # (B + N, K, D)
            regress = torch.stack([self.regress(both[:, k], targets, rows) for k in trained]).mean()
        total = rep + self.distill_weight * distill + self.regress_weight * regress
        return RepresentationTerms(total, rep, steps, reg, distill, regress)

    def single_terms(self, z: torch.Tensor, teacher_texts: torch.Tensor) -> RepresentationTerms:
        """The teacher's losses on single texts ``z`` ``(B, K, D)`` with the teacher's vectors ``(B, T)``:
        the KL over their texts x texts similarities (each text's own entry masked) and the regression,
        each at every trained step z_k. The contrastive terms are 0."""
        trained = self._trained_steps(z.shape[1])
        zero = z.new_zeros((), dtype=torch.float32)
        distill = regress = zero
        if self.distill is not None:
            target = F.normalize(teacher_texts.float(), dim=-1)
            scores = target @ target.T  # (B, B) the teacher's cosines
            own = torch.eye(len(z), dtype=torch.bool, device=z.device)
            distill = torch.stack([self.distill(z[:, k], z[:, k], scores, own) for k in trained]).mean()
        if self.regress is not None:
            regress = torch.stack([self.regress(z[:, k], teacher_texts) for k in trained]).mean()
        total = self.distill_weight * distill + self.regress_weight * regress
        return RepresentationTerms(total, zero, z.new_zeros(z.shape[1], dtype=torch.float32), zero, distill, regress)

    def _trained_steps(self, steps: int) -> list[int]:
        """The steps z_k the losses train: all for ICR (the last with final_step_only), the last for InfoNCE."""
        every = isinstance(self.rep_loss, ICRLoss) and not self.rep_loss.final_step_only
        return list(range(steps)) if every else [steps - 1]

    def generative_loss(self, generative: GenerativeBatch | None) -> torch.Tensor | None:
        """The next-token loss of a generative batch, or None without a generative loss or batch."""
        if self.gen_loss is None or generative is None:
            return None
        logits, targets, rows = response_logits(self.model, generative, self.settings.checkpoint_chunk)
        return self.gen_loss.loss_from_logits(logits, targets, rows, generative.input_ids.shape[0])

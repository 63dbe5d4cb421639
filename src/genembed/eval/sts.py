"""STS: Spearman correlation (x100) of cosine(s1, s2) with the gold similarity score."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._pairs import pair_cosines
from .metrics import spearman
from .results import TaskScores
from .tasks import Task

__all__ = ["evaluate_sts"]


def evaluate_sts(task: Task, embed: Callable[..., np.ndarray]) -> TaskScores:
    """Score an sts task; ``embed(texts, instruction, desc)`` gives ``(n, views, dim)`` normalised embeddings."""
    cosines = pair_cosines(task, embed)
    return TaskScores(
        scores=[spearman(c, task.data.targets) for c in cosines],
        details=[{} for _ in cosines],
        info={"pairs": len(task.data.s1)},
    )

"""Pair classification: average precision (x100) of cosine(s1, s2) ranking the label-1 pairs first."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._pairs import pair_cosines
from .metrics import average_precision
from .results import TaskScores
from .tasks import Task

__all__ = ["evaluate_pair"]


def evaluate_pair(task: Task, embed: Callable[..., np.ndarray]) -> TaskScores:
    """Score a pair task; ``embed(texts, instruction, desc)`` gives ``(n, views, dim)`` normalised embeddings."""
    cosines = pair_cosines(task, embed)
    positives = int(sum(task.data.targets))
    return TaskScores(
        scores=[average_precision(c, task.data.targets) for c in cosines],
        details=[{} for _ in cosines],
        info={"pairs": len(task.data.s1), "positives": positives},
    )

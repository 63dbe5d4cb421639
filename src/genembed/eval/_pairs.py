"""Cosine similarity of the two sides of each pair (sts and pair tasks)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .metrics import pairwise_cosine
from .tasks import Task

__all__ = ["pair_cosines"]


def pair_cosines(task: Task, embed: Callable[..., np.ndarray]) -> list[np.ndarray]:
    """Per view, ``(n_pairs,)`` cosines of s1 vs s2; both sides carry the task instruction and are
    encoded as one deduplicated text set."""
    data = task.data
    n = len(data.s1)
    vectors = embed(data.s1 + data.s2, task.instruction, f"{task.name} pairs")  # (2n, V, D)
    return [pairwise_cosine(vectors[:n, v], vectors[n:, v]) for v in range(vectors.shape[1])]

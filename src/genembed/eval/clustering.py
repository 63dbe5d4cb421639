"""Clustering: V-measure (x100) of MiniBatchKMeans clusters (k = number of gold labels), one start or the
mean over several."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .metrics import cluster_v_measure
from .results import TaskScores
from .tasks import Task

__all__ = ["evaluate_clustering"]


def evaluate_clustering(task: Task, embed: Callable[..., np.ndarray], *, starts: int = 1) -> TaskScores:
    """Score a clustering task; every text carries the task instruction. ``starts``: k-means starts
    averaged (see :func:`~genembed.eval.metrics.cluster_v_measure`)."""
    data = task.data
    vectors = embed(data.texts, task.instruction, f"{task.name} texts")
    scores = [cluster_v_measure(vectors[:, v], data.labels, starts=starts) for v in range(vectors.shape[1])]
    return TaskScores(
        scores=scores, details=[{} for _ in scores], info={"texts": len(data.texts), "labels": len(set(data.labels))}
    )

"""Classification: accuracy (x100) of ``LogisticRegression(max_iter=100)`` fit on the train embeddings."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .metrics import classification_accuracy
from .results import TaskScores
from .tasks import Task

__all__ = ["evaluate_classification"]


def evaluate_classification(task: Task, embed: Callable[..., np.ndarray]) -> TaskScores:
    """Score a classification task; every text (train and test) carries the task instruction."""
    data = task.data
    n_train = len(data.train_texts)
    vectors = embed(data.train_texts + data.test_texts, task.instruction, f"{task.name} train+test")
    scores = [
        classification_accuracy(vectors[:n_train, v], data.train_labels, vectors[n_train:, v], data.test_labels)
        for v in range(vectors.shape[1])
    ]
    info = {"train": n_train, "test": len(data.test_texts), "labels": len(set(data.train_labels))}
    unseen = set(data.test_labels) - set(data.train_labels)
    if unseen:
        info["warnings"] = [f"{len(unseen)} test labels never occur in train.jsonl (always counted wrong)"]
    return TaskScores(scores=scores, details=[{} for _ in scores], info=info)

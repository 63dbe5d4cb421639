"""Instruction following: cluster the same texts along several label axes, each embedded with its
own instruction.

For each axis A (``k`` = number of labels of A) and each instruction B, V-measure (x100) of
MiniBatchKMeans on the embeddings made with B's instruction against A's labels:

- ``axis:A`` (B = A): the instructed score of A; the main metric is their mean over axes.
- ``cross:A<-B`` (B != A): A clustered from embeddings made for another axis; ``cross_mean`` is the
  mean of these and ``gap = score - cross_mean`` measures how much following the right
  instruction helps (about 0 for a model that ignores instructions).
- ``task:A``: A clustered from embeddings made with the task's own ``instruction`` field (often
  empty), the uninstructed reference.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .metrics import cluster_v_measure
from .results import TaskScores
from .tasks import Task

__all__ = ["evaluate_instruct"]


def evaluate_instruct(task: Task, embed: Callable[..., np.ndarray], *, starts: int = 1) -> TaskScores:
    """Score an instruct task: per-axis, mean, cross-instruction and task-instruction V-measures, each the
    mean over ``starts`` k-means starts (see :func:`~genembed.eval.metrics.cluster_v_measure`)."""
    data = task.data
    axes = list(task.instructions)
    sources = {axis: task.instructions[axis] for axis in axes}
    by_instruction: dict[str, np.ndarray] = {}
    for instruction in [*sources.values(), task.instruction]:
        if instruction not in by_instruction:
            by_instruction[instruction] = embed(data.texts, instruction, f"{task.name} {instruction[:30]!r}")
    n_views = next(iter(by_instruction.values())).shape[1]
    scores, details = [], []
    for v in range(n_views):
        cell: dict[tuple[str, str], float] = {}
        for a in axes:
            for b, instruction in [*sources.items(), ("<task>", task.instruction)]:
                vectors = by_instruction[instruction][:, v]
                cell[a, b] = cluster_v_measure(vectors, data.labels[a], starts=starts)
        own = {a: cell[a, a] for a in axes}
        cross = {(a, b): cell[a, b] for a in axes for b in axes if a != b}
        score = float(np.mean(list(own.values())))
        detail = {f"axis:{a}": s for a, s in own.items()}
        detail |= {f"cross:{a}<-{b}": s for (a, b), s in cross.items()}
        detail |= {f"task:{a}": cell[a, "<task>"] for a in axes}
        if cross:
            detail["cross_mean"] = float(np.mean(list(cross.values())))
            detail["gap"] = score - detail["cross_mean"]
        scores.append(score)
        details.append(detail)
    info = {"texts": len(data.texts), "axes": {a: len(set(data.labels[a])) for a in axes}}
    return TaskScores(scores=scores, details=details, info=info)

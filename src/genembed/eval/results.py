"""Result records of an evaluation run (JSON-ready)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["EvalReport", "TaskResult", "TaskScores"]


@dataclass
class TaskScores:
    """What an evaluator returns: the main metric (x100) per view, named extra scores per view, and
    non-score information (counts, warnings)."""

    scores: list[float]
    details: list[dict[str, float]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskResult:
    """One task's outcome.

    Attributes:
        scores: main metric x100, one per view (per K of a GIRCSE sweep; one value otherwise).
        details: per view, extra named scores (per-axis and cross scores of instruct tasks, ...).
        seconds: wall time of the task (loading, encoding, scoring); ``encode_seconds`` of it encoding.
        encoding: texts requested, encoded and served from the cache.
    """

    name: str
    type: str
    metric: str
    path: str
    scores: list[float]
    details: list[dict[str, float]]
    info: dict[str, Any]
    seconds: float
    encode_seconds: float
    encoding: dict[str, int]

    def to_dict(self, views: list[int | None]) -> dict[str, Any]:
        out = asdict(self)
        out["score"] = _clean(self.scores[-1])
        out["scores"] = {_label(v): _clean(s) for v, s in zip(views, self.scores, strict=True)}
        out["details"] = {
            _label(v): {k: _clean(x) for k, x in d.items()} for v, d in zip(views, self.details, strict=True)
        }
        out["seconds"] = round(self.seconds, 3)
        out["encode_seconds"] = round(self.encode_seconds, 3)
        return out


@dataclass
class EvalReport:
    """All task results of one run plus its configuration.

    ``views`` are the GIRCSE step counts K of a sweep (``[None]`` for single-pass methods); every
    task's ``scores`` follow that order, and ``score`` is the last view's (the largest K).
    """

    config: dict[str, Any]
    views: list[int | None]
    tasks: list[TaskResult] = field(default_factory=list)
    seconds: float = 0.0

    def mean_scores(self) -> list[float]:
        """Mean over tasks of the main metric, per view (NaN if any task is NaN)."""
        if not self.tasks:
            return [math.nan] * len(self.views)
        return [sum(t.scores[i] for t in self.tasks) / len(self.tasks) for i in range(len(self.views))]

    def to_dict(self) -> dict[str, Any]:
        means = self.mean_scores()
        return {
            "config": self.config,
            "steps": [v for v in self.views if v is not None] or None,
            "mean": {
                "score": _clean(means[-1]),
                "scores": {_label(v): _clean(m) for v, m in zip(self.views, means, strict=True)},
            },
            "seconds": round(self.seconds, 3),
            "tasks": [t.to_dict(self.views) for t in self.tasks],
        }


def _label(view: int | None) -> str:
    return "single" if view is None else f"K={view}"


def _clean(x: float) -> float | None:
    """JSON has no NaN: undefined scores become null."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)

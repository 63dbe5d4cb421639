"""Run many task folders through one encoder: validate all, encode (cached), score, time, report.

>>> from genembed.eval import GenembedEncoder, evaluate
>>> encoder = GenembedEncoder(genembed.load(), steps=[1, 3, 5, 10, 20])  # GIRCSE, the default method
>>> report = evaluate(encoder, ["../shared/data/dev"], out="results.json")
"""

from __future__ import annotations

import platform
import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .classification import evaluate_classification
from .clustering import evaluate_clustering
from .embedding_cache import EmbeddingCache
from .encoding import TextEmbedder
from .instruct import evaluate_instruct
from .pair import evaluate_pair
from .results import EvalReport, TaskResult
from .retrieval import evaluate_retrieval
from .sts import evaluate_sts
from .tasks import Task, find_task_dirs, load_task

__all__ = ["EVALUATORS", "evaluate", "run_config"]

EVALUATORS: dict[str, Callable[..., Any]] = {
    "sts": evaluate_sts,
    "retrieval": evaluate_retrieval,
    "classification": evaluate_classification,
    "clustering": evaluate_clustering,
    "pair": evaluate_pair,
    "instruct": evaluate_instruct,
}


def evaluate(
    encoder: Any,
    tasks: Sequence[str | Path | Task],
    *,
    limit: int | None = None,
    cache: EmbeddingCache | None = None,
    reranker: Any = None,
    rerank_top: int | None = None,
    out: str | Path | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    config: dict[str, Any] | None = None,
    cluster_starts: int = 1,
) -> EvalReport:
    """Evaluate ``encoder`` on task folders.

    Every task is loaded and validated before anything is encoded, so a malformed folder fails fast.

    Args:
        encoder: an :class:`~genembed.eval.protocol.Encoder`; a sweep encoder (``views``, e.g.
            GIRCSE with several K) is scored at every view from one encoding run.
        tasks: task folders, folders of task folders, or loaded :class:`Task` objects.
        limit: at most this many rows per data file (see :func:`load_task`).
        cache: on-disk embedding cache; None encodes everything.
        reranker: an object with ``rerank`` (see :class:`~genembed.eval.protocol.Reranker`), used on
            retrieval tasks when ``rerank_top`` is set.
        rerank_top: re-rank the first-stage top N documents of each query.
        out: write ``out`` (JSON, rewritten after every task so partial results survive), then
            ``out`` with ``.md`` (tables) and, for sweeps, ``_scaling.png``.
        progress: progress bars while encoding.
        log: called with one line per finished task (e.g. ``print``).
        config: extra entries for the report's ``config``.
        cluster_starts: clustering and instruct tasks score the mean V-measure over this many k-means
            starts (seeds 42, 43, ...); 1 is the reference implementation's single start.

    Returns:
        An :class:`EvalReport`.
    """
    from .report import write_report

    if cluster_starts < 1:
        raise ValueError(f"cluster_starts must be at least 1, got {cluster_starts}")
    loaded = _load_all(tasks, limit)
    embedder = TextEmbedder(encoder, cache, progress=progress)
    views: list[int | None] = list(embedder.views) or [None]
    settings = {"cluster_starts": cluster_starts} | (config or {})
    report = EvalReport(config=run_config(encoder, loaded, limit, rerank_top, settings), views=views)
    start = time.perf_counter()
    for task in loaded:
        embedder.reset_stats()
        t0 = time.perf_counter()
        kwargs: dict[str, Any] = {}
        if task.type == "retrieval" and rerank_top:
            kwargs = {"reranker": reranker, "rerank_top": rerank_top}
        elif task.type in ("clustering", "instruct"):
            kwargs = {"starts": cluster_starts}
        scored = EVALUATORS[task.type](task, embedder, **kwargs)
        stats = dict(embedder.stats)
        result = TaskResult(
            name=task.name,
            type=task.type,
            metric=task.metric,
            path=str(task.path),
            scores=scored.scores,
            details=scored.details,
            info=scored.info,
            seconds=time.perf_counter() - t0,
            encode_seconds=stats.pop("encode_seconds"),
            encoding=stats,
        )
        report.tasks.append(result)
        report.seconds = time.perf_counter() - start
        if log is not None:
            shown = "  ".join(f"{s:.2f}" for s in result.scores)
            log(f"{task.name:<24} {task.metric:<21} {shown}   ({result.seconds:.1f}s, {stats['encoded']} encoded)")
        if out is not None:
            write_report(report, out, final=False)
    if out is not None:
        write_report(report, out, final=True)
    return report


def _load_all(tasks: Sequence[str | Path | Task], limit: int | None) -> list[Task]:
    loaded: list[Task] = []
    for item in tasks:
        if isinstance(item, Task):
            loaded.append(item)
        else:
            loaded.extend(load_task(folder, limit=limit) for folder in find_task_dirs([item]))
    names = [t.name for t in loaded]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"two task folders share the name {duplicated[0]!r}; results are keyed by task name")
    if not loaded:
        raise ValueError("no tasks to evaluate")
    return loaded


def run_config(
    encoder: Any, tasks: list[Task], limit: int | None, rerank_top: int | None, extra: dict[str, Any] | None
) -> dict[str, Any]:
    """Everything needed to reproduce a run: encoder settings, tasks, versions, git commit, threads."""
    import torch

    from .. import __version__

    config: dict[str, Any] = {"encoder": encoder.name}
    if hasattr(encoder, "settings"):
        config |= encoder.settings()
    config |= {"cache_key": getattr(encoder, "cache_key", None), "limit": limit, "rerank_top": rerank_top}
    config |= {"tasks": [str(t.path) for t in tasks], "genembed": __version__, "git_commit": _git_commit()}
    config |= {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    config["created"] = datetime.now(UTC).isoformat(timespec="seconds")
    return config | (extra or {})


def _git_commit() -> str | None:
    """HEAD of the repository holding this source file, with ``-dirty`` for uncommitted changes."""
    root = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=30)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None

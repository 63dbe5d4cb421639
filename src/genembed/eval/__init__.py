"""Evaluation on task folders (sts, retrieval, classification, clustering, pair, instruct), with
test-time-scaling sweeps, an on-disk embedding cache and an MTEB adapter (:mod:`.mteb_model`).

>>> import genembed
>>> from genembed.eval import GenembedEncoder, evaluate
>>> report = evaluate(GenembedEncoder(genembed.load(), steps=[1, 5, 20]), ["../shared/data/dev"], out="r.json")
"""

from __future__ import annotations

from .embedding_cache import EmbeddingCache
from .encoders import GenembedEncoder, SentenceTransformerEncoder, parse_steps
from .protocol import Encoder, Reranker, SweepEncoder
from .results import EvalReport, TaskResult
from .runner import evaluate
from .tasks import Task, TaskFormatError, find_task_dirs, load_task

__all__ = [
    "EmbeddingCache",
    "Encoder",
    "EvalReport",
    "GenembedEncoder",
    "Reranker",
    "SentenceTransformerEncoder",
    "SweepEncoder",
    "Task",
    "TaskFormatError",
    "TaskResult",
    "evaluate",
    "find_task_dirs",
    "load_task",
    "parse_steps",
]

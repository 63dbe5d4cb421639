"""What the evaluation harness needs from an encoder (and, optionally, a reranker).

Any object with a ``name`` and ``encode(texts, *, instruction)`` can be evaluated, e.g. a
sentence-transformers model wrapped in :class:`~genembed.eval.encoders.SentenceTransformerEncoder`.
An encoder that produces several embeddings per text in one run (GIRCSE's ``z_1..z_K``) also
exposes ``views`` and ``encode_views``, so one encoding run serves a whole test-time-scaling sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Encoder", "Reranker", "SweepEncoder"]


@runtime_checkable
class Encoder(Protocol):
    """A text encoder the harness can evaluate.

    Attributes:
        name: shown in reports.
        cache_key: identifies everything that determines the embeddings (weights, settings, code);
            ``None`` turns the on-disk embedding cache off for this encoder.
    """

    name: str
    cache_key: str | None

    def encode(self, texts: list[str], *, instruction: str) -> np.ndarray:
        """``(len(texts), dim)`` embeddings of ``texts`` under ``instruction`` (``""`` for none)."""
        ...


@runtime_checkable
class SweepEncoder(Encoder, Protocol):
    """An encoder whose one run yields one embedding per view (e.g. per number of soft tokens K).

    Attributes:
        views: the view labels, e.g. ``(1, 3, 5, 10, 20)``.
    """

    views: tuple[int, ...]

    def encode_views(self, texts: list[str], *, instruction: str) -> np.ndarray:
        """``(len(texts), len(views), dim)`` embeddings, all views from one encoding run."""
        ...


@runtime_checkable
class Reranker(Protocol):
    """A generative reranker, e.g. :class:`genembed.GenerativeEmbedder`.

    ``rerank`` returns one result per document (``.index`` into ``documents``, ``.score``), sorted by
    score, best first. The harness passes the keyword options ``top_n``, ``instruction`` and
    ``batch_size`` (see :class:`genembed.generation.rerank.RerankOptions`).
    """

    def rerank(self, query: str, documents: Sequence[str], **options: Any) -> list[Any]: ...

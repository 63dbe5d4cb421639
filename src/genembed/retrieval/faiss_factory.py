"""Faiss indexes from any ``faiss.index_factory`` description, trained on a sample and filled shard by shard.

``"Flat"`` (the default) is exact inner-product search; for corpora past about a million chunks an
approximate index trades a little recall for memory and speed, e.g. ``"HNSW32"`` (a graph: fast, holds
the raw vectors) or ``"IVF1024,PQ32"`` (an inverted file of 32-byte codes: 18x smaller than float32 at
width 576). Every index uses the inner product, which is the cosine on the L2-normalized embeddings an
index stores. Search parameters such as ``efSearch`` (HNSW) and ``nprobe`` (IVF) are set with
:func:`apply_search_params`; their names are faiss's own (``faiss.ParameterSpace``).

Nothing here needs every embedding in memory: training reads a seeded random sample of rows from the
(memory-mapped) shards, and vectors are added a block at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_FACTORY",
    "add_blocks",
    "apply_search_params",
    "new_faiss_index",
    "parse_search_params",
    "train_on_sample",
]

DEFAULT_FACTORY = "Flat"
TRAIN_SAMPLE = 100_000  # rows sampled to train an IVF / PQ index (k-means wants 39+ per centroid)
_ADD_BLOCK = 65_536  # rows converted to contiguous float32 and added at a time


def faiss_module() -> Any:
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - faiss is in the rag/eval extras
        raise ImportError("indexes need faiss: pip install 'genembed[rag]' (faiss-cpu)") from exc
    return faiss


def new_faiss_index(dim: int, factory: str = DEFAULT_FACTORY) -> Any:
    """An empty inner-product faiss index for ``factory`` (``"Flat"``, ``"HNSW32"``, ``"IVF1024,PQ32"``, ...).

    Raises:
        ValueError: faiss cannot parse ``factory`` for this dimension.
    """
    faiss = faiss_module()
    if not isinstance(factory, str) or not factory.strip():
        raise ValueError(f"a faiss index description must be a non-empty string, got {factory!r}")
    if factory.strip() == DEFAULT_FACTORY:
        return faiss.IndexFlatIP(dim)
    with _as_value_error(
        f"faiss cannot build index {factory!r} for dimension {dim}",
        "see https://github.com/facebookresearch/faiss/wiki/The-index-factory",
    ):
        return faiss.index_factory(dim, factory.strip(), faiss.METRIC_INNER_PRODUCT)


def train_on_sample(
    index: Any, shards: Sequence[np.ndarray], *, sample: int = TRAIN_SAMPLE, seed: int = 0, factory: str = ""
) -> int:
    """Train ``index`` (if it needs training) on up to ``sample`` rows drawn at random from ``shards``.

    Only the drawn rows are read: the shards may be memory-mapped ``.npy`` files of any total size.
    Returns the number of rows trained on (0 when the index needs no training).

    Raises:
        ValueError: too few rows to train this index (the message names the index and the counts).
    """
    if index.is_trained:
        return 0
    sizes = np.array([len(s) for s in shards], dtype=np.int64)
    total = int(sizes.sum())
    take = min(sample, total)
    rows = np.sort(np.random.default_rng(seed).choice(total, size=take, replace=False))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    parts = []
    for j, shard in enumerate(shards):
        mine = rows[(rows >= starts[j]) & (rows < starts[j + 1])] - starts[j]
        if len(mine):
            parts.append(np.asarray(shard[mine], dtype=np.float32))
    data = np.ascontiguousarray(np.concatenate(parts)) if parts else np.zeros((0, index.d), dtype=np.float32)
    with _as_value_error(
        f"cannot train faiss index {factory or type(index).__name__!r} on {len(data)} vectors",
        "use fewer IVF lists or PQ centroids for a corpus this small, or the exact 'Flat' index",
    ):
        index.train(data)
    return len(data)


@contextlib.contextmanager
def _as_value_error(what: str, hint: str) -> Iterator[None]:
    """Turn faiss's RuntimeError (a C++ assertion with a long trace) into ``ValueError("what (reason); hint")``."""
    try:
        yield
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[-1]
        raise ValueError(f"{what} ({reason}); {hint}") from exc


def add_blocks(index: Any, shards: Sequence[np.ndarray], *, block: int = _ADD_BLOCK) -> int:
    """Add every row of ``shards`` (in order) to ``index``, ``block`` rows at a time; returns the count.

    An index that keeps the raw vectors (Flat, or HNSW's flat storage) first reserves room for all of
    them: growing its buffer block by block would double it, briefly holding 1.5x the final size.
    """
    _reserve(index, sum(len(s) for s in shards))
    added = 0
    for shard in shards:
        for start in range(0, len(shard), block):
            part = np.ascontiguousarray(shard[start : start + block], dtype=np.float32)
            index.add(part)
            added += len(part)
    return added


def _reserve(index: Any, rows: int) -> None:
    faiss = faiss_module()
    flat = faiss.downcast_index(index.storage) if hasattr(index, "storage") else index
    if not isinstance(flat, faiss.IndexFlatCodes) or rows <= 0:
        return
    used = flat.ntotal * flat.code_size
    flat.codes.resize(used + rows * flat.code_size)  # std::vector: shrinking back keeps the capacity
    flat.codes.resize(used)


def parse_search_params(items: Iterable[str] | Mapping[str, Any] | None) -> dict[str, float]:
    """``["efSearch=128", "nprobe=16"]`` (or a mapping) -> ``{"efSearch": 128, "nprobe": 16}``.

    Raises:
        ValueError: an item is not ``name=number``.
    """
    if items is None:
        return {}
    pairs = items.items() if isinstance(items, Mapping) else (_split(item) for item in items)
    params: dict[str, float] = {}
    for name, value in pairs:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"search parameter {name!r} needs a number, got {value!r}") from None
        params[str(name)] = int(number) if number.is_integer() else number
    return params


def _split(item: str) -> tuple[str, str]:
    name, sep, value = str(item).partition("=")
    if not sep or not name.strip():
        raise ValueError(f"a search parameter is written name=value (e.g. efSearch=128 or nprobe=16), got {item!r}")
    return name.strip(), value.strip()


def apply_search_params(index: Any, params: Mapping[str, float]) -> None:
    """Set faiss search parameters (``efSearch``, ``nprobe``, ...) on ``index`` in place.

    Raises:
        ValueError: the index has no such parameter (e.g. ``nprobe`` on an HNSW index).
    """
    if not params:
        return
    space = faiss_module().ParameterSpace()
    for name, value in params.items():
        try:
            space.set_index_parameter(index, name, value)
        except RuntimeError:
            raise ValueError(
                f"this faiss index ({type(index).__name__}) has no search parameter {name!r}: HNSW indexes take "
                "efSearch, IVF indexes nprobe, and the exact Flat index none"
            ) from None

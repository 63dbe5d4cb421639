"""Turn text sets into normalised embeddings through an encoder, the on-disk cache and a progress bar.

Each text set is deduplicated, looked up in the cache, and only the missing texts are encoded,
longest first, in chunks; each chunk is committed to the cache as soon as it is done, so an
interrupted evaluation resumes where it stopped. Sweep encoders (GIRCSE) return every view
(``z_k`` for each requested K) from one run.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .embedding_cache import EmbeddingCache
from .metrics import l2_normalize

__all__ = ["TextEmbedder"]


class TextEmbedder:
    """``embedder(texts, instruction, desc)`` -> ``(len(texts), n_views, dim)`` L2-normalised float32.

    Args:
        encoder: an :class:`~genembed.eval.protocol.Encoder` (or sweep encoder with ``views``).
        cache: where embeddings persist; None encodes everything every time. Encoders whose
            ``cache_key`` is None are never cached.
        chunk_size: texts per encode call (and per cache commit).
        progress: show a progress bar per text set.
    """

    def __init__(
        self, encoder: Any, cache: EmbeddingCache | None = None, *, chunk_size: int = 256, progress: bool = True
    ):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.encoder = encoder
        self.views: tuple[int, ...] = tuple(getattr(encoder, "views", None) or ())
        self.cache = cache if getattr(encoder, "cache_key", None) is not None else None
        if self.cache is not None:
            self.cache.register(encoder.cache_key, encoder.name)
        self.chunk_size = chunk_size
        self.progress = progress
        self._centers: dict[str, np.ndarray | None] = {}
        self.reset_stats()

    @property
    def n_views(self) -> int:
        return len(self.views) or 1

    def reset_stats(self) -> None:
        """Zero the counters: texts asked for, texts encoded, cache hits, seconds spent encoding."""
        self.stats = {"texts": 0, "encoded": 0, "cached": 0, "encode_seconds": 0.0}

    def __call__(self, texts: list[str], instruction: str, desc: str = "encode") -> np.ndarray:
        if not texts:
            return np.zeros((0, self.n_views, 0), dtype=np.float32)
        unique = list(dict.fromkeys(texts))
        self.stats["texts"] += len(texts)
        table = self._normalised(unique, instruction, desc, record=True)  # (n_unique, V, D)
        table = self._output(table, self._center(instruction))  # after the cache, which holds raw embeddings
        position = {text: i for i, text in enumerate(unique)}
        return table[[position[t] for t in texts]]

    def _normalised(self, unique: list[str], instruction: str, desc: str, *, record: bool) -> np.ndarray:
        """``(len(unique), V, D)`` L2-normalised raw embeddings, from the cache or encoded (and stored)."""
        found = self._lookup(unique, instruction)
        missing = [i for i in range(len(unique)) if i not in found]
        if missing:
            found.update(self._encode(unique, missing, instruction, desc, record=record))
        if record:
            self.stats["cached"] += len(unique) - len(missing)
        dims = {v.shape[-1] for v in found.values()}
        if len(dims) > 1:
            raise ValueError(f"embeddings of different sizes {sorted(dims)} for one encoder; clear the cache")
        return l2_normalize(np.stack([found[i] for i in range(len(unique))]))

    def _output(self, table: np.ndarray, shift: np.ndarray | None) -> np.ndarray:
        """``(n, V, D)`` normalised raw embeddings through the encoder's output steps
        (:class:`~genembed.encoders.output.OutputPipeline`: centre by ``shift``, truncate, normalise), or
        centred by ``shift`` for an encoder without them."""
        output = getattr(self.encoder, "output", None)
        if output is not None:
            import torch

            centre = None if shift is None else torch.from_numpy(shift)
            return output.apply(torch.from_numpy(table), centre).numpy()
        return table if shift is None else l2_normalize(table - shift[None])

    def _center(self, instruction: str) -> np.ndarray | None:
        """The ``(V, D)`` shift for ``instruction``, or None without centering.

        With a cache, an encoder that names its calibration texts (``calibration_texts()``) gets its center,
        the mean of their normalised raw embeddings per view, through the cache like any text set, so a
        re-run encodes nothing; otherwise the encoder's own ``center_for`` is asked (the model memoises
        its centers, which serves runs without a cache better than encoding them here again)."""
        if instruction not in self._centers:
            texts_of = getattr(self.encoder, "calibration_texts", None)
            texts = list(texts_of() or ()) if texts_of is not None and self.cache is not None else []
            if texts:
                unique = list(dict.fromkeys(texts))
                table = self._normalised(unique, instruction, "calibration", record=False)
                position = {text: i for i, text in enumerate(unique)}
                shift = table[[position[t] for t in texts]].mean(axis=0)
            else:
                center_for = getattr(self.encoder, "center_for", None)
                shift = center_for(instruction) if center_for is not None else None
            self._centers[instruction] = shift
        return self._centers[instruction]

    def _view_ids(self) -> tuple[int, ...]:
        return self.views or (0,)

    def _lookup(self, unique: list[str], instruction: str) -> dict[int, np.ndarray]:
        if self.cache is None or not unique:
            return {}
        per_view = [self.cache.get(self.encoder.cache_key, instruction, v, unique) for v in self._view_ids()]
        complete = set.intersection(*(set(hits) for hits in per_view))
        return {i: np.stack([hits[i] for hits in per_view]) for i in complete}

    def _encode(
        self, unique: list[str], missing: list[int], instruction: str, desc: str, *, record: bool = True
    ) -> dict[int, np.ndarray]:
        from tqdm.auto import tqdm

        order = sorted(missing, key=lambda i: -len(unique[i]))  # similar lengths share encode batches
        out: dict[int, np.ndarray] = {}
        start = time.perf_counter()
        with tqdm(total=len(order), desc=desc, unit="text", disable=not self.progress, leave=False) as bar:
            for s in range(0, len(order), self.chunk_size):
                ids = order[s : s + self.chunk_size]
                chunk = [unique[i] for i in ids]
                vectors = self._run_encoder(chunk, instruction)
                if self.cache is not None:
                    for j, view in enumerate(self._view_ids()):
                        self.cache.put(self.encoder.cache_key, instruction, view, chunk, vectors[:, j])
                out.update(zip(ids, vectors, strict=True))
                bar.update(len(ids))
        self.stats["encode_seconds"] += time.perf_counter() - start
        if record:  # the counters describe the texts asked for; a calibration set only costs time
            self.stats["encoded"] += len(order)
        return out

    def _run_encoder(self, texts: list[str], instruction: str) -> np.ndarray:
        if self.views:
            vectors = np.asarray(self.encoder.encode_views(texts, instruction=instruction), dtype=np.float32)
            expected = f"({len(texts)}, {len(self.views)}, dim)"
        else:
            vectors = np.asarray(self.encoder.encode(texts, instruction=instruction), dtype=np.float32)
            expected = f"({len(texts)}, dim)"
            vectors = vectors[:, None] if vectors.ndim == 2 else vectors
        if vectors.ndim != 3 or vectors.shape[:2] != (len(texts), self.n_views):
            raise ValueError(f"encoder {self.encoder.name!r} returned shape {vectors.shape}, expected {expected}")
        if not np.isfinite(vectors).all():
            bad = int(np.flatnonzero(~np.isfinite(vectors).reshape(len(texts), -1).all(axis=1))[0])
            raise ValueError(f"encoder {self.encoder.name!r} returned non-finite values for text {texts[bad][:80]!r}")
        return vectors

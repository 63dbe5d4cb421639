"""On-disk embedding cache: a re-run of an evaluation does not re-encode anything.

One SQLite file holds one row per embedding, keyed by
``(encoder, instruction, view, text)``, where ``encoder`` is the encoder's ``cache_key`` (a digest
of model weights, adapter, method, attention, prompt format, max length, dtype and the encoding
code), ``view`` the number of soft tokens K (0 for single-pass methods), and ``instruction`` and
``text`` are stored as 128-bit BLAKE2 hashes.

Crash safety comes from SQLite transactions (write-ahead log): the rows of one chunk are committed
together or not at all, so a process killed mid-write leaves every earlier chunk intact and the
next run resumes after it. Several processes may share the file. A damaged file (truncated,
overwritten) raises :class:`~genembed._files.DamagedFileError` naming it: delete it, it only holds
embeddings that can be computed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .._files import DamagedFileError

__all__ = ["EmbeddingCache", "default_cache_path", "text_hash"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS encoders (key TEXT PRIMARY KEY, description TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS embeddings (
    encoder TEXT NOT NULL,
    instruction BLOB NOT NULL,
    view INTEGER NOT NULL,
    text BLOB NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (encoder, instruction, view, text)
) WITHOUT ROWID;
"""
_MAX_PARAMS = 500  # SQLite limits host parameters per statement


def text_hash(text: str) -> bytes:
    """128-bit BLAKE2b hash of a UTF-8 string."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def default_cache_path() -> Path:
    """``<genembed cache>/embeddings.sqlite`` (``$GENEMBED_CACHE``, default ``~/.cache/genembed``)."""
    from ..backbone.cache import cache_root

    return cache_root() / "embeddings.sqlite"


class EmbeddingCache:
    """Embeddings stored by (encoder, instruction, view, text hash).

    Example:
        >>> cache = EmbeddingCache("/tmp/emb.sqlite")
        >>> cache.put("enc", "", 0, ["a"], np.ones((1, 4), np.float32))
        >>> cache.get("enc", "", 0, ["a", "b"])   # {0: array([1., 1., 1., 1.])}
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=120, isolation_level=None)
        try:
            with self._damage():
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.executescript(_SCHEMA)
        except DamagedFileError:
            self._conn.close()
            raise

    @contextlib.contextmanager
    def _damage(self) -> Iterator[None]:
        """Turn SQLite's "file is not a database" / "disk image is malformed" into an error naming the file."""
        try:
            yield
        except (sqlite3.DatabaseError, ValueError) as exc:
            if isinstance(exc, sqlite3.OperationalError | sqlite3.IntegrityError | sqlite3.ProgrammingError):
                raise  # locked, read-only, closed: not damage
            raise DamagedFileError(
                f"embedding cache {self.path} is unreadable ({exc}): the file is damaged. Delete it (it only "
                "holds cached embeddings, which are computed again) or pass another cache file."
            ) from exc

    def register(self, encoder: str, description: str) -> None:
        """Record a human-readable description of an encoder key (for inspecting the cache)."""
        with self._damage(), self._conn:
            self._conn.execute("INSERT OR REPLACE INTO encoders VALUES (?, ?)", (encoder, description))

    def get(self, encoder: str, instruction: str, view: int, texts: Sequence[str]) -> dict[int, np.ndarray]:
        """Cached vectors of ``texts``: ``{index in texts: (dim,) float32}`` for the hits only."""
        wanted: dict[bytes, list[int]] = {}
        for i, text in enumerate(texts):
            wanted.setdefault(text_hash(text), []).append(i)
        keys = list(wanted)
        found: dict[int, np.ndarray] = {}
        ins = text_hash(instruction)
        sizes = set()
        with self._damage():
            for start in range(0, len(keys), _MAX_PARAMS):
                chunk = keys[start : start + _MAX_PARAMS]
                rows = self._conn.execute(
                    "SELECT text, vector FROM embeddings WHERE encoder = ? AND instruction = ? AND view = ? "
                    f"AND text IN ({','.join('?' * len(chunk))})",
                    (encoder, ins, view, *chunk),
                ).fetchall()
                for key, blob in rows:
                    vector = np.frombuffer(blob, dtype=np.float32)  # ValueError: not whole float32 values
                    sizes.add(len(vector))
                    for i in wanted[key]:
                        found[i] = vector
            if len(sizes) > 1:
                raise ValueError(f"vectors of different sizes {sorted(sizes)} for one encoder")
        return found

    def put(self, encoder: str, instruction: str, view: int, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store ``vectors`` ``(len(texts), dim)`` in one transaction (all rows or none)."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape[0] != len(texts):
            raise ValueError(f"{len(texts)} texts but {vectors.shape[0]} vectors")
        ins = text_hash(instruction)
        rows = [
            (encoder, ins, view, text_hash(t), np.ascontiguousarray(v).tobytes())
            for t, v in zip(texts, vectors, strict=True)
        ]
        with self._damage(), self._conn:  # BEGIN ... COMMIT, or ROLLBACK on error
            self._conn.execute("BEGIN")
            self._conn.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?, ?)", rows)

    def count(self, encoder: str | None = None) -> int:
        """Number of stored embeddings (of one encoder, or all)."""
        with self._damage():
            if encoder is None:
                return self._conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
            return self._conn.execute("SELECT COUNT(*) FROM embeddings WHERE encoder = ?", (encoder,)).fetchone()[0]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

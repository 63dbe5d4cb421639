"""Cached teacher targets: a teacher's embedding of every distinct training text, computed once, on disk.

Distillation then costs no teacher forward per step: the loop looks the batch's texts up.

Layout of a store, one folder per teacher under a root (``<root>/<teacher>/``):

- ``store.json``: the teacher's name, the embedding dimension, the dtype, the query prefix and the
  tokens the teacher read per text (``max_length``; a store is built with one value throughout).
- ``chunk-000000.safetensors``, ...: ``keys`` ``(n, 16)`` uint8 (the first 16 bytes of the SHA-256 of
  the text the teacher saw) and ``embeddings`` ``(n, D)`` float16, L2-normalised.

Texts are embedded as the teacher expects them: without instructions or prompt templates, with the
teacher's query prefix before queries where it has one (all-mpnet-base-v2 and all-MiniLM-L6-v2 have
none, so a query and the same text as a document share one entry). Each chunk is written atomically
as it is finished, so an interrupted build resumes where it stopped; float16 halves the disk and
memory (an error of about 1e-3 per coordinate of a unit vector, far below what the losses resolve).

    genembed teacher-targets ../shared/data/train/*.jsonl --teacher all-mpnet-base-v2
    store = TargetStore.open(cache_root() / "teacher-targets", "all-mpnet-base-v2")
    store.vectors(["a text", "another"])          # (2, 768) float32
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._files import atomic_write, atomic_write_json, read_json, read_safetensors, remove_temp_files
from ..backbone.cache import cache_root
from ..encoders.defaults import DEFAULT_BATCH_SIZE
from .config import ConfigError
from .data.batches import ContrastiveBatch
from .data.contrastive import read_contrastive
from .data.single import is_texts_file, read_single_texts
from .teachers import TEACHERS

__all__ = [
    "MissingTargetsError",
    "TargetStore",
    "build_targets",
    "default_root",
    "load_teacher_encoder",
    "targets_folder",
    "next_chunk",
    "stored_max_length",
    "targets_root",
    "teacher_encoder",
    "training_texts",
]

STORE = "store.json"
_KEY_BYTES = 16  # 128 bits of SHA-256: no collision among millions of texts
_DTYPE = torch.float16
Encode = Callable[[list[str]], Any]  # texts -> (n, D) array-like of (unnormalised) embeddings


class MissingTargetsError(ConfigError):
    """A text has no cached teacher embedding; the message says how to build them."""


def text_key(text: str) -> bytes:
    """The key a text is stored under."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:_KEY_BYTES]


def default_root() -> Path:
    """``<genembed cache>/teacher-targets``: where targets go unless a root is given."""
    return cache_root() / "teacher-targets"


def targets_root(value: str | Path) -> Path:
    """A ``loss.distill_targets`` value as a folder: ``default`` is :func:`default_root`."""
    return default_root() if str(value) == "default" else Path(os.path.expanduser(str(value)))


def targets_folder(root: str | Path, teacher: str) -> Path:
    """The folder of ``teacher``'s targets under ``root`` (a folder path as teacher becomes its last part)."""
    name = Path(teacher).name if teacher not in TEACHERS else teacher
    return Path(root) / re.sub(r"[^A-Za-z0-9._-]", "_", name)


def stored_max_length(root: str | Path, teacher: str) -> int | None:
    """The tokens per text the store of ``teacher`` under ``root`` was built with (None: no store there, or not
    recorded); reads ``store.json`` only, not the chunks."""
    folder = targets_folder(root, teacher)
    if not (folder / STORE).is_file():
        return None
    fix = f"Rebuild it: genembed teacher-targets FILES --teacher {teacher} --out {root}"
    return read_json(folder / STORE, fix=fix).get("max_length")


def query_prefix(teacher: str) -> str:
    """What the teacher expects before a query ("" for the known teachers and for folders)."""
    spec = TEACHERS.get(teacher)
    return spec.query_prefix if spec is not None else ""


def training_texts(paths: Iterable[str | Path], teacher: str = "") -> list[str]:
    """The distinct texts the teacher embeds for these files, as it sees them (queries prefixed where
    the teacher has a query prefix), in first-seen order.

    Files are contrastive files or texts files (:mod:`.data.single`); every text of a texts file is a
    document.
    """
    prefix = query_prefix(teacher)
    texts: dict[str, None] = {}
    for path in paths:
        if prefix and not is_texts_file(path):
            for row in read_contrastive(path):
                texts.update(dict.fromkeys([prefix + row.query, *row.pos, *row.neg]))
        else:
            texts.update(dict.fromkeys(read_single_texts(path)))
    return list(texts)


@dataclass
class TargetStore:
    """A teacher's cached embeddings, looked up by text.

    Attributes:
        folder: the store's folder.
        teacher: the teacher's name (as in ``loss.distill_teacher``).
        embeddings: ``(M, D)`` float16, one row per stored text.
        index: text key -> row.
        prefix: the teacher's query prefix.
        max_length: the tokens the teacher read per text (None: not recorded, e.g. a test's encoder).
    """

    folder: Path
    teacher: str
    embeddings: torch.Tensor
    index: dict[bytes, int]
    prefix: str = ""
    max_length: int | None = None
    # computes the texts a lookup misses (then saved as a new chunk): see :meth:`fill_with`
    encode: Encode | None = None

    @property
    def dimension(self) -> int:
        return int(self.embeddings.shape[1])

    @classmethod
    def open(cls, root: str | Path, teacher: str) -> TargetStore:
        """Read the store of ``teacher`` under ``root`` (every chunk, checked).

        Raises:
            MissingTargetsError: no store for this teacher there (the message gives the command that builds it).
            DamagedFileError: a chunk or ``store.json`` is damaged.
        """
        folder = targets_folder(root, teacher)
        build = f"genembed teacher-targets FILES --teacher {teacher} --out {root}"
        fix = f"Rebuild it: {build}"
        if not (folder / STORE).is_file():
            raise MissingTargetsError(f"no cached targets of teacher {teacher} in {folder}; build them: {build}")
        meta = read_json(folder / STORE, fix=fix)
        if meta.get("teacher") != teacher:
            raise MissingTargetsError(f"{folder} holds the targets of {meta.get('teacher')!r}, not {teacher!r}")
        keys, parts = [], []
        for chunk in sorted(folder.glob("chunk-*.safetensors")):
            tensors = read_safetensors(chunk, fix=fix)
            keys.append(tensors["keys"].numpy())
            parts.append(tensors["embeddings"])
        dim = int(meta["dimension"])
        embeddings = torch.cat(parts) if parts else torch.zeros(0, dim, dtype=_DTYPE)
        all_keys = np.concatenate(keys) if keys else np.zeros((0, _KEY_BYTES), np.uint8)
        index = {bytes(key): i for i, key in enumerate(all_keys)}
        return cls(folder, teacher, embeddings, index, meta.get("query_prefix", ""), meta.get("max_length"))

    def missing(self, texts: Iterable[str]) -> list[str]:
        """The texts (as the teacher sees them) that have no stored embedding."""
        return [text for text in texts if text_key(text) not in self.index]

    def check_covers(self, queries: Iterable[str], documents: Iterable[str]) -> None:
        """Raise :class:`MissingTargetsError` unless every query (prefixed) and document has a target."""
        texts = list(dict.fromkeys([*(self.prefix + q for q in queries), *documents]))
        missing = self.missing(texts)
        if missing:
            raise MissingTargetsError(
                f"{len(missing)} of the {len(texts)} training texts have no cached target in {self.folder} (e.g. "
                f"{missing[0][:80]!r}); build them: genembed teacher-targets FILES --teacher {self.teacher} --out "
                f"{self.folder.parent}"
            )

    def vectors(self, texts: Sequence[str], *, queries: bool = False) -> torch.Tensor:
        """``(n, D)`` float32 teacher embeddings of ``texts`` (``queries``: prefixed with the query prefix).

        Raises:
            MissingTargetsError: a text is not in the store (the message names one and how to build them).
        """
        prefix = self.prefix if queries else ""
        if self.encode is not None:
            self.add(prefix + text for text in texts)
        rows = [self.index.get(text_key(prefix + text)) for text in texts]
        if None in rows:
            missing = [t for t, r in zip(texts, rows, strict=True) if r is None]
            raise MissingTargetsError(
                f"{len(missing)} of {len(texts)} texts have no cached target of {self.teacher} in {self.folder} "
                f"(e.g. {missing[0][:80]!r}); build them for the training files: genembed teacher-targets "
                f"FILES --teacher {self.teacher} --out {self.folder.parent}"
            )
        return self.embeddings[rows].float()

    def fill_with(self, encode: Encode) -> TargetStore:
        """Compute the texts a lookup misses with ``encode`` (the teacher) instead of failing, and save them.

        For a store that does not yet hold every training text: each batch's missing texts are embedded
        once, written atomically as a new chunk and kept, so the store grows as training draws texts and
        a later run (or ``genembed teacher-targets``) reuses them. One writer per store: a multi-process
        run needs a complete store."""
        self.encode = encode
        return self

    def add(self, texts: Iterable[str]) -> int:
        """Embed and save the texts (as the teacher sees them) the store lacks; returns how many."""
        todo = list(dict.fromkeys(self.missing(texts)))
        if not todo:
            return 0
        if self.encode is None:
            raise MissingTargetsError(f"{len(todo)} texts have no target in {self.folder}, and no teacher to fill")
        stored = _append_chunk(self.folder, self.encode, todo, self.dimension)
        self.index.update({text_key(text): len(self.embeddings) + i for i, text in enumerate(todo)})
        self.embeddings = torch.cat([self.embeddings, stored])
        return len(todo)

    def batch_inputs(self, batch: ContrastiveBatch, device: torch.device | str, *, vectors: bool) -> dict[str, Any]:
        """The objective's teacher inputs for a contrastive batch, from the cache: ``teacher_scores`` ``(B, N)``
        (cosines) and ``distill_rows`` ``(B,)``, as :meth:`~.teacher.Teacher.batch_inputs` gives them, plus with
        ``vectors`` the vectors ``teacher_queries`` ``(B, T)``, ``teacher_documents`` ``(N, T)`` and
        ``document_rows`` ``(N,)`` the regression needs."""
        q, d = self.vectors(batch.queries, queries=True), self.vectors(batch.documents)
        out = {"teacher_scores": q @ d.T, "distill_rows": batch.distill_tensor()}
        if vectors:
            out |= {"teacher_queries": q, "teacher_documents": d, "document_rows": batch.document_distill_tensor()}
        return {key: value.to(device) for key, value in out.items()}


def build_targets(
    texts: Sequence[str],
    root: str | Path,
    teacher: str,
    *,
    encode: Encode | None = None,
    dimension: int | None = None,
    chunk_size: int = 2048,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | None = None,
    max_length: int | None = None,
    progress: bool = True,
) -> TargetStore:
    """Embed the texts of ``texts`` that the store of ``teacher`` under ``root`` lacks, chunk by chunk.

    Texts are taken longest first, so each chunk's batches hold texts of similar length (less padding);
    each chunk is saved atomically when done, so a killed build resumes with the chunks already written.

    Args:
        texts: the texts as the teacher sees them (see :func:`training_texts`).
        root: the targets root folder; the store is ``<root>/<teacher>``.
        teacher: a teacher name of :data:`~.teachers.TEACHERS` or a sentence-transformers folder.
        encode: embeds a list of texts (tests, or a model already loaded); None loads the teacher.
        dimension: the embedding size (with ``encode``; read from the teacher otherwise).
        chunk_size: texts per chunk file.
        batch_size: texts per teacher forward pass.
        device: where the teacher runs (None or ``"auto"``: CUDA, then Apple MPS, then the CPU).
        max_length: tokens the teacher reads per text (None: its own ``max_seq_length``, 384 for
            all-mpnet-base-v2); must match the store's when it exists.
        progress: show a progress bar.

    Returns:
        The store, with every text of ``texts``.
    """
    from tqdm.auto import tqdm

    folder = targets_folder(root, teacher)
    folder.mkdir(parents=True, exist_ok=True)
    remove_temp_files(folder)
    store = TargetStore.open(root, teacher) if (folder / STORE).is_file() else None
    if store is not None and not store.missing(texts):
        return store  # complete: no need to load the teacher
    if encode is None:
        encode, dimension, max_length = load_teacher_encoder(
            teacher, batch_size=batch_size, device=device, max_length=max_length
        )
    if store is not None:
        if dimension is not None and store.dimension != dimension:
            raise ConfigError(f"{folder} holds {store.dimension}-dimensional targets, the teacher gives {dimension}")
        if store.max_length != max_length:
            raise ConfigError(
                f"{folder} holds targets read at max_length {store.max_length}, not {max_length}: build with "
                f"--max-length {store.max_length}, or into another --out"
            )
    else:
        if dimension is None:
            raise ValueError("build_targets: pass the dimension with encode")
        meta = {"teacher": teacher, "dimension": dimension, "dtype": "float16", "query_prefix": query_prefix(teacher)}
        atomic_write_json(folder / STORE, meta | {"max_length": max_length})
        store = TargetStore.open(root, teacher)
    todo = sorted(dict.fromkeys(store.missing(texts)), key=len, reverse=True)
    with tqdm(total=len(todo), desc=f"targets {teacher}", unit="text", disable=not progress) as bar:
        for i in range(0, len(todo), chunk_size):
            part = todo[i : i + chunk_size]
            _append_chunk(folder, encode, part, store.dimension)
            bar.update(len(part))
    return TargetStore.open(root, teacher)


def next_chunk(folder: Path) -> Path:
    """The path of the store's next chunk file (numbered after the highest one there)."""
    numbers = [int(m.group(1)) for p in folder.glob("chunk-*.safetensors") if (m := _CHUNK.fullmatch(p.name))]
    return folder / f"chunk-{max(numbers, default=-1) + 1:06d}.safetensors"


_CHUNK = re.compile(r"chunk-(\d+)\.safetensors")


def _append_chunk(folder: Path, encode: Encode, texts: Sequence[str], dimension: int) -> torch.Tensor:
    """Embed ``texts`` with ``encode`` and write them atomically as the store's next chunk; returns the
    stored (normalised, float16) embeddings ``(n, D)``."""
    from safetensors.torch import save_file

    vectors = torch.as_tensor(np.asarray(encode(list(texts))), dtype=torch.float32)  # (n, D)
    if vectors.shape != (len(texts), dimension):
        raise ValueError(f"the teacher gave {tuple(vectors.shape)} for {len(texts)} texts")
    keys = np.frombuffer(b"".join(text_key(t) for t in texts), np.uint8).reshape(-1, _KEY_BYTES)
    stored = torch.nn.functional.normalize(vectors, dim=-1).to(_DTYPE)
    path = next_chunk(folder)
    atomic_write(path, lambda tmp: save_file({"keys": torch.tensor(keys), "embeddings": stored}, str(tmp)))
    return stored


def teacher_encoder(
    teacher: str, *, device: str | None = None, max_length: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE
) -> Encode:
    """The teacher's encode function, loading the teacher on its first call (for :meth:`TargetStore.fill_with`:
    a run whose texts are all stored never loads it)."""
    loaded: list[Encode] = []

    def encode(texts: list[str]) -> Any:
        if not loaded:
            loaded.append(load_teacher_encoder(teacher, batch_size=batch_size, device=device, max_length=max_length)[0])
        return loaded[0](texts)

    return encode


def load_teacher_encoder(
    teacher: str, *, batch_size: int = DEFAULT_BATCH_SIZE, device: str | None = None, max_length: int | None = None
) -> tuple[Encode, int, int]:
    """The teacher, loaded now: its encode function, its dimension and the tokens it reads per text."""
    from ..backbone.device import resolve_device
    from .teacher import Teacher

    device = resolve_device(device)  # None or "auto": CUDA, then MPS, then the CPU, as every command
    model = Teacher.load(teacher, device, batch_size).model
    if max_length is not None:
        model.max_seq_length = max_length

    def encode(texts: list[str]) -> Any:
        return model.encode(texts, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)

    return encode, int(model.get_embedding_dimension()), int(model.max_seq_length)

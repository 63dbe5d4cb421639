"""Read every configured file up front (so bad data fails before training) and serve global batches."""

from __future__ import annotations

import glob
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from .batches import ContrastiveBatch, build_contrastive_batch
from .contrastive import ContrastiveRow, read_contrastive
from .generative import GenerativeBatch, GenerativeRow, collate_generative, read_generative, tokenize_row
from .jsonl import DataError
from .sampler import FILE_ORDERS, MixtureSampler
from .single import SINGLE_INSTRUCTIONS, distinct_prompts, is_texts_file, read_single_rows, row_partners

if TYPE_CHECKING:
    from ..config import RunConfig

__all__ = ["ContrastiveStream", "FileSpec", "GenerativeStream", "SingleStream", "expand_files"]

_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class FileSpec:
    """A concrete file of a mixture with its sampling weight (None = its row count) and symmetry.

    ``distill``: a teacher's similarities apply to the file's rows (when the run distills).

    ``skip_instructions`` and ``axes`` leave rows out: those with one of these instructions, and (``axes``
    not empty) those whose label ``axis:class`` has another axis (:func:`kept_rows`).

    ``batch_by_axis``: the rows' labels read ``axis:class`` (e.g. ``sentiment:positive``,
    ``domain:movie``); each axis becomes a source of its own, so a batch holds one axis (one family of
    instructions) and its in-batch negatives differ from the query on that axis. ``axis`` names the
    part of the file a source holds (set by the stream).
    """

    path: str
    weight: float | None = None
    share: float | None = None  # a fixed share of the batches (see MixtureSampler)
    symmetric: bool = False
    batch_by_axis: bool = False
    axis: str | None = None
    skip_instructions: tuple[str, ...] = ()
    axes: tuple[str, ...] = ()
    distill: bool = True

    @property
    def name(self) -> str:
        """The file name, with the axis for one axis of a file batched by axis."""
        base = os.path.basename(self.path)
        return base if self.axis is None else f"{base}[{self.axis}]"


def expand_files(files: Sequence[Any]) -> list[FileSpec]:
    """Expand glob patterns in file entries (objects with ``path``, ``weight``, ``symmetric``).

    Raises:
        DataError: a pattern matches nothing.
    """
    specs = []
    for item in files:
        path = os.path.expanduser(item.path)
        matches = sorted(glob.glob(path)) if _GLOB_CHARS & set(path) else [path]
        if not matches:
            raise DataError(path, None, "pattern matches no file")
        options = {
            "symmetric": getattr(item, "symmetric", False),
            "batch_by_axis": getattr(item, "batch_by_axis", False),
            "skip_instructions": tuple(getattr(item, "skip_instructions", ())),
            "axes": tuple(getattr(item, "axes", ())),
            "distill": getattr(item, "distill", True),
        }
        specs += [FileSpec(m, item.weight, getattr(item, "share", None), **options) for m in matches]
    return specs


def _part(value: float | None, part: list, rows: list) -> float | None:
    """An axis's part of a file's weight or share: by its rows."""
    return None if value is None else value * len(part) / len(rows)


def _label_axis(row: ContrastiveRow) -> str | None:
    """The axis of a row's label ``axis:class`` (None without a label of that form)."""
    axis, sep, cls = (row.label or "").partition(":")
    return axis if axis and sep and cls else None


def kept_rows(spec: FileSpec, rows: list[ContrastiveRow]) -> list[ContrastiveRow]:
    """The rows of a file that ``spec.skip_instructions`` and ``spec.axes`` keep.

    Raises:
        DataError: an instruction to skip or an axis to keep that no row has, or (with ``axes``) a row
            whose label is not ``axis:class``.
    """
    if spec.axes:
        for i, row in enumerate(rows):
            if _label_axis(row) is None:
                raise DataError(spec.path, None, f"row {i + 1}: axes needs a label 'axis:class', got {row.label!r}")
    if spec.skip_instructions:
        found = {row.instruction for row in rows}
        missing = [text for text in spec.skip_instructions if text not in found]
        if missing:
            raise DataError(spec.path, None, f"skip_instructions: no row has the instruction {missing[0]!r}")
        rows = [row for row in rows if row.instruction not in spec.skip_instructions]
    if spec.axes:
        found = {_label_axis(row) for row in rows}
        missing = [axis for axis in spec.axes if axis not in found]
        if missing:
            raise DataError(spec.path, None, f"axes: no row has the axis {missing[0]!r} (the file has {sorted(found)})")
        rows = [row for row in rows if _label_axis(row) in spec.axes]
    return rows


def _sources(spec: FileSpec) -> list[tuple[FileSpec, list[ContrastiveRow]]]:
    """A file's rows as one source, or one source per label axis (weights shared by row count)."""
    rows = kept_rows(spec, read_contrastive(spec.path))
    if not spec.batch_by_axis:
        return [(spec, rows)]
    parts: dict[str, list[ContrastiveRow]] = {}
    for i, row in enumerate(rows):
        axis = _label_axis(row)
        if axis is None:
            raise DataError(
                spec.path, None, f"row {i + 1}: batch_by_axis needs a label 'axis:class', got {row.label!r}"
            )
        parts.setdefault(axis, []).append(row)
    return [
        (replace(spec, axis=axis, weight=_part(spec.weight, part, rows), share=_part(spec.share, part, rows)), part)
        for axis, part in sorted(parts.items())
    ]


def _even(file_order: str, key: str) -> bool:
    """Whether ``file_order`` asks for the even file schedule (:class:`MixtureSampler`'s ``even``)."""
    if file_order not in FILE_ORDERS:
        raise ValueError(f"{key} must be one of {', '.join(FILE_ORDERS)}, got {file_order!r}")
    return file_order == "even"


class ContrastiveStream:
    """Global contrastive batches from a weighted mixture of files (see :class:`MixtureSampler`)."""

    def __init__(
        self,
        files: Sequence[FileSpec],
        *,
        batch_size: int,
        hard_negatives: int,
        seed: int,
        one_file_per_batch: bool = True,
        doc_instruction: str = "",
        file_order: str = "random",
    ):
        if not files:
            raise DataError("data.files", None, "no contrastive training files configured")
        sources = [source for spec in files for source in _sources(spec)]
        self.files = [spec for spec, _ in sources]
        self.rows: list[list[ContrastiveRow]] = [rows for _, rows in sources]
        self.weights = [
            f.weight if f.weight is not None else float(len(r)) for f, r in zip(self.files, self.rows, strict=True)
        ]
        keys = [[(row.query, *row.pos) for row in rows] for rows in self.rows]
        even = _even(file_order, "data.file_order")
        try:
            self.sampler = MixtureSampler(
                [len(r) for r in self.rows],
                self.weights,
                batch_size,
                seed=seed,
                one_file_per_batch=one_file_per_batch,
                keys=keys,
                shares=[f.share for f in self.files],
                even=even,
            )
        except ValueError as exc:  # shares that do not add up
            raise DataError("data.files", None, str(exc)) from exc
        self.hard_negatives, self.doc_instruction, self.seed = hard_negatives, doc_instruction, seed
        self.last_rows: dict[str, int] = {}  # file name -> rows it gave the last batch (for the metrics)

    @classmethod
    def from_config(cls, cfg: RunConfig, world: int = 1) -> ContrastiveStream:
        """The stream a run of ``cfg`` over ``world`` processes draws its global batches from."""
        return cls(
            expand_files(cfg.data.files),
            batch_size=cfg.data.batch_size * world,
            hard_negatives=cfg.data.hard_negatives,
            seed=cfg.train.seed,
            one_file_per_batch=cfg.data.one_file_per_batch,
            doc_instruction=cfg.data.doc_instruction,
            file_order=cfg.data.file_order,
        )

    def next(self) -> ContrastiveBatch:
        rng = np.random.default_rng([self.seed, 1, self.sampler.batches_drawn])
        picks = self.sampler.next_batch()
        self.last_rows = dict(Counter(self.files[f].name for f, _ in picks).most_common())
        return build_contrastive_batch(
            [self.rows[f][r] for f, r in picks],
            hard_negatives=self.hard_negatives,
            rng=rng,
            doc_instruction=self.doc_instruction,
            symmetric=[self.files[f].symmetric for f, _ in picks],
            distill=[self.files[f].distill for f, _ in picks],
        )

    def skip(self, n: int) -> None:
        self.sampler.skip(n)

    def summary(self) -> list[dict[str, Any]]:
        """Per file: path, rows and share of the batches (its fixed share, or its weight's part of the rest)."""
        fixed = sum(f.share for f in self.files if f.share is not None)
        rest = sum(w for f, w in zip(self.files, self.weights, strict=True) if f.share is None)
        return [
            {
                "path": f.path,
                **({"axis": f.axis} if f.axis else {}),
                "rows": len(r),
                "share": round(f.share if f.share is not None else (1 - fixed) * w / rest, 4),
            }
            for f, r, w in zip(self.files, self.rows, self.weights, strict=True)
        ]


class GenerativeStream:
    """Global generative batches (tokenized, with response-only labels) from a weighted mixture of files."""

    def __init__(self, files: Sequence[FileSpec], *, batch_size: int, seed: int, tokenizer: Any, max_length: int):
        self.rows: list[list[GenerativeRow]] = [read_generative(f.path) for f in files]
        self.files = list(files)
        self.weights = [
            f.weight if f.weight is not None else float(len(r)) for f, r in zip(files, self.rows, strict=True)
        ]
        self.sampler = MixtureSampler(
            [len(r) for r in self.rows], self.weights, batch_size, seed=seed + 1, one_file_per_batch=False
        )
        self.tokenizer, self.max_length = tokenizer, max_length

    def next_rows(self) -> list[GenerativeRow]:
        return [self.rows[f][r] for f, r in self.sampler.next_batch()]

    def collate(self, rows: Sequence[GenerativeRow]) -> GenerativeBatch | None:
        """Tokenize and left-pad rows; None when no row keeps a labelled token within ``max_length``."""
        items = [(tokenize_row(self.tokenizer, row, self.max_length), row.text is not None) for row in rows]
        kept = [(item, text) for item, text in items if item is not None]
        if not kept:
            return None
        return collate_generative([item for item, _ in kept], self.tokenizer.pad_token_id, [text for _, text in kept])

    def skip(self, n: int) -> None:
        self.sampler.skip(n)


class SingleStream:
    """Global batches of single texts: every distinct text of each file (:mod:`.single`), in shuffled
    passes, a batch from one file where it has enough texts (weights as for contrastive files), never
    the same text twice in a batch.

    ``instruction``: ``"none"`` reads every text bare; ``"row"`` reads each under the instruction its row
    gives it in contrastive training (a query its row's, a document ``doc_instruction`` or, in a
    ``symmetric`` file, its row's), a text that has two such instructions once under each.

    ``pairs``: half of each batch is drawn as above and each drawn text is followed by a text of one of its
    rows (a query's positive or negative, a document's query or a sibling), chosen at random among those
    not yet in the batch, so the teacher's similarities within a batch include those of close texts (a
    similarity pair, a query and its answer) and not only of strangers. A text without such a partner
    leaves its place empty: the batch is then shorter. Contrastive files only.
    """

    def __init__(
        self,
        files: Sequence[FileSpec],
        *,
        batch_size: int,
        seed: int,
        instruction: str = "none",
        doc_instruction: str = "",
        pairs: bool = False,
        file_order: str = "random",
    ):
        if not files:
            raise DataError("single.files", None, "no single-text files configured")
        if instruction not in SINGLE_INSTRUCTIONS:
            raise ValueError(f"instruction must be one of {', '.join(SINGLE_INSTRUCTIONS)}, got {instruction!r}")
        self.files = list(files)
        if pairs and (texts_file := next((f.path for f in files if is_texts_file(f.path)), None)):
            raise DataError(texts_file, None, "single.pairs draws texts of the same row: a texts file has no rows")
        rows = [
            read_single_rows(
                f.path,
                symmetric=f.symmetric,
                doc_instruction=doc_instruction,
                keep=partial(kept_rows, f) if f.skip_instructions or f.axes else None,
            )
            for f in files
        ]
        prompts = [distinct_prompts(r) for r in rows]
        if instruction == "none":  # every distinct text once, bare
            prompts = [[(text, "") for text in dict.fromkeys(text for text, _ in p)] for p in prompts]
        self.texts = [[text for text, _ in p] for p in prompts]
        self.instructions = [[inst for _, inst in p] for p in prompts]
        self.partners = None
        if pairs:  # from the rows read above: each file is parsed once
            bare = instruction == "none"
            self.partners = [row_partners(r, p, bare=bare) for r, p in zip(rows, prompts, strict=True)]
        self.weights = [
            f.weight if f.weight is not None else float(len(t)) for f, t in zip(files, self.texts, strict=True)
        ]
        keys = [[(text,) for text in texts] for texts in self.texts]
        sizes = [len(t) for t in self.texts]
        drawn = batch_size - batch_size // 2 if pairs else batch_size
        self.seed = seed
        even = _even(file_order, "single.file_order")
        self.sampler = MixtureSampler(sizes, self.weights, drawn, seed=seed + 2, keys=keys, even=even)
        self.last_rows: dict[str, int] = {}

    def next(self) -> tuple[list[str], list[str]]:
        """The next global batch: its texts and the instruction each is read under."""
        picks = self.sampler.next_batch()
        if self.partners is not None:
            picks = self._with_partners(picks)
        self.last_rows = dict(Counter(self.files[f].name for f, _ in picks).most_common())
        return [self.texts[f][i] for f, i in picks], [self.instructions[f][i] for f, i in picks]

    def _with_partners(self, picks: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Each drawn text followed by a partner of its rows whose text the batch does not hold yet; the
        choice follows from the seed and the batch's number alone, so a resumed run draws the same."""
        rng = np.random.default_rng([self.seed, self.sampler.batches_drawn])
        seen = {self.texts[f][i] for f, i in picks}
        out = []
        for f, i in picks:
            out.append((f, i))
            free = [j for j in self.partners[f][i] if self.texts[f][j] not in seen]
            if free:
                j = free[int(rng.integers(len(free)))]
                seen.add(self.texts[f][j])
                out.append((f, j))
        return out

    def skip(self, n: int) -> None:
        self.sampler.skip(n)

    def summary(self) -> list[dict[str, Any]]:
        """Per file: path, texts and share of the single-text batches."""
        total = sum(self.weights)
        return [
            {"path": f.path, "texts": len(t), "share": round(w / total, 4), "single": True}
            for f, t, w in zip(self.files, self.texts, self.weights, strict=True)
        ]

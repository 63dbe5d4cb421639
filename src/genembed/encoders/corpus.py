"""Encode a JSON-lines corpus of any size into embedding shards: streaming, resumable, data-parallel.

The input is read line by line and never held whole: records are grouped into shards of ``shard_size``
records (shard ``s`` holds records ``[s * shard_size, (s + 1) * shard_size)``) and each shard is encoded and
written before the next one is parsed. The output folder holds::

    config.json             the settings the shards were made with (a rerun with other settings is refused)
    shard-000000.npy        (n, dim) float32 embeddings of shard 0's records, in input order
    shard-000000.ids.json   their ids (the record's id field, else its 0-based record number)
    ...
    manifest.json           written once every shard exists: record count, dim and the shard list with
                            each file's byte size and SHA-256 (checked by :func:`load_corpus_embeddings`)

Every file is written to a temporary name and renamed, a shard's ids before its embeddings, so a shard
whose ``.npy`` exists is complete. A rerun after an interruption skips the shards already written.
A damaged file (truncated, altered) is an error that names it and says what to do.

Data parallel: under ``torchrun`` or ``accelerate launch`` (``RANK``/``WORLD_SIZE`` set) rank ``r`` of ``W``
encodes the shards ``s`` with ``s % W == r``; rank 0 writes the manifest after all ranks finish.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._distributed import barrier, process_group
from .._files import (
    DamagedFileError,
    atomic_write_json,
    atomic_write_npy,
    count_lines,
    file_digest,
    parse_jsonl_line,
    read_json,
    read_lines,
    read_npy,
    remove_temp_files,
    require_field,
)
from .embedder import encode_texts
from .output import OutputPipeline
from .settings import EMBEDDING_FIELDS, EmbedSettings, RunOptions

__all__ = [
    "CorpusResult",
    "count_records",
    "encode_corpus",
    "iter_corpus_embeddings",
    "load_corpus_embeddings",
    "read_records",
]

_CONFIG, _MANIFEST = "config.json", "manifest.json"


@dataclass
class CorpusResult:
    """What one call did: this rank's shards encoded now and skipped (already on disk), and the totals."""

    out_dir: Path
    records: int
    shards: int
    encoded_shards: list[int]
    skipped_shards: list[int]
    rank: int
    world_size: int


def count_records(path: str | os.PathLike) -> int:
    """Non-blank lines of a JSON-lines file, counted without parsing them."""
    return count_lines(path)


def read_records(
    path: str | os.PathLike,
    *,
    text_field: str = "text",
    id_field: str = "id",
    title_field: str | None = "title",
    wanted: Any = None,
) -> Iterator[tuple[int, Any, str] | None]:
    """Stream ``(record number, id, text)`` from a JSON-lines file, one per non-blank line.

    A line is a JSON object with a string ``text_field`` (a non-empty ``title_field`` is prepended with a
    space, as retrieval corpora expect) or a bare JSON string. The id is ``id_field`` if present, else the
    record number. ``wanted(record_number)`` False yields None instead, without parsing the line.

    Raises:
        FileFormatError: a malformed line (a ``ValueError``); the message names the file, line number
            and field.
    """
    for record, (number, line) in enumerate(read_lines(path)):
        if wanted is not None and not wanted(record):
            yield None
        else:
            yield (record, *_parse(line, path, number, record, text_field, id_field, title_field))


def _parse(line: str, path: Any, number: int, record: int, text_field: str, id_field: str, title_field: str | None):
    item = parse_jsonl_line(line, path, number, expected="a JSON object or string", strings=True)
    if isinstance(item, str):
        return record, item
    text = require_field(item, text_field, str, path, number)
    title = item.get(title_field) if title_field else None
    if title is not None:  # an explicit null title is no title
        title = require_field(item, title_field, str, path, number)
    if title:
        text = f"{title} {text}"
    return require_field(item, id_field, (str, int), path, number, default=record), text


def _shard_paths(out_dir: Path, shard: int) -> tuple[Path, Path]:
    return out_dir / f"shard-{shard:06d}.npy", out_dir / f"shard-{shard:06d}.ids.json"


def _prepare_folder(out_dir: Path, config: dict, overwrite: bool, rank: int) -> None:
    """Refuse a folder made with other settings (every rank checks, so all fail alike), then rank 0
    clears it when overwriting and records the settings."""
    path = out_dir / _CONFIG
    if path.is_file() and not overwrite:
        old = read_json(path, fix=f"Delete it, or rerun with --overwrite to start {out_dir} again.")
        changed = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
        if changed:
            raise ValueError(
                f"{out_dir} holds embeddings made with other settings ({', '.join(changed)} differ); "
                "use another --out folder, or --overwrite to start again"
            )
    barrier()
    if rank == 0:
        if overwrite:
            for old_file in [*out_dir.glob("shard-*"), out_dir / _MANIFEST]:
                old_file.unlink(missing_ok=True)
        atomic_write_json(path, config, indent=1)
    barrier()


def encode_corpus(
    backbone: Any,
    input_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    settings: EmbedSettings,
    *,
    instruction: str = "",
    output: OutputPipeline | None = None,
    run: RunOptions | None = None,
    shard_size: int = 4096,
    text_field: str = "text",
    id_field: str = "id",
    title_field: str | None = "title",
    model_name: str | None = None,
    overwrite: bool = False,
    show_progress_bar: bool = True,
) -> CorpusResult:
    """Encode every record of ``input_path`` into shards in ``out_dir`` (see the module docstring).

    Args:
        backbone: a loaded :class:`~genembed.backbone.loading.Backbone` (``genembed.load().backbone``).
        input_path: a JSON-lines file (see :func:`read_records` for the record format).
        out_dir: the output folder (created if needed).
        settings: how to encode (:meth:`EmbedSettings.build`).
        instruction: the instruction for every record ("" for none, as documents usually are).
        output: what the raw embeddings go through (:class:`~genembed.encoders.output.OutputPipeline`:
            centring, ``truncate_dim``, normalisation), as :meth:`genembed.GenerativeEmbedder.encode`
            does; ``OutputPipeline.of(model)`` for a model's own. None: normalised only. Shards are
            float32: a ``precision`` other than ``float32`` is refused.
        run: the speed switches (batch size, ...; :class:`~genembed.encoders.settings.RunOptions`; None:
            those given to ``settings``, else the defaults).
        shard_size: records per shard; also the granularity of resuming and of data parallelism.
        text_field, id_field, title_field: record fields (``title_field`` None to ignore titles).
        model_name: recorded in ``config.json`` so a rerun with another model is refused.
        overwrite: delete existing shards instead of resuming.
        show_progress_bar: a progress bar with an ETA (rank 0 only when data-parallel).

    Returns:
        A :class:`CorpusResult`.

    Raises:
        ValueError: a malformed record (file, line and field named), an output folder made with
            other settings, or an ``output`` precision other than float32.
    """
    output = OutputPipeline() if output is None else output
    if output.precision != "float32":
        raise ValueError(f"corpus shards are float32; got precision {output.precision!r}")
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    input_path, out_dir = Path(input_path), Path(out_dir)
    if not input_path.is_file():
        raise FileNotFoundError(f"input file not found: {input_path}")
    with process_group() as (rank, world):
        return _encode_shards(
            backbone,
            input_path,
            out_dir,
            settings,
            rank=rank,
            world=world,
            instruction=instruction,
            output=output,
            run=RunOptions.of(settings) if run is None else run,
            shard_size=shard_size,
            fields=(text_field, id_field, title_field),
            model_name=model_name or backbone.name,
            overwrite=overwrite,
            show_progress_bar=show_progress_bar,
        )


def _encode_shards(
    backbone: Any,
    input_path: Path,
    out_dir: Path,
    settings: EmbedSettings,
    *,
    rank: int,
    world: int,
    instruction: str,
    output: OutputPipeline,
    run: RunOptions,
    shard_size: int,
    fields: tuple[str, str, str | None],
    model_name: str,
    overwrite: bool,
    show_progress_bar: bool,
) -> CorpusResult:
    text_field, id_field, title_field = fields
    out_dir.mkdir(parents=True, exist_ok=True)
    total = count_records(input_path)
    n_shards = -(-total // shard_size)
    config = {
        "model": model_name,
        **{name: getattr(settings, name) for name in EMBEDDING_FIELDS},
        "instruction": instruction,
        "normalize": output.normalize,
        # absent when off, so older folders still resume
        **({"center": True} if output.center else {}),
        **({"truncate_dim": output.truncate_dim} if output.truncate_dim else {}),
        "shard_size": shard_size,
        "fields": list(fields),
        "input_records": total,
        "input_bytes": input_path.stat().st_size,
    }
    _prepare_folder(out_dir, config, overwrite, rank)

    mine = [s for s in range(n_shards) if s % world == rank]
    done = {s for s in mine if _shard_paths(out_dir, s)[0].is_file()}
    todo = [s for s in mine if s not in done]
    rows = {s: min(shard_size, total - s * shard_size) for s in mine}
    result = CorpusResult(out_dir, total, n_shards, [], sorted(done), rank, world)
    from tqdm.auto import tqdm

    bar = tqdm(
        total=sum(rows.values()),
        initial=sum(rows[s] for s in done),
        desc=f"encode {input_path.name}" + (f" (rank {rank}/{world})" if world > 1 else ""),
        unit="doc",
        disable=not show_progress_bar or rank != 0,
        smoothing=0.1,
    )
    todo_set = set(todo)
    records = read_records(
        input_path,
        text_field=text_field,
        id_field=id_field,
        title_field=title_field,
        wanted=lambda r: r // shard_size in todo_set,
    )
    with bar:
        for shard in todo:
            ids, texts = _take_shard(records, shard, shard_size)
            embeddings, _ = encode_texts(
                backbone, texts, settings, run=run, instruction=instruction, show_progress_bar=False
            )
            embeddings = output(backbone, embeddings, settings, instruction)
            npy, ids_path = _shard_paths(out_dir, shard)
            atomic_write_json(ids_path, ids, indent=None)
            atomic_write_npy(npy, embeddings.numpy().astype(np.float32))
            result.encoded_shards.append(shard)
            bar.update(len(texts))
    barrier()
    if rank == 0:
        _write_manifest(out_dir, total, n_shards)
        remove_temp_files(out_dir)  # left by a run that was killed mid-write
    return result


def _take_shard(records: Iterator, shard: int, shard_size: int) -> tuple[list, list[str]]:
    """Advance the record stream to ``shard`` and collect its ``(ids, texts)``."""
    ids, texts = [], []
    first = shard * shard_size
    for item in records:
        if item is None:
            continue
        number, doc_id, text = item
        if number < first:
            continue
        ids.append(doc_id)
        texts.append(text)
        if number == first + shard_size - 1:
            break
    return ids, texts


def _redo_hint(npy: Path) -> str:
    return (
        f"Delete {npy.name} and {npy.name.removesuffix('.npy')}.ids.json in {npy.parent} and rerun the same "
        "`genembed encode` command: that shard is encoded again."
    )


def _check_rows(npy: Path, array: np.ndarray, ids_path: Path, ids: Any) -> None:
    """A shard's embeddings are ``(n, dim)`` and its ids a list of ``n``."""
    n_ids = len(ids) if isinstance(ids, list) else None
    if array.ndim != 2 or n_ids != len(array):
        raise DamagedFileError(
            f"{npy} holds an array of shape {list(array.shape)}, but {ids_path.name} lists "
            f"{'no list of' if n_ids is None else n_ids} ids. {_redo_hint(npy)}"
        )


def _write_manifest(out_dir: Path, total: int, n_shards: int) -> None:
    shards, dim = [], None
    for s in range(n_shards):
        npy, ids_path = _shard_paths(out_dir, s)
        if not npy.is_file():
            raise RuntimeError(f"shard {npy.name} is missing after encoding; rerun to resume")
        array = read_npy(npy, {"dtype": "float32"}, fix=_redo_hint(npy))
        ids = read_json(ids_path, fix=_redo_hint(npy))
        _check_rows(npy, array, ids_path, ids)
        dim = int(array.shape[1])
        shards.append(
            {
                "embeddings": npy.name,
                "ids": ids_path.name,
                "rows": len(array),
                "embeddings_file": file_digest(npy) | {"shape": list(array.shape), "dtype": "float32"},
                "ids_file": file_digest(ids_path),
            }
        )
    if sum(s["rows"] for s in shards) != total:
        raise RuntimeError(f"the shards in {out_dir} hold {sum(s['rows'] for s in shards)} rows, expected {total}")
    atomic_write_json(out_dir / _MANIFEST, {"records": total, "dim": dim, "shards": shards}, indent=1)


def corpus_manifest(out_dir: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a finished output folder: ``records``, ``dim`` and the ``shards`` list.

    Raises:
        FileNotFoundError: the folder has no manifest (encoding has not finished).
    """
    manifest_path = Path(out_dir) / _MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{out_dir} has no {_MANIFEST}: encoding has not finished (rerun to resume)")
    return read_json(
        manifest_path,
        fix="Delete it and rerun the same `genembed encode` command: the finished shards are kept and it is "
        "written again.",
    )


def iter_corpus_embeddings(out_dir: str | os.PathLike) -> Iterator[tuple[list, np.ndarray]]:
    """``(ids, (n, dim) embeddings)`` of each shard of a finished output folder, in input order; the
    embeddings are memory-mapped, so a corpus of any size streams through.

    Every file is checked against the size and SHA-256 the manifest recorded.

    Raises:
        FileNotFoundError: the folder has no manifest (encoding has not finished).
        DamagedFileError: a shard or the manifest is missing, truncated or altered (the message names
            the file and how to redo it).
    """
    out_dir = Path(out_dir)
    for shard in corpus_manifest(out_dir)["shards"]:
        npy = out_dir / shard["embeddings"]
        ids_path = out_dir / shard["ids"]
        shard_ids = read_json(ids_path, shard.get("ids_file"), fix=_redo_hint(npy))
        array = read_npy(npy, shard.get("embeddings_file"), fix=_redo_hint(npy))
        _check_rows(npy, array, ids_path, shard_ids)
        yield shard_ids, array


def load_corpus_embeddings(out_dir: str | os.PathLike) -> tuple[list, np.ndarray]:
    """All ids and the ``(n, dim)`` embeddings of a finished output folder, in input order (in memory;
    :func:`iter_corpus_embeddings` streams them instead).

    Raises:
        FileNotFoundError: the folder has no manifest (encoding has not finished).
        DamagedFileError: a shard or the manifest is damaged (named, with how to redo it).
    """
    ids: list = []
    arrays = []
    for shard_ids, embeddings in iter_corpus_embeddings(out_dir):
        ids.extend(shard_ids)
        arrays.append(np.asarray(embeddings))
    if not arrays:
        return ids, np.zeros((0, corpus_manifest(out_dir)["dim"] or 0), dtype=np.float32)
    return ids, np.concatenate(arrays)

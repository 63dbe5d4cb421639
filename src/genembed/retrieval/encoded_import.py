"""Import the shards of ``genembed encode`` into an index (a faiss folder or a Milvus store), streaming.

``genembed encode corpus.jsonl --out emb/`` embeds a corpus of any size, resumably and data-parallel;
this turns its output into an index that ``genembed ask`` and ``model.search`` use, without embedding
again. Each record becomes one chunk (id ``"<record id>#0"``) whose text is the record's text with its
title in front, as it was embedded. The corpus file gives the texts; every shard's ids are checked
against it.

Queries are embedded with the settings recorded in ``emb/config.json`` (model, method, steps,
attention, prompt format, length, centering) and a query instruction (the records' own instruction
is the documents' one).

Streaming: shards are memory-mapped and added to the store one at a time, through the
:class:`~genembed.retrieval.store.VectorStore` protocol like a build. The store records each finished
shard, so an interrupted import resumes with the next one (a Milvus shard redone after a crash
upserts the same primary keys; a faiss folder stages shards in ``.build/`` and commits once at the end).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..encoders.corpus import corpus_manifest, read_records
from ..encoders.settings import EmbedSettings, IndexEmbedSettings
from .index_build import run_shards
from .store import ChunkRecord, StoreLocation, VectorStore
from .stores import create_index, index_settings, parse_location

__all__ = ["encoded_embed_config", "import_encoded"]

_CONFIG = "config.json"


def encoded_embed_config(encode_config: dict[str, Any], query_instruction: str | None = None) -> IndexEmbedSettings:
    """The index settings that reproduce ``genembed encode``'s settings for queries.

    Raises:
        ValueError: settings an index cannot use (adaptive steps, unnormalized embeddings).
    """
    if encode_config.get("adaptive"):
        raise ValueError("the embeddings were made with adaptive GIRCSE steps; an index needs a fixed --steps")
    if not encode_config.get("normalize", True):
        raise ValueError("the embeddings were written with --no-normalize; an index needs normalized embeddings")
    embed = EmbedSettings(
        method=encode_config["method"],
        steps=int(encode_config["steps"]),
        attention=encode_config["attention"],
        prompt_format=encode_config.get("prompt_format", ""),
        tau=float(encode_config.get("tau", 1.0)),
        max_length=int(encode_config["max_length"]),
    )
    return IndexEmbedSettings(
        embed=embed,
        doc_instruction=encode_config.get("instruction", ""),
        center=bool(encode_config.get("center", False)),
        truncate_dim=encode_config.get("truncate_dim"),
    ).replace(query_instruction=query_instruction)


def import_encoded(
    emb_dir: str | Path,
    corpus: str | Path,
    out: str | Path | StoreLocation,
    *,
    query_instruction: str | None = None,
    model_ref: dict[str, str | None] | None = None,
    index_type: str | None = None,
    index_params: dict[str, float] | None = None,
    search_params: dict[str, float] | None = None,
    overwrite: bool = False,
    show_progress_bar: bool = True,
) -> VectorStore:
    """Make an index at ``out`` from the output folder ``emb_dir`` of ``genembed encode`` and its ``corpus``.

    Args:
        emb_dir: the finished output folder (``config.json``, ``manifest.json``, ``shard-*.npy``).
        corpus: the JSON-lines file that was encoded (for the texts).
        out: a faiss folder or a Milvus location (see :mod:`genembed.retrieval.stores`).
        query_instruction: the instruction queries are embedded with (default: the index default).
        model_ref: how to load the model (``{"model": ..., "adapter": ...}``), stored for ``genembed ask``.
        index_type, index_params, search_params: the vector index (see :func:`genembed.retrieval.build_index`).
        overwrite: replace an index at ``out``.
        show_progress_bar: show a progress bar.

    Returns:
        The store holding the new index.

    Raises:
        FileNotFoundError: ``emb_dir`` is not a finished encode folder, or ``corpus`` is missing.
        ValueError: the corpus is not the file that was encoded (the message names the record), or
            settings an index cannot use.
        FileExistsError: ``out`` holds an index (and not ``overwrite``).
    """
    emb_dir, corpus = Path(emb_dir), Path(corpus)
    if not (emb_dir / _CONFIG).is_file():
        raise FileNotFoundError(f"{emb_dir} is not an output folder of `genembed encode` (it has no {_CONFIG})")
    if not corpus.is_file():
        raise FileNotFoundError(f"corpus file not found: {corpus}")
    encode_config = json.loads((emb_dir / _CONFIG).read_text())
    shards = corpus_manifest(emb_dir)["shards"]
    if encode_config.get("input_bytes") not in (None, corpus.stat().st_size):
        raise ValueError(
            f"{corpus} has {corpus.stat().st_size:,} bytes, but {emb_dir} was encoded from a file of "
            f"{encode_config['input_bytes']:,} bytes: pass the corpus that was encoded"
        )
    location = parse_location(out)
    dim = int(corpus_manifest(emb_dir)["dim"] or 0)
    manifest = {
        "model": {"name": encode_config["model"], "dim": dim, "ref": model_ref or {}},
        "embed": encoded_embed_config(encode_config, query_instruction).to_dict(),
        "chunking": None,
        "kv": None,
        "sources": [str(corpus)],
        "imported_from": str(emb_dir.resolve()),
        **index_settings(location, dim, index_type=index_type, index_params=index_params, search_params=search_params),
    }
    reader = _CorpusReader(corpus, encode_config)
    store = create_index(location, manifest, overwrite=overwrite)
    job = hashlib.sha256(
        json.dumps([manifest["model"], manifest["embed"], encode_config, shards], sort_keys=True).encode()
    ).hexdigest()

    def add_shard(j: int, _: list[Any]) -> None:
        ids = json.loads((emb_dir / shards[j]["ids"]).read_text())
        store.add(reader.shard(j, ids), np.load(emb_dir / shards[j]["embeddings"], mmap_mode="r"))

    run_shards(
        store, job, list(range(len(shards))), 1, add_shard, desc="import", unit="shard", progress_bar=show_progress_bar
    )
    store.save()
    return store


class _CorpusReader:
    """The corpus's records shard by shard, in order (shards may be skipped, never revisited)."""

    def __init__(self, corpus: Path, encode_config: dict[str, Any]):
        self.corpus = corpus
        self.shard_size = int(encode_config["shard_size"])
        text_field, id_field, title_field = encode_config["fields"]
        self._records = read_records(corpus, text_field=text_field, id_field=id_field, title_field=title_field)

    def shard(self, j: int, ids: list[Any]) -> list[ChunkRecord]:
        from ..encoders.corpus import _take_shard

        record_ids, texts = _take_shard(self._records, j, self.shard_size)
        if record_ids != ids:
            where = next((n for n, (a, b) in enumerate(zip(record_ids, ids, strict=False)) if a != b), len(ids))
            raise ValueError(
                f"{self.corpus}: record {j * self.shard_size + where} does not match shard {j} of the embeddings "
                f"(ids {record_ids[where : where + 1]} vs {ids[where : where + 1]}): pass the corpus that was encoded"
            )
        first = j * self.shard_size
        return [
            ChunkRecord(first + n, f"{doc_id}#0", str(doc_id), 0, "", text, str(self.corpus), 0)
            for n, (doc_id, text) in enumerate(zip(record_ids, texts, strict=True))
        ]

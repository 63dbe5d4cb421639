"""``genembed index import|delete``: turn ``genembed encode`` shards into an index without embedding again
(resumable into Milvus), and delete documents from a Milvus store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from . import _store
from ._common import out_option


def import_encoded(
    emb_dir: Annotated[Path, typer.Argument(help="output folder of `genembed encode` (shard-*.npy + ids)")],
    corpus: Annotated[Path, typer.Option("--corpus", help="the JSON-lines file that was encoded (for the texts)")],
    out: Annotated[str, out_option(f"where to write the index: {_store.WHERE_HELP}")],
    query_instruction: Annotated[
        str | None, typer.Option("--query-instruction", help="instruction queries are embedded with")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="model to record for `genembed ask` (HF folder, .gguf file or hub id)"),
    ] = None,
    adapter: Annotated[str | None, typer.Option("--adapter", "-a", help="adapter to record ('none': raw)")] = None,
    index_type: _store.IndexTypeOpt = None,
    index_param: _store.IndexParamOpt = None,
    search_param: _store.SearchParamOpt = None,
    collection: _store.CollectionOpt = None,
    token: _store.TokenOpt = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace an existing index at --out")] = False,
) -> None:
    """Index the embeddings of EMB_DIR (one chunk per record). Rerun after an interruption to resume (Milvus)."""
    from genembed.retrieval.encoded_import import import_encoded as run_import
    from genembed.retrieval.errors import IndexLoadError
    from genembed.retrieval.faiss_factory import parse_search_params

    from .index_cmd import _ref

    where = _store.location(out, collection, token)
    try:
        index = run_import(
            emb_dir,
            corpus,
            where,
            query_instruction=query_instruction,
            model_ref={"model": _ref(model), "adapter": _ref(adapter)},
            index_type=index_type,
            index_params=parse_search_params(index_param),
            search_params=parse_search_params(search_param),
            overwrite=overwrite,
        )
    except (IndexLoadError, FileNotFoundError, FileExistsError, ValueError) as exc:
        _store.fail(str(exc))
    _store.print_info(index)


def delete(
    index_dir: Annotated[str, typer.Argument(help="a Milvus store: milvus:FILE.db or http(s)://HOST:PORT")],
    doc: Annotated[list[str] | None, typer.Option("--doc", help="delete every chunk of this document id")] = None,
    chunk: Annotated[list[str] | None, typer.Option("--chunk", help="delete this chunk id (doc#n)")] = None,
    filter: _store.FilterOpt = None,
    collection: _store.CollectionOpt = None,
    token: _store.TokenOpt = None,
) -> None:
    """Delete documents or chunks from a Milvus store by id or by filter."""
    from genembed.retrieval.errors import IndexLoadError
    from genembed.retrieval.stores import open_index

    where = _store.location(index_dir, collection, token)
    try:
        index = open_index(where)
        count = index.delete(doc_ids=doc, chunk_ids=chunk, filter=filter)
    except (IndexLoadError, FileNotFoundError, ValueError) as exc:
        _store.fail(str(exc))
    typer.echo(f"deleted {count:,} chunks from {where}; {len(index):,} remain")

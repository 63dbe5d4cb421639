"""Options and helpers for choosing where an index lives: a faiss folder or a Milvus collection."""

from __future__ import annotations

from typing import Annotated, Any

import typer

WHERE_HELP = "index folder (faiss), milvus:FILE.db (embedded milvus-lite) or http(s)://HOST:PORT (a Milvus server)"

CollectionOpt = Annotated[
    str | None, typer.Option("--collection", help="Milvus collection (default: genembed); ignored for a folder")
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="MILVUS_TOKEN", show_default=False, help="Milvus credentials: user:password or an API key"
    ),
]
IndexTypeOpt = Annotated[
    str | None,
    typer.Option(
        "--index-type",
        help="vector index: a faiss index_factory string for a folder (Flat = exact, default; HNSW32; IVF1024,PQ32) "
        "or a Milvus index type (AUTOINDEX, default; FLAT, HNSW, IVF_FLAT, ...)",
    ),
]
IndexParamOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--index-param", help="Milvus index build parameter NAME=VALUE (M=32, efConstruction=200, nlist=1024)"
    ),
]
SearchParamOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--search-param", help="search parameter NAME=VALUE: faiss efSearch / nprobe, Milvus ef / nprobe (repeatable)"
    ),
]
FilterOpt = Annotated[
    str | None,
    typer.Option(
        "--filter", help='metadata filter (Milvus stores), e.g. \'doc_id in ["a", "b"]\' or \'meta["year"] >= 2020\''
    ),
]


def fail(message: str) -> None:
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)


def location(where: str, collection: str | None, token: str | None) -> Any:
    """The parsed location, or a clean CLI error naming it."""
    from genembed.retrieval.stores import parse_location

    try:
        return parse_location(where, collection=collection, token=token)
    except ValueError as exc:
        fail(str(exc))


def manifest_of(where: Any) -> dict[str, Any]:
    """The manifest of the index at a parsed location (without loading its vectors; {} if none is there)."""
    from genembed.retrieval.stores import read_manifest

    return read_manifest(where)


def print_info(index: Any) -> None:
    """``genembed index info``: the rows the store describes itself with."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"index {index.where}", show_header=False)
    for row in index.describe():
        table.add_row(*row)
    Console(width=140).print(table)

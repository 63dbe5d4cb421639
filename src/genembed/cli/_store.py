"""Options and helpers for choosing where an index lives: a faiss folder or a Milvus collection."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from genembed.encoders.methods import method_rules

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
    """The manifest of the index at a parsed location (without loading a faiss index's vectors)."""
    from genembed.retrieval.index import read_manifest
    from genembed.retrieval.milvus_store import MilvusIndex

    if where.kind == "faiss":
        from pathlib import Path

        return read_manifest(Path(where.uri)) if Path(where.uri).is_dir() else {}
    return MilvusIndex.open(where).manifest


def settings_rows(index: Any) -> list[tuple[str, str]]:
    """The rows ``genembed index info`` shows for every store: model, embedding, chunking."""
    manifest, config = index.manifest, index.config
    steps = f", K={config.steps}" if method_rules(config.method).uses_steps else ""
    chunking = manifest.get("chunking")
    imported = f"imported from {manifest.get('imported_from')}"
    return [
        ("model", f"{manifest['model']['name']} (dim {index.dim})"),
        ("embedding", f"{config.method}{steps}, {config.attention} attention"),
        ("chunking", f"{chunking['chunk_tokens']} tokens, overlap {chunking['overlap']}" if chunking else imported),
    ]


def print_milvus_info(index: Any) -> None:
    """``genembed index info`` for a Milvus store."""
    from rich.console import Console
    from rich.table import Table

    manifest = index.manifest
    table = Table(title=f"index {index.where}", show_header=False)
    table.add_row("chunks", f"{len(index):,}")
    for row in settings_rows(index):
        table.add_row(*row)
    milvus = manifest["milvus"]
    params = ", ".join(f"{k}={v}" for k, v in {**milvus["index_params"], **milvus["search_params"]}.items())
    table.add_row("vector index", f"Milvus {milvus['index_type']}, inner product" + (f" ({params})" if params else ""))
    if index.has_kv:
        kv = manifest["kv"]
        size = sum(p.stat().st_size for p in index.kv_dir.glob("*.safetensors")) if index.kv_dir.is_dir() else 0
        table.add_row("KV states", f"{kv['dtype']} in {index.kv_dir}: {size / 1e6:,.1f} MB on disk")
    else:
        table.add_row("KV states", "not stored (rebuild with --store-kv for --cache doc/querydoc/docquery)")
    table.add_row("updated", manifest["updated"])
    Console(width=140).print(table)

"""``genembed index build|add|info``: make an index of JSONL / text / Markdown sources, optionally with
each chunk's KV states for doc caching in ``genembed ask``, in a faiss folder or a Milvus collection
(``index import`` and ``index delete`` are in :mod:`genembed.cli.index_store_cmd`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from . import _store
from ._added_options import with_threads
from ._common import (
    AdapterOpt,
    AttentionOpt,
    CenterOpt,
    DeviceOpt,
    DtypeOpt,
    GeneratorOpt,
    MethodOpt,
    ModelOpt,
    PromptFormatOpt,
    StepsOpt,
    check_settings,
    load_index_model,
    load_model,
    model_settings,
    out_option,
)
from ._help import FlagHelpGroup
from ._spellings import command_class

index_app = typer.Typer(
    help="Build, extend and inspect retrieval indexes (faiss folder or Milvus; chunk metadata; optional KV states).",
    no_args_is_help=True,
    cls=FlagHelpGroup,
)

SourcesArg = Annotated[list[Path], typer.Argument(help="JSONL (id, title, text), .txt or .md files, or folders")]
ShardOpt = Annotated[
    int | None,
    typer.Option(
        "--shard-size", min=1, help="chunks per shard, the resumable unit (default: 64 with --store-kv, else 1024)"
    ),
]


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)


def _input_errors() -> tuple[type[Exception], ...]:
    """What building or adding to an index raises for bad sources, settings or index (its message says
    what to do): reported as one line, not as a traceback. Bad sources raise ``SourceError``, a ValueError."""
    from genembed._files import DamagedFileError
    from genembed.retrieval.errors import IndexLoadError

    return (IndexLoadError, DamagedFileError, FileNotFoundError, FileExistsError, ValueError)


def _ref(value: str | None) -> str | None:
    """A model/adapter argument as stored in the manifest: local paths made absolute."""
    if value is None:
        return None
    path = Path(os.path.expanduser(value))
    return str(path.resolve()) if path.exists() else value


@index_app.command("build", cls=command_class("index build"))
@with_threads
def build(
    sources: SourcesArg,
    out: Annotated[str, out_option(f"where to write the index: {_store.WHERE_HELP}")],
    store_kv: Annotated[
        bool,
        typer.Option(
            "--store-kv", help="store each chunk's KV states from the generator's causal pass (for ask --kv-cache doc)"
        ),
    ] = False,
    chunk_tokens: Annotated[int, typer.Option("--chunk-tokens", min=1, help="document tokens per chunk")] = 256,
    overlap: Annotated[int, typer.Option("--overlap", min=0, help="tokens shared by consecutive chunks")] = 32,
    max_length: Annotated[
        int | None,
        typer.Option(
            "--max-length",
            min=1,
            help="tokens per prompt a chunk is embedded in, cut from the end (default: --chunk-tokens + 256, room "
            "for its title and the template)",
        ),
    ] = None,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="KV storage: float32, float16 or bfloat16")] = "float16",
    method: MethodOpt = None,
    steps: StepsOpt = None,
    attention: AttentionOpt = None,
    prompt_format: PromptFormatOpt = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="chunks per forward pass")] = 16,
    shard_size: ShardOpt = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace an existing index at --out")] = False,
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    generator: GeneratorOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    center: CenterOpt = None,
    index_type: _store.IndexTypeOpt = None,
    index_param: _store.IndexParamOpt = None,
    search_param: _store.SearchParamOpt = None,
    collection: _store.CollectionOpt = None,
    token: _store.TokenOpt = None,
    kv_dir: Annotated[Path | None, typer.Option("--kv-dir", help="Milvus: folder for KV states")] = None,
) -> None:
    """Chunk, embed and index SOURCES. Rerun the same command after an interruption to resume."""
    from genembed.encoders.settings import IndexEmbedSettings
    from genembed.retrieval.faiss_factory import parse_search_params
    from genembed.retrieval.index_build import build_index
    from genembed.retrieval.kv_store import resolve_kv_dtype

    where = _store.location(out, collection, token)
    given = {"method": method, "steps": steps, "attention": attention, "prompt_format": prompt_format}
    given["max_length"] = max_length or chunk_tokens + 256  # room for title + template
    check_settings(**given)
    try:  # check settings before loading the model
        resolve_kv_dtype(kv_dtype)
        if overlap >= chunk_tokens:
            raise ValueError(f"--overlap ({overlap}) must be smaller than --chunk-tokens ({chunk_tokens})")
        store = {"index_params": parse_search_params(index_param), "search_params": parse_search_params(search_param)}
    except ValueError as exc:
        _fail(str(exc))
    loaded = load_model(model, adapter, dtype, center, device, generator)
    settings = IndexEmbedSettings(
        embed=model_settings(loaded, **given), center=loaded.center, truncate_dim=loaded.truncate_dim
    )
    try:
        index = build_index(
            loaded,
            sources,
            where,
            settings=settings,
            chunk_tokens=chunk_tokens,
            overlap=overlap,
            store_kv=store_kv,
            kv_dtype=kv_dtype,
            batch_size=batch_size,
            shard_size=shard_size,
            overwrite=overwrite,
            model_ref={"model": _ref(model), "adapter": _ref(adapter), "generator": _ref(generator)},
            index_type=index_type,
            kv_dir=kv_dir,
            **store,
        )
    except _input_errors() as exc:
        _fail(str(exc))
    _store.print_info(index)


@index_app.command("add", cls=command_class("index add"))
@with_threads
def add(
    index_dir: Annotated[str, typer.Argument(help=_store.WHERE_HELP)],
    sources: SourcesArg,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="chunks per forward pass")] = 16,
    shard_size: ShardOpt = None,
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    generator: GeneratorOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    center: CenterOpt = None,
    collection: _store.CollectionOpt = None,
    token: _store.TokenOpt = None,
) -> None:
    """Append SOURCES to an index (same model and settings; a Milvus store replaces known document ids).
    Resumes like `build`."""
    from genembed.retrieval.errors import IndexLoadError
    from genembed.retrieval.index_build import add_to_index

    where = _store.location(index_dir, collection, token)
    try:
        manifest = _store.manifest_of(where)
    except IndexLoadError as exc:
        _fail(str(exc))
    ref = manifest.get("model", {}).get("ref", {})
    built_centered = bool(manifest.get("embed", {}).get("center"))
    if center is not None and center != built_centered:  # one index holds one kind of vector
        _fail(
            f"{index_dir} was built {'with' if built_centered else 'without'} centering and adds the same way: "
            f"drop --{'' if center else 'no-'}center, or build a new index"
        )
    loaded = load_index_model(ref, model, adapter, generator, dtype, device)
    try:
        index = add_to_index(loaded, where, sources, batch_size=batch_size, shard_size=shard_size)
    except _input_errors() as exc:
        _fail(str(exc))
    _store.print_info(index)


@index_app.command("info", cls=command_class("index info"))
def info(
    index_dir: Annotated[str, typer.Argument(help=_store.WHERE_HELP)],
    collection: _store.CollectionOpt = None,
    token: _store.TokenOpt = None,
) -> None:
    """Show an index's model, settings, size and KV storage."""
    from genembed.retrieval.errors import IndexLoadError
    from genembed.retrieval.stores import open_index

    try:
        index = open_index(_store.location(index_dir, collection, token))
    except (IndexLoadError, FileNotFoundError) as exc:
        _fail(str(exc))
    _store.print_info(index)

"""``genembed ask INDEX_DIR "question"``: retrieve passages from an index and answer with them in
context, streaming the answer, then listing its sources and where the time went."""

from __future__ import annotations

from typing import Annotated

import typer

from genembed.generation.sampling import ANSWER_SAMPLING, SamplingOptions

from . import _store
from ._common import (
    AdapterOpt,
    DeviceOpt,
    DtypeOpt,
    GeneratorOpt,
    ModelOpt,
    load_index_model,
    rerank_top_option,
    say_generation_weights,
    top_option,
)
from ._decoding import decoding_options


@decoding_options(ANSWER_SAMPLING, what="answer")
def ask(
    index_dir: Annotated[str, typer.Argument(help=_store.WHERE_HELP)],
    question: Annotated[str, typer.Argument(help="the question")],
    kv_cache: Annotated[
        str,
        typer.Option("--kv-cache", help="KV reuse: none, query, doc, querydoc or docquery (doc ones need --store-kv)"),
    ] = "none",
    order: Annotated[
        str | None, typer.Option("--order", help="doc_first (default) or query_first; querydoc/docquery fix it")
    ] = None,
    recompute: Annotated[
        float,
        typer.Option(
            "--recompute",
            min=0.0,
            max=1.0,
            help="share of isolated cached tokens to recompute (cached segments after the first; 0: none)",
        ),
    ] = 0.0,
    rerank: Annotated[
        bool, typer.Option("--rerank", help="rerank retrieved passages generatively (how many: --rerank-top)")
    ] = False,
    top: Annotated[int, top_option("the N best passages put in the prompt")] = 3,
    rerank_top: Annotated[
        int | None,
        rerank_top_option(
            "re-rank the N best retrieved passages generatively before keeping --top; implies --rerank "
            "(--rerank alone: genembed.retrieval.rag.ask's rerank_candidates, 10)"
        ),
    ] = None,
    max_length: Annotated[
        int | None,
        typer.Option(
            "--max-length",
            min=1,
            help="tokens per prompt the question is embedded in, cut from the end (default: the index's)",
        ),
    ] = None,
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    generator: GeneratorOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    filter: _store.FilterOpt = None,
    search_param: _store.SearchParamOpt = None,
    collection: _store.CollectionOpt = None,
    token: _store.TokenOpt = None,
    sampling: SamplingOptions | None = None,
) -> None:
    """Answer QUESTION from the passages of INDEX_DIR with one model (retrieval and generation)."""
    rerank = rerank or rerank_top is not None  # --rerank-top N reranks, as in eval
    from rich.console import Console
    from rich.table import Table

    from genembed.retrieval.context import isolation_note, mode_layout
    from genembed.retrieval.errors import IndexLoadError
    from genembed.retrieval.rag import ask as rag_ask
    from genembed.retrieval.stores import open_index

    def fail(message: str) -> None:
        typer.secho(f"error: {message}", fg="red", err=True)
        raise typer.Exit(2)

    try:  # everything that can be checked before the model loads
        mode_layout(kv_cache, order)
        index = open_index(_store.location(index_dir, collection, token))
        index.set_search_params(search_param)
        if kv_cache in ("doc", "querydoc", "docquery") and not index.has_kv:
            raise ValueError(f"--kv-cache {kv_cache} needs stored KV states: rebuild {index_dir} with --store-kv")
    except (IndexLoadError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    ref = index.manifest["model"].get("ref", {})
    loaded = load_index_model(ref, model, adapter, generator, dtype, device)
    say_generation_weights(loaded)
    console = Console(width=140)
    note = isolation_note(kv_cache, order, top) if recompute < 1 else None
    if note is not None:
        typer.secho(f"note: {note}", fg="yellow", err=True)
    console.print(f"[bold]Q:[/bold] {question}")
    console.print("[bold]A:[/bold] ", end="")
    try:
        answer = rag_ask(
            loaded,
            index,
            question,
            cache=kv_cache,
            order=order,
            top_k=top,
            rerank=rerank,
            **({} if rerank_top is None else {"rerank_candidates": rerank_top}),
            sampling=sampling,
            filter=filter,
            recompute=recompute,
            max_length=max_length,
            on_text=lambda piece: console.print(piece, end="", markup=False, highlight=False),
        )
    except ValueError as exc:
        console.print()
        fail(str(exc))
    console.print("\n")
    sources = Table(title="sources")
    for col in ("#", "chunk", "score", *(["rerank"] if rerank else []), "passage"):
        sources.add_column(col)
    for n, s in enumerate(answer.sources, start=1):
        passage = (f"{s.title}: " if s.title else "") + s.text
        passage = passage if len(passage) <= 160 else passage[:157] + "..."
        rerank_col = [f"{s.rerank_score:.2f}"] if rerank else []
        sources.add_row(str(n), s.id, f"{s.score:.3f}", *rerank_col, passage)
    console.print(sources)
    t = answer.timings
    parts = [f"{k} {t[k]:.2f}s" for k in ("embed_query", "search", "rerank", "first_token", "total") if k in t]
    console.print(
        f"kv-cache={answer.mode} ({answer.order}); prompt {answer.prompt_tokens} tokens, {answer.cached_tokens} from "
        f"KV states ({answer.recomputed_tokens} recomputed); {answer.new_tokens} new tokens; " + ", ".join(parts),
        style="dim",
    )

"""``genembed eval``: score a model on task folders; JSON + markdown tables (+ score-vs-K plot for sweeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import (
    AdapterOpt,
    AttentionOpt,
    CenterOpt,
    DeviceOpt,
    DtypeOpt,
    GeneratorOpt,
    MethodOpt,
    ModelOpt,
    fail,
    load_model,
    model_settings,
    out_option,
    rerank_top_option,
)


def eval_tasks(
    task_dirs: Annotated[
        list[Path], typer.Argument(help="task folders, or folders of task folders (e.g. ../shared/data/dev)")
    ],
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    generator: GeneratorOpt = None,
    method: MethodOpt = None,
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps", "-k", help="GIRCSE soft tokens K; a list like 1,3,5,10,20 is a sweep (default: the model's own)"
        ),
    ] = None,
    attention: AttentionOpt = None,
    prompt_format: Annotated[
        str | None,
        typer.Option("--prompt-format", help="plain or chat (default: the model's own; chat for gircse, else plain)"),
    ] = None,
    max_length: Annotated[int, typer.Option("--max-length", min=1, help="tokens per prompt")] = 512,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="texts per forward pass")] = 32,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="at most N rows per data file")] = None,
    rerank_top: Annotated[int | None, rerank_top_option("re-rank the top N of retrieval tasks generatively")] = None,
    cluster_starts: Annotated[
        int,
        typer.Option(
            "--cluster-starts",
            min=1,
            help="score clustering and instruct tasks as the mean over N k-means starts (1: one start, seed 42)",
        ),
    ] = 1,
    out: Annotated[Path, out_option("results JSON (also writes .md, and _scaling.png)")] = Path("results.json"),
    cache_file: Annotated[
        Path | None,
        typer.Option("--cache-file", help="embedding cache file (default ~/.cache/genembed/embeddings.sqlite)"),
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="encode everything, read and write no cache")] = False,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    center: CenterOpt = None,
) -> None:
    """Evaluate on task folders with exactly the metrics of the task format (all x100)."""
    from genembed.eval import EmbeddingCache, GenembedEncoder, TaskFormatError, evaluate, find_task_dirs, load_task

    try:  # validate tasks and settings before loading the model
        tasks = [load_task(p, limit=limit) for p in find_task_dirs(list(task_dirs))]
    except (TaskFormatError, ValueError) as exc:
        fail(str(exc))
    loaded = load_model(model, adapter, dtype, center, device, generator)
    # the model's own settings (model.save records them) unless an option says otherwise
    own = model_settings(loaded, method=method, attention=attention, prompt_format=prompt_format)
    if steps is None and own.rules.uses_steps and not own.adaptive:
        steps = str(own.steps)
    try:
        encoder = GenembedEncoder(
            loaded,
            method=own.method,
            steps=steps,
            attention=own.attention,
            prompt_format=own.prompt_format,
            max_length=max_length,
            batch_size=batch_size,
        )
    except ValueError as exc:
        fail(str(exc))
    if rerank_top is not None and not callable(getattr(loaded, "rerank", None)):
        fail("--rerank-top needs GenerativeEmbedder.rerank, which this genembed build does not have")
    from genembed._files import DamagedFileError

    try:
        cache = None if no_cache else EmbeddingCache(cache_file)
        typer.echo(
            f"{len(tasks)} tasks · {encoder.name} · steps {list(encoder.views) or '-'} · cache {cache and cache.path}"
        )
        report = evaluate(
            encoder,
            tasks,
            limit=limit,
            cache=cache,
            reranker=loaded if rerank_top else None,
            rerank_top=rerank_top,
            out=out,
            log=typer.echo,
            config={"adapter_path": adapter, "model_arg": model, **_reranker(loaded, rerank_top)},
            cluster_starts=cluster_starts,
        )
    except DamagedFileError as exc:
        fail(str(exc))
    mean = report.mean_scores()[-1]
    typer.echo(f"mean {mean:.2f} over {len(report.tasks)} tasks in {report.seconds:.1f}s -> {out}")


def _reranker(model: object, rerank_top: int | None) -> dict[str, str]:
    """The weights that rerank (recorded in the report: a generation adapter changes the scores)."""
    if not rerank_top:
        return {}
    from genembed.retrieval.kv_source import generation_weights

    return {"rerank_weights": generation_weights(model)["adapter"]}

"""``genembed eval``: score a model on task folders; JSON + markdown tables (+ score-vs-K plot for sweeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import AdapterOpt, CenterOpt, DeviceOpt, DtypeOpt, GeneratorOpt, ModelOpt, load_model


def eval_tasks(
    task_dirs: Annotated[
        list[Path], typer.Argument(help="task folders, or folders of task folders (e.g. ../shared/data/dev)")
    ],
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    generator: GeneratorOpt = None,
    method: Annotated[
        str | None, typer.Option("--method", help="gircse, mean, last or grit (default: the model's own)")
    ] = None,
    steps: Annotated[
        str | None, typer.Option("--steps", "-k", help="GIRCSE soft tokens K; a list like 1,3,5,10,20 is a sweep")
    ] = None,
    attention: Annotated[str | None, typer.Option("--attention", help="causal or bidirectional")] = None,
    prompt_format: Annotated[
        str | None, typer.Option("--prompt-format", help="plain or chat (default: chat for gircse, else plain)")
    ] = None,
    max_length: Annotated[int, typer.Option("--max-length", min=1, help="tokens per prompt")] = 512,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="texts per forward pass")] = 32,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="at most N rows per data file")] = None,
    rerank_top: Annotated[
        int | None, typer.Option("--rerank-top", min=1, help="re-rank the top N of retrieval tasks generatively")
    ] = None,
    cluster_starts: Annotated[
        int,
        typer.Option(
            "--cluster-starts",
            min=1,
            help="score clustering and instruct tasks as the mean over N k-means starts (1: one start, seed 42)",
        ),
    ] = 1,
    out: Annotated[Path, typer.Option("--out", "-o", help="results JSON (also writes .md, and _scaling.png)")] = Path(
        "results.json"
    ),
    cache_file: Annotated[
        Path | None, typer.Option("--cache", help="embedding cache file (default ~/.cache/genembed/embeddings.sqlite)")
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="encode everything, read and write no cache")] = False,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    center: CenterOpt = None,
    task_instructions: Annotated[
        bool,
        typer.Option(
            "--task-instructions",
            help="keep the task folders' own instructions for a published model (default: its authors' "
            "per-task instructions, by each task's mteb_name or name; `genembed models`)",
        ),
    ] = False,
) -> None:
    """Evaluate on task folders with exactly the metrics of the task format (all x100).

    A published checkpoint (`genembed models`) runs with its authors' settings: its K and prompt format,
    and, for tasks in its authors' MTEB table, their instructions."""
    from genembed.encoders.methods import method_rules
    from genembed.eval import EmbeddingCache, GenembedEncoder, TaskFormatError, evaluate, find_task_dirs, load_task

    try:  # validate tasks and settings before loading the model
        tasks = [load_task(p, limit=limit) for p in find_task_dirs(list(task_dirs))]
    except (TaskFormatError, ValueError) as exc:
        _fail(str(exc))
    loaded = load_model(model, adapter, dtype, center, device, generator)
    used = _published_instructions(loaded, tasks) if not task_instructions else None
    if used is not None:
        tasks, used = used
    try:
        # without --method, a model is evaluated with its own settings (model.save records them)
        own = method is None
        own_steps = loaded.steps if isinstance(loaded.steps, int) and method_rules(loaded.method).uses_steps else None
        encoder = GenembedEncoder(
            loaded,
            method=loaded.method if own else method,
            steps=own_steps if own and steps is None else steps,
            attention=loaded.attention if own and attention is None else attention,
            prompt_format=loaded.prompt_format if own and prompt_format is None else prompt_format,
            max_length=max_length,
            batch_size=batch_size,
        )
    except ValueError as exc:
        _fail(str(exc))
    if rerank_top is not None and not callable(getattr(loaded, "rerank", None)):
        _fail("--rerank-top needs GenerativeEmbedder.rerank, which this genembed build does not have")
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
            config={
                "adapter_path": adapter,
                "model_arg": model,
                **_reranker(loaded, rerank_top),
                **({"published_instructions": used} if used is not None else {}),
            },
            cluster_starts=cluster_starts,
        )
    except DamagedFileError as exc:
        _fail(str(exc))
    mean = report.mean_scores()[-1]
    typer.echo(f"mean {mean:.2f} over {len(report.tasks)} tasks in {report.seconds:.1f}s -> {out}")


def _published_instructions(loaded: object, tasks: list) -> tuple[list, dict] | None:
    """For a published checkpoint: the tasks with its authors' instructions and what each task now uses."""
    from genembed.eval.published_instructions import with_published_instructions
    from genembed.published import published_for

    entry = published_for(loaded)
    if entry is None:
        return None
    tasks, used = with_published_instructions(tasks, entry)
    source = entry.instruction_set().source
    found = [name for name, changes in used.items() if changes]
    typer.echo(
        f"{entry.id}: its authors' instructions ({source['repo']}@{source['commit'][:10]}) for "
        f"{len(found)} of {len(used)} tasks{': ' + ', '.join(found) if found else ''}; the others keep their own"
    )
    return tasks, used


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)


def _reranker(model: object, rerank_top: int | None) -> dict[str, str]:
    """The weights that rerank (recorded in the report: a generation adapter changes the scores)."""
    if not rerank_top:
        return {}
    from genembed.retrieval.kv_source import generation_weights

    return {"rerank_weights": generation_weights(model)["adapter"]}

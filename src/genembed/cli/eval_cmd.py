"""``genembed eval``: score a model on task folders; JSON + markdown tables (+ score-vs-K plot for sweeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from genembed.encoders.defaults import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH

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
    prompt_format: PromptFormatOpt = None,
    max_length: Annotated[
        int | None,
        typer.Option("--max-length", min=1, help=f"tokens per prompt (default: the model's, {DEFAULT_MAX_LENGTH})"),
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="texts per forward pass")] = DEFAULT_BATCH_SIZE,
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
    out: Annotated[Path, out_option("results JSON to write (also writes .md, and _scaling.png)")] = Path(
        "results.json"
    ),
    cache_file: Annotated[
        Path | None,
        typer.Option("--cache-file", help="embedding cache file (default ~/.cache/genembed/embeddings.sqlite)"),
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
    from genembed.eval import EmbeddingCache, GenembedEncoder, TaskFormatError, evaluate, find_task_dirs, load_task

    try:  # validate tasks and settings before loading the model
        tasks = [load_task(p, limit=limit) for p in find_task_dirs(list(task_dirs))]
    except (TaskFormatError, ValueError) as exc:
        fail(str(exc))
    loaded = load_model(model, adapter, dtype, center, device, generator)
    # the model's own settings (model.save records them) unless an option says otherwise
    own = model_settings(loaded, method=method, attention=attention, prompt_format=prompt_format, max_length=max_length)
    if steps is None and own.rules.uses_steps and not own.adaptive:
        steps = str(own.steps)
    used = _published_instructions(loaded, tasks) if not task_instructions else None
    if used is not None:
        tasks, used = used
    try:
        encoder = GenembedEncoder(
            loaded,
            method=own.method,
            steps=steps,
            attention=own.attention,
            prompt_format=own.prompt_format,
            max_length=own.max_length,
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
            config={
                "adapter_path": adapter,
                "model_arg": model,
                **_reranker(loaded, rerank_top),
                **({"published_instructions": used} if used is not None else {}),
            },
            cluster_starts=cluster_starts,
        )
    except DamagedFileError as exc:
        fail(str(exc))
    mean = report.mean_scores()[-1]
    typer.echo(f"mean {mean:.2f} over {len(report.tasks)} tasks in {report.seconds:.1f}s -> {out}")


def _published_instructions(loaded: object, tasks: list) -> tuple[list, dict] | None:
    """For a published checkpoint: the tasks with its authors' instructions and what each task now uses."""
    from genembed.eval.published_instructions import with_published_instructions
    from genembed.models.published import published_for

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


def _reranker(model: object, rerank_top: int | None) -> dict[str, str]:
    """The weights that rerank (recorded in the report: a generation adapter changes the scores)."""
    if not rerank_top:
        return {}
    from genembed.retrieval.kv_source import generation_weights

    return {"rerank_weights": generation_weights(model)["adapter"]}

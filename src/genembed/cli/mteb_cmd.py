"""``genembed mteb``: run MTEB (mteb 2.x) on a model; a published checkpoint as its authors do.

    genembed mteb --model GritLM/GritLM-7B                  # its authors' benchmark, instructions, K
    genembed mteb --model Roytsai27/GIRCSE-QWEN7B --tasks STSBenchmark,SciFact

Needs the ``mteb`` extra and internet for the datasets (mteb downloads and caches them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from genembed.encoders.defaults import DEFAULT_BATCH_SIZE

from ._common import AdapterOpt, DeviceOpt, DtypeOpt, ModelOpt, load_model, out_option


def mteb_eval(
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    benchmark: Annotated[
        str | None,
        typer.Option(
            "--benchmark",
            help='an mteb benchmark, e.g. "MTEB(eng, v2)" (default: the one a published model was reported on)',
        ),
    ] = None,
    tasks: Annotated[
        str | None, typer.Option("--tasks", help="comma-separated MTEB task names (instead of a benchmark)")
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="texts per forward pass")] = DEFAULT_BATCH_SIZE,
    out: Annotated[Path, out_option("folder mteb writes its results to")] = Path("mteb-results"),
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
) -> None:
    """Score a model on MTEB tasks. A published checkpoint (`genembed models`) runs with its authors'
    per-task instructions, K and normalisation on the benchmark they report, so that one command
    reproduces the paper setting."""
    try:
        import mteb

        from genembed.eval.mteb_model import GenembedMTEBModel
    except ImportError as exc:
        _fail(f'`genembed mteb` needs mteb: pip install "genembed[mteb]" ({exc})')
    from genembed.models.published import published_for, published_model

    entry = published_model(model)
    name = benchmark or (entry.benchmark if entry and not tasks else None)
    if bool(name) == bool(tasks):
        _fail("give --tasks or --benchmark (a published model defaults to its authors' benchmark)")
    try:
        selected = list(mteb.get_benchmark(name).tasks) if name else list(mteb.get_tasks(tasks=tasks.split(",")))
    except (KeyError, ValueError) as exc:
        _fail(str(exc))
    loaded = load_model(model, adapter, dtype, device=device)
    encoder = GenembedMTEBModel(model=loaded, batch_size=batch_size)
    entry = published_for(loaded)
    settings = encoder.encode_settings
    from genembed.encoders.methods import method_rules

    keys = (
        ("method", "steps", "prompt_format")
        if method_rules(settings["method"]).uses_steps
        else ("method", "prompt_format")
    )
    how = " ".join(f"{key}={settings[key]}" for key in keys)
    instructions = f"{entry.id}'s own instructions" if entry else "mteb's task instructions"
    typer.echo(f"{len(selected)} tasks ({name or 'by name'}) · {loaded.name} · {how} · {instructions}")
    result = mteb.evaluate(encoder, selected, cache=mteb.ResultCache(out))
    scores = [(task.task_name, task.get_score() * 100) for task in result.task_results]
    for task_name, score in scores:
        typer.echo(f"{task_name:<40} {score:6.2f}")
    if scores:
        typer.echo(f"mean {sum(s for _, s in scores) / len(scores):.2f} over {len(scores)} tasks -> {out}")


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)

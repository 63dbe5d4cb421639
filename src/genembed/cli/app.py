"""The ``genembed`` command: a thin typer layer over the library. One file per subcommand."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from . import (
    ask_cmd,
    chat_cmd,
    demo,
    encode_cmd,
    eval_cmd,
    gen_data_cmd,
    index_cmd,
    index_store_cmd,
    inspect_cmd,
    mine_cmd,
    models_cmd,
    mteb_cmd,
    serve_cmd,
    targets_cmd,
    teacher_cmd,
    train_cmd,
)
from ._added_options import with_threads
from ._help import FlagHelpGroup
from ._spellings import command_class

app = typer.Typer(
    name="genembed",
    help="Generative text embeddings: GIRCSE soft-token refinement and GRIT one-model embedding + generation.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    cls=FlagHelpGroup,
)


def _print_version(value: bool) -> None:
    if value:
        from genembed import __version__

        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_print_version, is_eager=True, help="print the genembed version and exit"),
    ] = None,
) -> None:
    """Generative text embeddings: GIRCSE soft-token refinement and GRIT one-model embedding + generation."""


def _add(name: str, function: Any, group: typer.Typer = app, *, torch: bool = True) -> None:
    """Register ``function`` as ``name``, still accepting the command's old option spellings; a command
    that runs torch (``torch``) gains ``--threads``."""
    group.command(name, cls=command_class(name))(with_threads(function) if torch else function)


_add("demo", demo.demo)
_add("models", models_cmd.models, torch=False)
_add("inspect", inspect_cmd.inspect)
_add("encode", encode_cmd.encode)
_add("chat", chat_cmd.chat)
_add("serve", serve_cmd.serve)
_add("eval", eval_cmd.eval_tasks)
_add("mteb", mteb_cmd.mteb_eval)
index_cmd.index_app.command("import", cls=command_class("index import"))(index_store_cmd.import_encoded)
index_cmd.index_app.command("delete", cls=command_class("index delete"))(index_store_cmd.delete)
app.add_typer(index_cmd.index_app, name="index")
_add("ask", ask_cmd.ask)
_add("train", train_cmd.train)
_add("export-checkpoint", train_cmd.export_checkpoint, torch=False)
_add("make-gen-data", gen_data_cmd.make_gen_data)
_add("mine-negatives", mine_cmd.mine_negatives)
_add("install-teacher", teacher_cmd.install_teacher, torch=False)
_add("teacher-targets", targets_cmd.teacher_targets)


@app.command("version", cls=command_class("version"))
def version() -> None:
    """Print the genembed version."""
    from genembed import __version__

    typer.echo(__version__)


def main() -> None:
    app()


if __name__ == "__main__":  # `python -m genembed.cli.app ...`, e.g. under accelerate launch / torchrun
    main()

"""The ``genembed`` command: a thin typer layer over the library. One file per subcommand."""

from __future__ import annotations

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
    serve_cmd,
    targets_cmd,
    teacher_cmd,
    train_cmd,
)

app = typer.Typer(
    name="genembed",
    help="Generative text embeddings: GIRCSE soft-token refinement and GRIT one-model embedding + generation.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.command("demo")(demo.demo)
app.command("inspect")(inspect_cmd.inspect)
app.command("encode")(encode_cmd.encode)
app.command("chat")(chat_cmd.chat)
app.command("serve")(serve_cmd.serve)
app.command("eval")(eval_cmd.eval_tasks)
index_cmd.index_app.command("import")(index_store_cmd.import_encoded)
index_cmd.index_app.command("delete")(index_store_cmd.delete)
app.add_typer(index_cmd.index_app, name="index")
app.command("ask")(ask_cmd.ask)
app.command("train")(train_cmd.train)
app.command("export-checkpoint")(train_cmd.export_checkpoint)
app.command("make-gen-data")(gen_data_cmd.make_gen_data)
app.command("mine-negatives")(mine_cmd.mine_negatives)
app.command("install-teacher")(teacher_cmd.install_teacher)
app.command("teacher-targets")(targets_cmd.teacher_targets)


@app.command("version")
def version() -> None:
    """Print the genembed version."""
    from genembed import __version__

    typer.echo(__version__)


def main() -> None:
    app()


if __name__ == "__main__":  # `python -m genembed.cli.app ...`, e.g. under accelerate launch / torchrun
    main()

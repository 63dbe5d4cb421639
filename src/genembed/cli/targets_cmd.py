"""``genembed teacher-targets FILES --teacher NAME``: cache a teacher's embedding of every distinct training text.

    genembed teacher-targets ../shared/data/train/*.jsonl --teacher all-mpnet-base-v2
    genembed teacher-targets ../shared/data/train/*.jsonl --teacher all-mpnet-base-v2 --count   # only count

Resumable: run it again after an interruption and it embeds only what is missing. Training reads the
store through ``loss.distill_targets`` (the ``--out`` root).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from genembed.encoders.defaults import DEFAULT_BATCH_SIZE

from ._common import DeviceOpt, out_option


def teacher_targets(
    files: Annotated[list[Path], typer.Argument(help="contrastive JSONL or texts ({'text'}) files")],
    teacher: Annotated[str, typer.Option("--teacher", help="a teacher name or a sentence-transformers folder")] = (
        "all-mpnet-base-v2"
    ),
    out: Annotated[
        Path | None, out_option("targets root to write to (default <genembed cache>/teacher-targets)")
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="texts per forward pass of the teacher")
    ] = DEFAULT_BATCH_SIZE,
    chunk_size: Annotated[int, typer.Option("--chunk-size", min=1, help="texts per saved chunk")] = 2048,
    device: DeviceOpt = "auto",
    max_length: Annotated[
        int | None, typer.Option("--max-length", min=1, help="tokens per text the teacher reads (default: its own)")
    ] = None,
    count: Annotated[bool, typer.Option("--count", help="only count the texts and those still missing")] = False,
) -> None:
    """Embed every distinct text of FILES with the teacher (no instructions) and store it on disk."""
    from genembed.training.config import ConfigError
    from genembed.training.data import DataError
    from genembed.training.teacher_targets import (
        MissingTargetsError,
        TargetStore,
        build_targets,
        default_root,
        training_texts,
    )

    root = out or default_root()
    try:
        texts = training_texts(files, teacher)
        if count:
            try:
                missing = len(TargetStore.open(root, teacher).missing(texts))
            except MissingTargetsError:
                missing = len(texts)
            typer.echo(f"{len(texts)} distinct texts, {missing} without a cached target of {teacher} in {root}")
            return
        store = build_targets(
            texts, root, teacher, batch_size=batch_size, chunk_size=chunk_size, device=device, max_length=max_length
        )
    except (ConfigError, DataError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"{len(store.index)} targets of {teacher} in {store.folder}")

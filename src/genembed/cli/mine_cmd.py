"""``genembed mine-negatives IN.jsonl [IN2.jsonl ...] --out OUT.jsonl``: hard negatives mined by a model.

genembed mine-negatives ../shared/data/train/wikiqa.jsonl --out mined/wikiqa.jsonl --adapter runs/stage1/final
genembed mine-negatives ../shared/data/train/reviews.jsonl --symmetric --out mined/reviews.jsonl
genembed mine-negatives ../shared/data/train/medquad.jsonl --out mined/medquad.jsonl --teacher all-mpnet-base-v2

Rerun the same command after an interruption: the embeddings already in ``OUT.jsonl.mining/`` are kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from genembed.encoders.defaults import DEFAULT_BATCH_SIZE

from ._common import (
    AdapterOpt,
    CenterOpt,
    DeviceOpt,
    DtypeOpt,
    MethodOpt,
    ModelOpt,
    QuietOpt,
    StepsOpt,
    fail,
    load_model,
    model_settings,
    out_option,
    top_option,
)

if TYPE_CHECKING:
    from genembed.training.teacher_targets import TargetStore


def mine_negatives(
    inputs: Annotated[list[Path], typer.Argument(metavar="IN.jsonl...", help="contrastive training files")],
    out: Annotated[Path, out_option("JSONL to write: the rows with mined negatives")],
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    center: CenterOpt = None,
    method: MethodOpt = None,
    steps: StepsOpt = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="texts per forward pass")] = DEFAULT_BATCH_SIZE,
    symmetric: Annotated[
        bool, typer.Option("--symmetric", help="documents carry the row's instruction (a symmetric training file)")
    ] = False,
    doc_instruction: Annotated[
        str, typer.Option("--doc-instruction", help="instruction on documents otherwise (data.doc_instruction)")
    ] = "",
    top: Annotated[int, top_option("the N best candidates retrieved per query")] = 30,
    num_negatives: Annotated[int, typer.Option("--num-negatives", min=0, help="mined negatives per row")] = 3,
    margin: Annotated[
        float, typer.Option("--margin", min=0.0, help="drop candidates above margin x the positive's score (0: off)")
    ] = 0.95,
    skip_top: Annotated[int, typer.Option("--skip-top", min=0, help="ranks skipped before filtering")] = 0,
    keep_original: Annotated[
        bool, typer.Option("--keep-original/--no-keep-original", help="keep the rows' own negatives first")
    ] = True,
    query_max_length: Annotated[
        int | None, typer.Option("--query-max-length", min=1, help="tokens per query (default: mining's)")
    ] = None,
    doc_max_length: Annotated[
        int | None, typer.Option("--doc-max-length", min=1, help="tokens per document (default: mining's)")
    ] = None,
    shard_size: Annotated[int, typer.Option("--shard-size", min=1, help="texts per cached embedding shard")] = 1024,
    keep_cache: Annotated[bool, typer.Option("--keep-cache", help="keep OUT.mining/ after writing OUT")] = False,
    teacher: Annotated[
        str | None,
        typer.Option(
            "--teacher",
            help="rank with this distillation teacher's cached targets instead of the model: a teacher name or a "
            "sentence-transformers folder (texts the store lacks are computed and kept)",
        ),
    ] = None,
    targets: Annotated[
        Path | None, typer.Option("--targets", help="with --teacher: the targets root (default: the training one)")
    ] = None,
    teacher_max_length: Annotated[
        int | None,
        typer.Option("--teacher-max-length", min=1, help="with --teacher: tokens it reads (default: the store's)"),
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """Set each row's negatives to the hardest texts of the files' pool that the model ranks (docs/training.md)."""
    from genembed._files import DamagedFileError
    from genembed.training.mining import mine_negatives as mine

    for path in inputs:
        if not path.is_file():
            fail(f"input file not found: {path}")
    from genembed.encoders.settings import RunOptions

    store, loaded, options = None, None, None
    if teacher is not None:
        if model is not None or adapter is not None:
            fail("--teacher ranks with the teacher's targets: drop --model and --adapter")
        model_only = {
            "--dtype": dtype != "auto",
            "--center/--no-center": center is not None,
            "--method": method is not None,
            "--steps": steps is not None,
            "--query-max-length": query_max_length is not None,
            "--doc-max-length": doc_max_length is not None,
        }
        if refused := [name for name, set_ in model_only.items() if set_]:
            fail(
                f"{', '.join(refused)} set how the model embeds, and --teacher ranks with the teacher's targets: "
                "drop them (--teacher-max-length sets the tokens the teacher reads)"
            )
        store = _teacher_store(inputs, teacher, targets, teacher_max_length, device, batch_size, quiet)
    else:
        loaded = load_model(model, adapter, dtype, center, device)
        options = model_settings(loaded, method=method, steps=steps)
    given = {"query_max_length": query_max_length, "doc_max_length": doc_max_length}
    lengths = {key: value for key, value in given.items() if value is not None}  # else the library's defaults
    try:
        result = mine(
            loaded,
            inputs,
            out,
            symmetric=symmetric,
            doc_instruction=doc_instruction,
            options=options,
            run=RunOptions(batch_size=batch_size),
            **lengths,
            depth=top,
            num_negatives=num_negatives,
            margin=margin,
            skip_top=skip_top,
            keep_original=keep_original,
            shard_size=shard_size,
            keep_cache=keep_cache,
            show_progress_bar=not quiet,
            teacher=store,
        )
    except (ValueError, DamagedFileError) as exc:  # DataError is a ValueError
        fail(str(exc))
    removed = ", ".join(f"{k} {v}" for k, v in result.removed.items() if v)
    typer.echo(
        f"{result.rows} rows, pool {result.pool} texts: {result.mined} negatives mined "
        f"({result.short_rows} rows got fewer than {num_negatives}); removed: {removed or 'none'} -> {result.out}"
    )


def _teacher_store(
    inputs: list[Path],
    teacher: str,
    targets: Path | None,
    max_length: int | None,
    device: str,
    batch_size: int,
    quiet: bool,
) -> TargetStore:
    """The teacher's target store holding every text of ``inputs`` (built or completed, chunk by chunk)."""
    from genembed._files import DamagedFileError
    from genembed.training.teacher_targets import build_targets, default_root, stored_max_length, training_texts
    from genembed.training.teachers import TeacherError

    root = targets or default_root()
    try:
        if max_length is None:  # reuse the length of the store training reads, where there is one
            max_length = stored_max_length(root, teacher)
        return build_targets(
            training_texts(inputs, teacher),
            root,
            teacher,
            batch_size=batch_size,
            device=device,
            max_length=max_length,
            progress=not quiet,
        )
    except (ValueError, TeacherError, DamagedFileError) as exc:  # ConfigError and DataError are ValueErrors
        fail(str(exc))

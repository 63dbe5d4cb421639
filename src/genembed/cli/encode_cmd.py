"""``genembed encode INPUT.jsonl --out DIR``: embed a corpus of any size into ``.npy`` shards with ids.

Streams the input, resumes after an interruption (rerun the same command), shows progress with an ETA,
and runs data-parallel when launched with several processes, e.g.
``accelerate launch --num_processes 4 -m genembed.cli.app encode corpus.jsonl --out emb/``
or ``torchrun --nproc-per-node 4 -m genembed.cli.app encode ...``: each rank encodes every 4th shard.
"""

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
    InstructionOpt,
    MethodOpt,
    ModelOpt,
    PromptFormatOpt,
    QuietOpt,
    StepsOpt,
    check_settings,
    fail,
    load_model,
    model_settings,
    out_option,
)


def encode(
    input_path: Annotated[Path, typer.Argument(metavar="INPUT.jsonl", help="JSON lines: {id, text[, title]}")],
    out: Annotated[Path, out_option("folder to write the shards to (rerun to resume)")],
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    dtype: DtypeOpt = "auto",
    center: CenterOpt = None,
    method: MethodOpt = None,
    steps: StepsOpt = None,
    instruction: InstructionOpt = "",
    attention: AttentionOpt = None,
    prompt_format: PromptFormatOpt = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="texts per forward pass")] = DEFAULT_BATCH_SIZE,
    max_length: Annotated[
        int | None,
        typer.Option(
            "--max-length",
            min=1,
            help=f"tokens per text, cut from the end (default: the model's, {DEFAULT_MAX_LENGTH})",
        ),
    ] = None,
    shard_size: Annotated[int, typer.Option("--shard-size", min=1, help="records per output shard")] = 4096,
    text_field: Annotated[str, typer.Option("--text-field", help="field holding the text")] = "text",
    id_field: Annotated[str, typer.Option("--id-field", help="field holding the id (else the record number)")] = "id",
    title_field: Annotated[
        str, typer.Option("--title-field", help="field prepended to the text when non-empty ('' for none)")
    ] = "title",
    normalize: Annotated[bool, typer.Option("--normalize/--no-normalize", help="L2-normalize")] = True,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="delete existing shards instead of resuming")] = False,
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Embed every record of INPUT.jsonl into OUT/shard-*.npy (+ ids); see docs/performance.md."""
    from genembed._files import DamagedFileError
    from genembed.encoders.corpus import encode_corpus
    from genembed.encoders.output import OutputPipeline
    from genembed.encoders.settings import RunOptions

    if not input_path.is_file():
        fail(f"input file not found: {input_path}")
    given = {"method": method, "steps": steps, "attention": attention, "prompt_format": prompt_format}
    given["max_length"] = max_length
    check_settings(**given)
    loaded = load_model(model, adapter, dtype, center, device)  # auto: cuda:LOCAL_RANK where there is CUDA
    settings = model_settings(loaded, **given)
    try:
        result = encode_corpus(
            loaded.backbone,
            input_path,
            out,
            settings,
            instruction=instruction,
            output=OutputPipeline.of(loaded, normalize=normalize),
            run=RunOptions(batch_size=batch_size),
            shard_size=shard_size,
            text_field=text_field,
            id_field=id_field,
            title_field=title_field or None,
            model_name=loaded.name,
            overwrite=overwrite,
            show_progress_bar=not quiet,
        )
    except (ValueError, DamagedFileError) as exc:
        fail(str(exc))
    if result.rank == 0 and not quiet:
        typer.echo(
            f"{result.records} records in {result.shards} shards at {result.out_dir} "
            f"(this rank: {len(result.encoded_shards)} encoded, {len(result.skipped_shards)} already there; "
            f"{result.world_size} process{'es' if result.world_size > 1 else ''})"
        )

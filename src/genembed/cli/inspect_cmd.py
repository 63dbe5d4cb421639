"""``genembed inspect``: the top vocabulary tokens of each GIRCSE soft token."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import (
    AdapterOpt,
    DeviceOpt,
    DtypeOpt,
    InstructionOpt,
    MaxLengthOpt,
    ModelOpt,
    StepsOpt,
    load_model,
    top_option,
)


def inspect(
    text: Annotated[str, typer.Argument(help="the text to embed")],
    instruction: InstructionOpt = "",
    steps: StepsOpt = None,
    top: Annotated[int, top_option("the N best (most probable) tokens shown per step")] = 8,
    max_length: MaxLengthOpt = None,
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
) -> None:
    """Show the "embedding language": per step k, the most probable tokens of the soft token p_k."""
    from rich.console import Console
    from rich.table import Table

    loaded = load_model(model, adapter, dtype, device=device)
    table = Table(title=f"soft tokens of {text!r}" + (f" | {instruction}" if instruction else ""))
    table.add_column("k", justify="right")
    table.add_column(f"top {top} tokens of p_k (probability)")
    for step in loaded.inspect(text, instruction=instruction, steps=steps, top=top, max_length=max_length):
        table.add_row(str(step.step), "  ".join(f"{tok!r} {p:.2f}" for tok, p in step.tokens))
    Console(width=160).print(table)

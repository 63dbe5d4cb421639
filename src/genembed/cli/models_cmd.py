"""``genembed models``: the published checkpoints and embedder families genembed runs with their authors'
settings, and the bundled default."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer


def models(
    as_json: Annotated[bool, typer.Option("--json", help="print the table as JSON (every field)")] = False,
) -> None:
    """List the models `genembed.load(ID)` / `--model ID` know: id, method, size and the memory their
    weights need per dtype (estimates from parameter counts), and whether they are in the local HF cache."""
    from genembed.models.published import PUBLISHED

    rows = [_bundled()] + [{**entry.describe(), "cached": _cached(entry)} for entry in PUBLISHED.values()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="models genembed runs as their authors do (weights only; activations come on top)")
    numbers = ("params", "dim", "bf16", "fp32", "8-bit", "4-bit")
    table.add_column("id", no_wrap=True, min_width=max(len(row["id"]) for row in rows))  # ids stay whole
    for column in ("what", "method", "params", "dim", "bf16", "fp32", "8-bit", "4-bit", "cached"):
        table.add_column(column, justify="right" if column in numbers else "left")
    for row in rows:
        gb = row["weights_gb"]
        table.add_row(
            row["id"],
            row["summary"],
            row["method"] + (f" K={row['steps']}" if row.get("steps") else ""),
            f"{row['params'] / 1e9:.2f}B" if row["params"] else "?",
            str(row.get("dim") or "?"),
            *(f"{gb[k]:.1f} GB" if gb.get(k) is not None else "-" for k in ("bfloat16", "float32", "8bit", "4bit")),
            row["cached"],
        )
    Console(width=200).print(table)
    typer.echo(
        'Load one with genembed.load("ID"), or --model ID on any command; see docs/published-models.md and '
        "docs/families.md (each family's exact prompt, pooling and attention)."
    )


def _cached(entry: Any) -> str:
    """``yes``/``no``/``adapter only``: whether the checkpoint (and an adapter's base) is in the HF cache."""
    from genembed.backbone.hub import cached_snapshot

    here = cached_snapshot(entry.id) is not None
    if entry.base is None or not here:
        return "yes" if here else "no"
    return "yes" if cached_snapshot(entry.base) is not None else "adapter only"


def _bundled() -> dict[str, Any]:
    """The bundled default's row: parameters read from its GGUF file (never downloaded)."""
    from genembed.backbone.default_model import DEFAULT_MODEL_NAME, MissingModelError, default_gguf_path
    from genembed.backbone.memory import BYTES_PER_PARAM
    from genembed.encoders.settings import EmbedSettings
    from genembed.models.adapters import DEFAULT_ADAPTER

    defaults = EmbedSettings()

    try:
        import gguf

        reader = gguf.GGUFReader(default_gguf_path())
        params = sum(int(t.n_elements) for t in reader.tensors)
        width = reader.fields["llama.embedding_length"]
        dim = int(width.parts[width.data[0]][0])
    except (ImportError, MissingModelError, KeyError):
        params, dim = 0, None
    return {
        "id": f"{DEFAULT_MODEL_NAME} (default)",
        "summary": f"bundled, offline; the shipped adapter {DEFAULT_ADAPTER.name} (joint: GIRCSE embeddings, chat)",
        "method": defaults.method,
        "steps": defaults.steps,
        "params": params,
        "dim": dim,
        "weights_gb": {dtype: round(params * n / 1e9, 2) if params else None for dtype, n in BYTES_PER_PARAM.items()},
        "cached": "bundled",
    }

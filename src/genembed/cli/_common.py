"""Options and helpers shared by the subcommands."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from genembed.encoders.methods import METHOD_RULES, METHODS

# help texts built from the method table (genembed.encoders.methods)
METHODS_HELP = f"{', '.join(METHODS[:-1])} or {METHODS[-1]}"
FIXED_ATTENTION_HELP = ", ".join(
    f"{r.name}: always {r.fixed_attention}" for r in METHOD_RULES.values() if r.fixed_attention
)

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="HF folder, .gguf file or hub id (downloaded unless HF_HUB_OFFLINE=1; `genembed models` lists the "
        "published ones; default: bundled SmolLM2)",
    ),
]
AdapterOpt = Annotated[
    str | None,
    typer.Option(
        "--adapter",
        "-a",
        help="LoRA adapter folder, shipped adapter name (gircse, joint) or hub id; 'none': the raw backbone "
        "(default: gircse for the bundled model, a published model's own adapter)",
    ),
]
GeneratorOpt = Annotated[
    str | None,
    typer.Option(
        "--generator",
        help="weights that generate (chat, rerank, RAG answers, stored KV states): 'base' (the backbone's), "
        "'adapter' (the embedding adapter), or a second LoRA adapter folder or shipped name used for generation "
        "only (default: the adapter if it was trained for generation, else the backbone's)",
    ),
]
CenterOpt = Annotated[
    bool | None,
    typer.Option(
        "--center/--no-center",
        help="subtract each instruction's centre from the embeddings (default: on with the shipped adapter)",
    ),
]
DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype", help="auto (bfloat16 where the CPU/GPU computes it natively, else float32), float32, bfloat16"
    ),
]


DeviceOpt = Annotated[
    str,
    typer.Option(
        "--device", help="auto (CUDA, then Apple MPS, then the CPU), or a torch device such as cpu, cuda:0, mps"
    ),
]


def pick_generator(generator: str | None, generation_adapter: bool | None) -> str | None:
    """``--generator``, or the older ``--generation-adapter/--no-generation-adapter`` spelled as one."""
    if generation_adapter is None:
        return generator
    if generator is not None:
        raise typer.BadParameter("give --generator or --generation-adapter/--no-generation-adapter, not both")
    return "adapter" if generation_adapter else "base"


def load_model(
    model: str | None,
    adapter: str | None,
    dtype: str = "auto",
    center: bool | None = None,
    device: str = "auto",
    generator: str | None = None,
) -> Any:
    """Load a model, turning a missing model or a bad setting into a clean CLI error instead of a traceback."""
    import genembed
    from genembed._files import DamagedFileError
    from genembed.backbone import MissingModelError
    from genembed.backbone.memory import InsufficientMemoryError
    from genembed.generation.adapters import generator_choice

    try:
        chosen = False if adapter is not None and adapter.lower() == "none" else adapter
        return genembed.load(
            model,
            adapter=chosen,
            dtype=dtype,
            device=device,
            center=center,
            generation_adapter=generator_choice(generator),
        )
    except (MissingModelError, DamagedFileError, InsufficientMemoryError, ImportError, ValueError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc


def load_index_model(
    ref: dict[str, Any], model: str | None, adapter: str | None, generator: str | None, dtype: str, device: str
) -> Any:
    """The model an index was built with (its manifest's ``model.ref``), unless the options name another."""
    return load_model(
        model or ref.get("model"),
        adapter or ref.get("adapter"),
        dtype,
        device=device,
        generator=generator or ref.get("generator"),
    )

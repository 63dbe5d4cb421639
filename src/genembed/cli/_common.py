"""Options and helpers shared by the subcommands."""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer

from genembed.encoders.defaults import DEFAULT_MAX_LENGTH
from genembed.encoders.methods import METHOD_RULES, METHODS
from genembed.encoders.prompts import PROMPT_FORMATS

# help texts built from the method table (genembed.encoders.methods)
METHODS_HELP = f"{', '.join(METHODS[:-1])} or {METHODS[-1]}"
FIXED_ATTENTION_HELP = ", ".join(
    f"{r.name}: always {r.fixed_attention}" for r in METHOD_RULES.values() if r.fixed_attention
)

PromptFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--prompt-format",
        help=f"{', '.join(PROMPT_FORMATS)} (all but plain and chat: published models' own, docs/families.md; "
        "default: the model's, else chat for gircse, plain otherwise)",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="HF folder, .gguf file or hub id (downloaded unless HF_HUB_OFFLINE=1; `genembed models` lists the "
        "published ones; default: bundled SmolLM2)",
    ),
]
_ADAPTER_HELP = (
    "LoRA adapter folder, shipped adapter name (joint, the default; gircse, its former name) or hub id; "
    "'none': the raw backbone"
)


def adapter_option(default: str = "joint") -> Any:
    """``--adapter``/``-a`` whose help states the command's real default."""
    return typer.Option("--adapter", "-a", help=f"{_ADAPTER_HELP} (default: {default})")


AdapterOpt = Annotated[str | None, adapter_option()]
AsPublishedOpt = Annotated[
    str | None,
    typer.Option(
        "--as-published",
        help="run a local --model folder with this published model's contract (a hub id of `genembed models`: "
        "its prompt format, pooling, attention and query instruction)",
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
        help="subtract each instruction's center from the embeddings (default: the model's own; on with the "
        "shipped adapters and any adapter that stores centers)",
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

# How a model embeds. None: the model's own (what model.save recorded; GenerativeEmbedder.embed_settings).
MethodOpt = Annotated[str | None, typer.Option("--method", help=f"{METHODS_HELP} (default: the model's own)")]
StepsOpt = Annotated[
    int | None, typer.Option("--steps", "-k", min=1, help="GIRCSE soft tokens K (default: the model's own)")
]
AttentionOpt = Annotated[
    str | None,
    typer.Option("--attention", help=f"causal or bidirectional (default: the model's own; {FIXED_ATTENTION_HELP})"),
]
MaxLengthOpt = Annotated[
    int | None,
    typer.Option(
        "--max-length", min=1, help=f"tokens per prompt, cut from the end (default: the model's, {DEFAULT_MAX_LENGTH})"
    ),
]
InstructionOpt = Annotated[str, typer.Option("--instruction", "-i", help="instruction steering the embedding")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="no progress bars")]


def out_option(help: str) -> Any:
    """``--out``/``-o``: what a command writes."""
    return typer.Option("--out", "-o", help=help)


def top_option(help: str) -> Any:
    """``--top``: how many of the best results a command shows or uses (one name in every command)."""
    return typer.Option("--top", min=1, help=help)


def rerank_top_option(help: str) -> Any:
    """``--rerank-top``: how many of the best results are re-ranked generatively."""
    return typer.Option("--rerank-top", min=1, help=help)


def fail(message: str) -> NoReturn:
    """Report ``message`` as a one-line error and exit with status 2."""
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)


def check_settings(**given: Any) -> None:
    """Check the embedding settings given on the command line (None: not given) before a model loads."""
    from genembed.encoders.settings import EmbedSettings

    try:
        EmbedSettings.build(**{key: value for key, value in given.items() if value is not None})
    except ValueError as exc:
        fail(str(exc))


def model_settings(loaded: Any, **given: Any) -> Any:
    """The loaded model's embedding settings with the options given instead (None: the model's own), as
    :meth:`genembed.GenerativeEmbedder.embed_settings` resolves them; a bad one is a clean CLI error."""
    try:
        return loaded.embed_settings(**given)
    except ValueError as exc:
        fail(str(exc))


def load_model(
    model: str | None,
    adapter: str | None,
    dtype: str = "auto",
    center: bool | None = None,
    device: str = "auto",
    generator: str | None = None,
    as_published: str | None = None,
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
            **({"as_published": as_published} if as_published is not None else {}),
        )
    except (MissingModelError, DamagedFileError, InsufficientMemoryError, ImportError, ValueError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc


def say_generation_weights(loaded: Any) -> None:
    """Name the weights that generate on stderr, with a note when they are the raw backbone's while an
    adapter is loaded."""
    from genembed.generation.adapters import base_weights_note

    typer.secho(f"generating with {loaded.generation_weights}", dim=True, err=True)
    note = base_weights_note(loaded)
    if note is not None:
        typer.secho(note, fg="yellow", err=True)


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

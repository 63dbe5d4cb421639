"""The decoding options of the commands that generate (``chat``, ``ask``), declared once.

Each option is a field of :class:`~genembed.generation.sampling.SamplingOptions` spelled with dashes
(``repetition_penalty`` is ``--repetition-penalty``), as the chat route takes the same names as JSON
fields. :func:`decoding_options` adds them all to a typer command and hands the command one
``sampling`` built from them; an option left out keeps the command's default, which its help shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Annotated, Any

import typer

from genembed.generation.sampling import SamplingOptions

from ._added_options import add_options

__all__ = ["decoding_option", "decoding_options"]

# SamplingOptions field -> (type, option names, typer.Option keywords, help)
_OPTIONS: dict[str, tuple[Any, tuple[str, ...], dict[str, Any], str]] = {
    "max_new_tokens": (int, ("--max-new-tokens",), {"min": 1}, "the most tokens per {what}"),
    "temperature": (float, ("--temperature", "-t"), {"min": 0.0}, "0 = greedy"),
    "top_p": (float, ("--top-p",), {"min": 0.0, "max": 1.0}, "nucleus sampling threshold (with --temperature > 0)"),
    "seed": (int, ("--seed",), {}, "seed for sampling"),
    "repetition_penalty": (
        float,
        ("--repetition-penalty",),
        {"min": 0.01},
        "divide the logits of tokens already in the {what} by this (1: off)",
    ),
    "no_repeat_ngram_size": (
        int,
        ("--no-repeat-ngram-size",),
        {"min": 0},
        "no n-gram of this size twice in the {what} (0: off)",
    ),
    "frequency_penalty": (
        float,
        ("--frequency-penalty",),
        {"min": -2.0, "max": 2.0},
        "OpenAI's: subtract this from a token's logit per time it is already in the {what}",
    ),
    "presence_penalty": (
        float,
        ("--presence-penalty",),
        {"min": -2.0, "max": 2.0},
        "OpenAI's: subtract this from the logit of every token already in the {what}",
    ),
    "stop": (list[str], ("--stop",), {"metavar": "<str>"}, "a string that ends the {what} (repeatable)"),
}
_PANEL = "Decoding"


def decoding_option(name: str, base: SamplingOptions | None = None, what: str = "reply") -> Any:
    """The ``Annotated`` type of the option for ``SamplingOptions`` field ``name``, defaulting to None
    (``base``'s value, which the help states; None: the library's defaults)."""
    kind, names, limits, help = _OPTIONS[name]
    default = getattr(base or SamplingOptions(), name)
    shown = "" if name == "stop" else f" (default: {default if default is not None else 'none'})"
    option = typer.Option(*names, **limits, help=help.format(what=what) + shown, rich_help_panel=_PANEL)
    return Annotated[kind | None, option]


def decoding_options(base: SamplingOptions | None = None, *, what: str = "reply") -> Callable:
    """Decorate a typer command taking ``sampling``: it gains every decoding option (after its own),
    and ``sampling`` is ``base`` (None: the library's defaults) changed by the options given.

    Raises:
        typer.BadParameter: (when the command runs) values that ``SamplingOptions`` refuses.
    """
    names = [f.name for f in dataclasses.fields(SamplingOptions) if f.name in _OPTIONS]
    options = {name: decoding_option(name, base, what) for name in names}

    def decorate(command: Callable) -> Callable:
        return add_options(
            command, options, lambda given: {"sampling": sampling_options(base, **given)}, fills=("sampling",)
        )

    return decorate


def sampling_options(base: SamplingOptions | None = None, **values: Any) -> SamplingOptions:
    """``base`` changed by the options given (None, or an empty ``--stop`` list: not given); a bad value
    is a usage error."""
    given = {n: v for n, v in values.items() if v is not None and v != []}
    try:
        return SamplingOptions.build(base, **given)
    except (TypeError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None

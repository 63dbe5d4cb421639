"""Options a command gains from a decorator instead of declaring them: the decoding options of the
commands that generate (:mod:`._decoding`) and ``--threads`` of every command that runs torch
(added where ``app.py`` registers them), so each is declared once."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

__all__ = ["ThreadsOpt", "add_options", "with_threads"]

ThreadsOpt = Annotated[
    int | None, typer.Option("--threads", min=1, help="torch CPU threads (default: torch's, one per core)")
]


def add_options(
    command: Callable,
    options: dict[str, Any],
    take: Callable[[dict[str, Any]], dict[str, Any]],
    fills: tuple[str, ...] = (),
) -> Callable:
    """``command`` with keyword options ``options`` (name: ``Annotated`` typer type, default None) after its
    own; when it runs, their values go to ``take``, whose result is passed to ``command`` as keywords
    (``fills``: the command's parameters it sets, which the command line does not show)."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name not in fills]
    added = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=a) for n, a in options.items()
    ]

    @functools.wraps(command)
    def run(**kwargs: Any) -> Any:
        given = {n: kwargs.pop(n) for n in options}
        return command(**kwargs, **take(given))

    run.__signature__ = signature.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in (*kept, *added)}
    return run


def with_threads(command: Callable) -> Callable:
    """``command`` with ``--threads N``: torch computes on N CPU threads (the command need not know)."""

    def take(given: dict[str, Any]) -> dict[str, Any]:
        if given["threads"] is not None:
            import torch

            torch.set_num_threads(given["threads"])
        return {}

    return add_options(command, {"threads": ThreadsOpt}, take)

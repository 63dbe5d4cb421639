"""Old option spellings, still accepted for one release (with a note) after the command line got one
name per concept: ``-k`` is ``--steps`` everywhere, ``--top`` is how many results, ``--rerank-top`` how
many are re-ranked, ``--generator`` chooses the weights that generate.

Each command lists its old spellings (old token: the tokens it stands for now) in :data:`OLD_SPELLINGS`;
:func:`command_class` gives the typer command class that rewrites them before parsing. They are not
declared options, so ``--help`` does not show them and the short options stay one meaning each.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand

__all__ = ["OLD_SPELLINGS", "command_class", "respell"]

_GENERATION_ADAPTER = {
    "--generation-adapter": ("--generator", "adapter"),
    "--no-generation-adapter": ("--generator", "base"),
}

# command (as typed after `genembed`): {old spelling: what it is now}
OLD_SPELLINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "ask": {"--top-k": ("--top",), "-k": ("--top",), "--candidates": ("--rerank-top",)},
    "demo": {"--top-k": ("--top",)},
    "chat": {"-p": ("--prompt",), "-n": ("--max-new-tokens",), **_GENERATION_ADAPTER},
    "serve": dict(_GENERATION_ADAPTER),
    "mine-negatives": {"-n": ("--num-negatives",), "--depth": ("--top",)},
    "eval": {"--cache": ("--cache-file",)},
}


def respell(args: list[str], old: dict[str, tuple[str, ...]]) -> list[str]:
    """``args`` with each old spelling in ``old`` replaced by its new tokens (``--old=V`` and ``-oV`` too),
    noting each on stderr; nothing after ``--`` is touched."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        name, value = arg, None
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
        elif not arg.startswith("--") and len(arg) > 2 and arg[:2] in old:
            name, value = arg[:2], arg[2:]
        if name not in old:
            out.append(arg)
            continue
        new = old[name]
        typer.secho(
            f"note: {name} is an old spelling of {' '.join(new)} and will be removed in the next release",
            fg="yellow",
            err=True,
        )
        out += [*new[:-1], new[-1] + ("" if value is None else f"={value}")]
    return out


def command_class(command: str) -> type[TyperCommand]:
    """The typer command class for ``command`` (e.g. ``"ask"``): a plain one when it has no old spellings."""
    old = OLD_SPELLINGS.get(command)
    if not old:
        return TyperCommand

    class Respelled(TyperCommand):
        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            return super().parse_args(ctx, respell(args, old))

    return Respelled

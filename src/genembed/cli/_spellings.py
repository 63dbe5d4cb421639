"""Old option spellings, still accepted for one release (with a note) after the command line got one
name per concept: ``-k`` is ``--steps`` everywhere, ``--top`` is how many results, ``--rerank-top`` how
many are re-ranked (and it implies reranking), ``--generator`` chooses the weights that generate,
``--kv-cache`` is how ``ask`` reuses KV states and ``--cache-file`` where ``eval`` caches embeddings,
``-p`` is ``--port``, ``--dtype`` the dtype a model computes in (``export-checkpoint --save-dtype`` the
dtype it stores), and ``--max-length`` is the most tokens of one prompt (``serve`` too; queries and
documents get their own with ``--query-max-length``/``--doc-max-length``). ``--chunk-tokens`` stays
apart: the size of the pieces a document is split into for an index, where nothing is cut off.

Each command lists its old spellings (old token: the tokens it stands for now) in :data:`OLD_SPELLINGS`;
an option that did nothing in a command stands for no tokens (it is dropped, with a note).
:func:`command_class` gives the typer command class that rewrites them before parsing. They are not
declared options, so ``--help`` does not show them and the short options stay one meaning each.
"""

from __future__ import annotations

from typing import Any

import typer

from ._help import FlagHelpCommand

__all__ = ["OLD_SPELLINGS", "command_class", "respell"]

_GENERATION_ADAPTER = {
    "--generation-adapter": ("--generator", "adapter"),
    "--no-generation-adapter": ("--generator", "base"),
}

# command (as typed after `genembed`): {old spelling: what it is now}
OLD_SPELLINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "ask": {
        "--top-k": ("--top",),
        "-k": ("--top",),
        "--candidates": ("--rerank-top",),
        "--cache": ("--kv-cache",),
        "--no-repeat-ngram": ("--no-repeat-ngram-size",),  # the name of SamplingOptions and the chat route
    },
    "demo": {"--top-k": ("--top",)},
    # chat does not embed: --center changed nothing there
    "chat": {
        "-p": ("--prompt",),
        "-n": ("--max-new-tokens",),
        "--center": (),
        "--no-center": (),
        **_GENERATION_ADAPTER,
    },
    "serve": {"--max-input-tokens": ("--max-length",), **_GENERATION_ADAPTER},
    "mine-negatives": {"-n": ("--num-negatives",), "--depth": ("--top",)},
    "eval": {"--cache": ("--cache-file",)},
    # --dtype is the compute dtype everywhere else; here it was the storage dtype
    "export-checkpoint": {"--dtype": ("--save-dtype",)},
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
        if not new:  # a flag that had no effect here
            typer.secho(
                f"note: {name} has no effect here and will be removed in the next release", fg="yellow", err=True
            )
            continue
        typer.secho(
            f"note: {name} is an old spelling of {' '.join(new)} and will be removed in the next release",
            fg="yellow",
            err=True,
        )
        out += [*new[:-1], new[-1] + ("" if value is None else f"={value}")]
    return out


def command_class(command: str) -> type[FlagHelpCommand]:
    """The typer command class for ``command`` (e.g. ``"ask"``): one that shows flags as flags in its help
    and, when the command has old spellings, rewrites them before parsing."""
    old = OLD_SPELLINGS.get(command)
    if not old:
        return FlagHelpCommand

    class Respelled(FlagHelpCommand):
        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            return super().parse_args(ctx, respell(args, old))

    return Respelled

"""Help that shows a flag as a flag: typer's rich help prints every boolean option with a ``<bool>`` type
(``--version <bool>``), as if it took a value. The command and group classes here give flags an empty
metavar, so the help shows ``--version`` alone; options that take values are unchanged."""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand, TyperGroup

__all__ = ["FlagHelpCommand", "FlagHelpGroup"]


def _flags_as_flags(params: list[Any]) -> list[Any]:
    # typer ships its own copy of click, so options are recognised by what they have, not by class
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""  # typer prints the metavar in place of the type; an empty one prints nothing
    return params


class FlagHelpCommand(TyperCommand):
    """A typer command whose help prints flags without a value type."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_as_flags(super().get_params(ctx))


class FlagHelpGroup(TyperGroup):
    """A typer group (the ``genembed`` command, ``genembed index``) whose help prints flags as flags."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_as_flags(super().get_params(ctx))

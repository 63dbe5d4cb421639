"""``Option``: one ``loss.`` config key a loss declares beside its class (name, type, default, check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Option"]


@dataclass(frozen=True)
class Option:
    """A ``loss.`` key of the run config.

    ``check`` is ``"positive"`` (> 0), ``"non_negative"`` (>= 0), a tuple of the allowed values, or None;
    the config loader applies it and names the key in its error.
    """

    name: str
    type: Any
    default: Any
    help: str
    check: str | tuple[Any, ...] | None = None

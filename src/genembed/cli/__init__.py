"""Command-line interface (typer); each subcommand is one module calling one library function."""

from __future__ import annotations

__all__: list[str] = []

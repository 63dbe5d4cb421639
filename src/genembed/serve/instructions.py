"""Named instructions: how a client says "this is a query" or "this is a document" over HTTP.

Clients name the side of a text in their own vocabulary; each maps to one named instruction the
served model carries:

- Cohere's ``input_type``: ``search_query`` -> ``query``, ``search_document`` -> ``document``,
  ``classification`` -> ``classification``, ``clustering`` -> ``clustering``.
- Jina's ``task``: ``retrieval.query`` -> ``query``, ``retrieval.passage`` -> ``document``,
  ``text-matching`` -> ``text-matching``, ``classification`` -> ``classification``,
  ``separation`` -> ``clustering``.
- sentence-transformers' ``prompt_name``: any name in the table.

The table of named instructions is :data:`genembed.encoders.instructions.NAMED_INSTRUCTIONS`, the one
table encoding and the shipped centers use too (``query`` is the instruction ``encode_query`` uses;
documents get none, as in ``encode_document``), updated by the model's own ``prompts`` when it has them,
then by the server's ``--instructions FILE.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..encoders.instructions import NAMED_INSTRUCTIONS
from .errors import APIError

__all__ = [
    "INPUT_TYPES",
    "TASKS",
    "choose_instruction",
    "load_instructions",
    "named_instructions",
]

INPUT_TYPES: dict[str, str] = {  # Cohere's input_type -> named instruction
    "search_query": "query",
    "search_document": "document",
    "classification": "classification",
    "clustering": "clustering",
}
TASKS: dict[str, str] = {  # Jina's task -> named instruction
    "retrieval.query": "query",
    "retrieval.passage": "document",
    "text-matching": "text-matching",
    "classification": "classification",
    "separation": "clustering",
}


def named_instructions(model: Any, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The served table: the named instructions, then the model's ``prompts`` (if it has them), then
    ``overrides``."""
    table = dict(NAMED_INSTRUCTIONS)
    prompts = getattr(model, "prompts", None)
    if isinstance(prompts, Mapping):
        # None = "the caller's instruction" (sentence-transformers style): the server keeps its default
        table.update({str(k): str(v) for k, v in prompts.items() if v is not None})
    table.update(overrides or {})
    return table


def load_instructions(path: str | Path) -> dict[str, str]:
    """Read ``{"name": "instruction", ...}`` from a JSON file.

    Raises:
        ValueError: the file is missing, not JSON, or not an object of strings (the message names the
            file and the entry).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the instructions file ({exc.strerror or exc})") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of name -> instruction, got {type(data).__name__}")
    for name, instruction in data.items():
        if not name or not isinstance(instruction, str):
            raise ValueError(f"{path}: entry {name!r} must map a non-empty name to a string, got {instruction!r}")
    return data


def choose_instruction(
    table: Mapping[str, str],
    *,
    instruction: str | None = None,
    prompt_name: str | None = None,
    input_type: str | None = None,
    task: str | None = None,
) -> str:
    """The instruction a request asks for: its own ``instruction``, or the one it names.

    At most one of the four may be set; with none, the text is embedded without an instruction.

    Raises:
        APIError: 422 when more than one is set, or a ``prompt_name`` is not in ``table``.
    """
    fields = {"instruction": instruction, "prompt_name": prompt_name, "input_type": input_type, "task": task}
    given = {k: v for k, v in fields.items() if v is not None}
    if len(given) > 1:
        raise APIError(
            422, f"set at most one of instruction, prompt_name, input_type and task; got {sorted(given)}", param="body"
        )
    if instruction is not None:
        return instruction
    field, name = next(iter(given.items()), (None, None))
    if field is None:
        return ""
    if field == "input_type":
        name = INPUT_TYPES[name]
    elif field == "task":
        name = TASKS[name]
    if name not in table:
        raise APIError(
            422, f"{field}={name!r} names no instruction on this server; it has {sorted(table)}", param=field
        )
    return table[name]

"""Task folders evaluated with a published checkpoint's own per-task instructions (its authors' MTEB
table, :mod:`genembed.models.published`), looked up by the task's ``mteb_name`` (else its ``name``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..models.published import PublishedModel
from .tasks import Task

__all__ = ["with_published_instructions"]

# task types whose texts all get one instruction (the others: retrieval has two sides; instruct tasks
# exist to compare their own per-axis instructions, so they keep them)
_SYMMETRIC = ("sts", "classification", "clustering", "pair")


def with_published_instructions(
    tasks: Sequence[Task], entry: PublishedModel
) -> tuple[list[Task], dict[str, dict[str, str] | None]]:
    """``tasks`` with the instructions ``entry``'s authors evaluate those MTEB tasks with, and what was used.

    Returns:
        The tasks (copies where an instruction changed) and, by task name, ``{"instruction": ...,
        "doc_instruction": ...}`` as now used, or None for a task that keeps its own (not in the
        authors' table, or an instruct task).
    """
    instructions = entry.instruction_set()
    out, used = [], {}
    for task in tasks:
        key = task.mteb_name or task.name
        changes = None
        if task.type in _SYMMETRIC and instructions.entry(key) is not None:
            changes = {"instruction": instructions.for_task(key)}
        elif task.type == "retrieval" and instructions.entry(key) is not None:
            changes = {"instruction": instructions.for_task(key, "query")}
            changes["doc_instruction"] = instructions.for_task(key, "document")
        out.append(dataclasses.replace(task, **changes) if changes else task)
        used[task.name] = changes
    return out, used

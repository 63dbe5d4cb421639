"""Which weights generation uses when a LoRA adapter is attached.

An adapter trained only for embeddings (contrastive or ICR training) changes what the model says; a
GRIT jointly trained adapter is meant for both modes. ``GenerativeEmbedder.generation_adapter``
chooses: False (default) runs chat and reranking on the base weights through peft's
``disable_adapter()``; True runs them with the adapter. Embedding always uses the adapter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["adapter_mode", "each_step_in"]

T = TypeVar("T")


def adapter_mode(model: Any, use_adapter: bool) -> contextlib.AbstractContextManager:
    """A context in which ``model`` runs with (``use_adapter=True``) or without its peft adapter.

    A model without an adapter is unaffected either way.
    """
    if use_adapter or not hasattr(model, "disable_adapter"):
        return contextlib.nullcontext()
    return model.disable_adapter()


def each_step_in(context: Callable[[], contextlib.AbstractContextManager], iterator: Iterator[T]) -> Iterator[T]:
    """Advance ``iterator`` inside a fresh ``context()`` for each item.

    A stream that is paused or abandoned part-way therefore never leaves the model in the
    context's state (e.g. with its adapter disabled while the caller embeds texts in between).
    """
    while True:
        with context():
            try:
                item = next(iterator)
            except StopIteration:
                return
        yield item

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

__all__ = ["adapter_mode", "each_step_in", "kv_reuse_problem"]

T = TypeVar("T")


def adapter_mode(model: Any, use_adapter: bool) -> contextlib.AbstractContextManager:
    """A context in which ``model`` runs with (``use_adapter=True``) or without its peft adapter.

    A model without an adapter is unaffected either way.
    """
    if use_adapter or not hasattr(model, "disable_adapter"):
        return contextlib.nullcontext()
    return model.disable_adapter()


def kv_reuse_problem(model: Any) -> str | None:
    """Why KV states from ``model``'s embedding passes cannot be reused for its generation, or None.

    They can when both modes run the same weights: no adapter, or ``generation_adapter=True``.
    """
    if getattr(model, "adapter", None) and not getattr(model, "generation_adapter", True):
        return (
            "KV reuse needs the same weights for embedding and generation, but this model embeds with its adapter "
            f"({model.adapter}) and generates without it (an embedding-only adapter, like the default GIRCSE one). "
            "Load the raw backbone (genembed.load(adapter=False), CLI --adapter none), or a GRIT jointly trained "
            "adapter with generation_adapter=True"
        )
    return None


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

"""Which weights generation uses when a LoRA adapter is attached.

An adapter trained only for embeddings (contrastive or ICR training) changes what the model says; a
GRIT jointly trained adapter is meant for both modes. ``GenerativeEmbedder.generation_adapter``
chooses: False (default) runs chat and reranking on the base weights with the adapter layers
switched off; True runs them with the adapter. Embedding always uses the adapter.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["adapter_mode", "each_step_in"]

T = TypeVar("T")
_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # peft model -> its LoRA layers, or None


def adapter_mode(model: Any, use_adapter: bool) -> contextlib.AbstractContextManager:
    """A context in which ``model`` runs with (``use_adapter=True``) or without its peft adapter.

    A model without an adapter is unaffected either way. For LoRA-style adapters the layers' switch is
    flipped directly (the layers are found once per model): peft's ``disable_adapter()`` first
    inspects every module's status, about 0.1 s for SmolLM2-135M, which generation pays per token.
    Other adapter types go through ``disable_adapter()``.
    """
    if use_adapter or not hasattr(model, "disable_adapter"):
        return contextlib.nullcontext()
    if model not in _LAYERS:
        _LAYERS[model] = _tuner_layers(model)
    layers = _LAYERS[model]
    return model.disable_adapter() if layers is None else _switched_off(layers)


def _tuner_layers(model: Any) -> list[Any] | None:
    """The peft tuner layers of a LoRA-style model, or None when the fast switch does not apply."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils import ModulesToSaveWrapper

    config = getattr(model, "peft_config", {}).get(getattr(model, "active_adapter", None))
    if config is None or config.is_prompt_learning or getattr(config, "is_adaption_prompt", False):
        return None
    modules = list(model.modules())
    if any(isinstance(m, ModulesToSaveWrapper) for m in modules):
        return None
    layers = [m for m in modules if isinstance(m, BaseTunerLayer)]
    return layers if all(hasattr(m, "_disable_adapters") for m in layers) else None


@contextlib.contextmanager
def _switched_off(layers: list[Any]) -> Iterator[None]:
    before = [layer._disable_adapters for layer in layers]
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer, flag in zip(layers, before, strict=True):
            layer._disable_adapters = flag


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

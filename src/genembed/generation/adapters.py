"""Which weights generation uses when LoRA adapters are attached.

An adapter trained only for embeddings (contrastive or ICR training) changes what the model says; a
GRIT jointly trained adapter is meant for both modes; a *generation adapter* is a second LoRA adapter
loaded beside the embedding one (:func:`attach_generation_adapter`) that only generation uses.
``GenerativeEmbedder.generation_adapter`` names the weights (:mod:`genembed.generation.weights`: the type
and the one rule that picks them): ``"base"``, ``"adapter"`` or ``"generation"``. This module switches
the model to them (:func:`adapter_mode`) and names them for the user.

Embedding always uses the embedding adapter (or the base weights when there is none).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .._peft import quiet_peft
from .weights import ADAPTER, BASE, GENERATION

__all__ = [
    "GENERATION_ADAPTER",
    "BaseWeightsWarning",
    "adapter_mode",
    "attach_generation_adapter",
    "base_weights_note",
    "each_step_in",
    "generating_adapter",
    "generation_weights_label",
    "generator_choice",
    "same_weights",
]

T = TypeVar("T")
# the peft name of the generation adapter (the name of its weights too); the embedding adapter keeps peft's
# "default"
GENERATION_ADAPTER = GENERATION
_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # peft model -> its LoRA layers, or None


def generator_choice(spelling: str | None) -> str | None:
    """A command line's ``--generator`` as :func:`genembed.load`'s ``generation_adapter``: ``"base"`` or
    ``"adapter"`` (any case) name the weights (:mod:`genembed.generation.weights`), anything else is a
    generation adapter's folder or shipped name, kept as given; None (not given) stays None (load's default)."""
    if spelling is None:
        return None
    return spelling.lower() if spelling.lower() in (BASE, ADAPTER) else spelling


def generating_adapter(model: Any) -> str | None:
    """The peft adapter ``model`` (a :class:`~genembed.GenerativeEmbedder`) generates with: None for the base
    weights, ``"default"`` for its embedding adapter, :data:`GENERATION_ADAPTER` for a generation adapter."""
    weights = getattr(model, "generation_adapter", BASE)
    if weights == GENERATION:
        return GENERATION_ADAPTER
    return "default" if weights == ADAPTER and getattr(model, "adapter", None) else None


class BaseWeightsWarning(UserWarning):
    """``generate`` runs on the raw backbone's weights while an embedding adapter is loaded."""


def generation_weights_label(model: Any) -> str:
    """The weights ``model`` generates with, in words: ``"<backbone> (base weights)"``, ``"<backbone> +
    adapter <name>"`` or ``"<backbone> + generation adapter <name>"``."""
    weights, backbone = generating_adapter(model), model.backbone.name
    if weights is None:
        return f"{backbone} (base weights)"
    if weights == "default":
        return f"{backbone} + adapter {model.adapter}"
    return f"{backbone} + generation adapter {model.generation_adapter_name}"


def base_weights_note(model: Any) -> str | None:
    """One line for the user when ``model`` generates with the raw backbone's weights although an adapter
    is loaded (``generation_adapter`` ``"base"``: the adapter is for embeddings only, or was switched off
    for generation), naming the better choice; None otherwise (no adapter, or one that generates)."""
    adapter = getattr(model, "adapter", None)
    if not adapter or getattr(model, "generation_adapter", BASE) != BASE:
        return None
    trained_for = getattr(model, "trained_for", None)
    if trained_for is not None and trained_for.generation:  # a jointly trained adapter, switched off
        return (
            f"note: replies come from the raw backbone weights, not from adapter {adapter}, which was trained to "
            "generate too: use --generator adapter (model.generation_adapter = 'adapter')"
        )
    return (
        f"note: replies come from the raw backbone weights (adapter {adapter} is trained for embeddings only); "
        "for one model that embeds and replies use the default adapter (genembed.load()), or name a generation "
        "adapter: --generator FOLDER (genembed.load(generation_adapter=FOLDER))"
    )


def same_weights(model: Any) -> bool:
    """Whether ``model`` embeds and generates with the same weights (no adapter, or a jointly trained one)."""
    return generating_adapter(model) == ("default" if getattr(model, "adapter", None) else None)


def adapter_mode(model: Any, use_adapter: bool | str | None) -> contextlib.AbstractContextManager:
    """A context in which ``model`` (a transformers/peft model) runs with the weights ``use_adapter`` names.

    ``"adapter"`` (or True): as it embeds (its embedding adapter, if any); ``"base"`` (or False/None): the
    base weights, every adapter off; another string: that peft adapter alone (:data:`GENERATION_ADAPTER`).
    A model without an adapter is unaffected by ``"adapter"``/``"base"``. For LoRA-style adapters the
    layers' switches are flipped directly (the layers are found once per model): peft's
    ``disable_adapter()`` first inspects every module's status, about 0.1 s for SmolLM2-135M, which
    generation pays per token. Other adapter types go through ``disable_adapter()`` and cannot be named.
    """
    if use_adapter in (BASE, ADAPTER):  # the weights by name (genembed.generation.weights)
        use_adapter = use_adapter == ADAPTER
    if isinstance(use_adapter, str):
        layers = _layers(model)
        if layers is None:
            raise ValueError(f"cannot switch this model to adapter {use_adapter!r}: it holds no LoRA-style adapters")
        return _switched_to(layers, use_adapter)
    if use_adapter or not hasattr(model, "disable_adapter"):
        return contextlib.nullcontext()
    layers = _layers(model)
    return model.disable_adapter() if layers is None else _switched_off(layers)


def attach_generation_adapter(backbone: Any, folder: str | Path) -> None:
    """Load the LoRA adapter in ``folder`` beside ``backbone``'s embedding adapter as
    :data:`GENERATION_ADAPTER`, for generation only: what the model embeds with does not change.

    Raises:
        ValueError: the adapter is not LoRA-style (it could not be switched per generated token), or the
            model already holds a generation adapter.
    """
    from peft import PeftModel

    lm = backbone.model
    if isinstance(lm, PeftModel):
        if GENERATION_ADAPTER in lm.peft_config:
            raise ValueError("this model already holds a generation adapter")
        with quiet_peft():
            lm.load_adapter(str(folder), adapter_name=GENERATION_ADAPTER)
        _LAYERS.pop(lm, None)  # new layers may have been injected
        embedding_off = False
    else:
        with quiet_peft():
            lm = PeftModel.from_pretrained(lm, str(folder), adapter_name=GENERATION_ADAPTER).eval()
        backbone.model = lm
        embedding_off = True  # no embedding adapter: embedding keeps the base weights
    layers = _layers(lm)
    if layers is None:
        raise ValueError(f"{folder}: a generation adapter must be a LoRA-style peft adapter")
    if embedding_off:
        for layer in layers:
            layer._disable_adapters = True


def _layers(model: Any) -> list[Any] | None:
    if model not in _LAYERS:
        _LAYERS[model] = _tuner_layers(model)
    return _LAYERS[model]


def _tuner_layers(model: Any) -> list[Any] | None:
    """The peft tuner layers of a LoRA-style model, or None when the fast switch does not apply."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils import ModulesToSaveWrapper

    configs = getattr(model, "peft_config", {})
    if not configs or any(c.is_prompt_learning or getattr(c, "is_adaption_prompt", False) for c in configs.values()):
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


@contextlib.contextmanager
def _switched_to(layers: list[Any], name: str) -> Iterator[None]:
    """Only adapter ``name`` on (a layer without it runs its base weights), as peft's ``set_adapter`` would
    leave it but without touching ``requires_grad``; restored on exit."""
    before = [(layer._active_adapter, layer._disable_adapters) for layer in layers]
    for layer in layers:
        layer._active_adapter = [name]
        layer._disable_adapters = False
    try:
        yield
    finally:
        for layer, (active, flag) in zip(layers, before, strict=True):
            layer._active_adapter = active
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

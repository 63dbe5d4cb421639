"""Models coming and going: where a model comes from (:mod:`.source`), the one assembly of backbone,
adapter, settings and centers (:mod:`.assemble`), ``genembed.load`` (:mod:`.load`) and ``model.save``
(:mod:`.save`) side by side, the LoRA adapters (:mod:`.adapters`, :mod:`.trained_for`), the model card
(:mod:`.card`) and the published checkpoints (:mod:`.published`).

Importing the package does no work; names load from their modules on first use. ``load`` and
``assemble`` are not exported here, as their modules share their names: ``genembed.load`` is the entry
point (``from genembed.models.assemble import assemble`` for the other).
"""

from __future__ import annotations

from .._lazy import lazy_names

_MODULES = {  # submodule -> the names it exports here
    "adapters": ("DEFAULT_ADAPTER", "SHIPPED_ADAPTERS", "default_adapter", "shipped_adapter", "trained_for_generation"),
    "assemble": ("centering",),
    "published": ("PUBLISHED", "PublishedModel", "published_for", "published_model"),
    "save": ("SETTINGS_FILE", "read_settings", "save_model"),
    "source": ("ModelSource", "resolve_source"),
    "trained_for": ("TrainedFor", "UntrainedAdapterWarning", "read_trained_for"),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY)

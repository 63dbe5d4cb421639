"""The one place a model is put together: backbone, LoRA adapter, settings and centers ->
:class:`~genembed.model.GenerativeEmbedder`. Every way :func:`genembed.load` finds a model (bundled,
saved folder, local folder, GGUF, hub id, published checkpoint, adapter repo) ends here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..backbone.loading import Backbone
from ..encoders.centering import load_centers
from ..generation.weights import choose_weights
from ..model import GenerativeEmbedder
from .adapters import attach_adapter
from .trained_for import read_trained_for

__all__ = ["assemble", "centering"]

logger = logging.getLogger(__name__)


def centering(asked: bool | None, *, saved: bool | None, published: bool, stored: int, shipped: bool) -> bool:
    """Whether a loaded model centers its embeddings by default (``model.center``): the one rule.

    1. The caller's ``center=`` wins (``asked``).
    2. A saved model centers as it was saved (``saved``, its ``genembed.json``).
    3. A published checkpoint does not: its authors' embeddings are uncentered, and centering is
       genembed's idea (``published``).
    4. Otherwise a model centers when the weights it embeds with bring centers of their own: a shipped
       adapter (where centering was measured to help, docs/experiments.md; ``shipped``) or any adapter
       that stores ``centers.safetensors`` beside its weights (``stored`` > 0: ``make centers`` and
       ``model.save`` write them). A bare backbone, or an adapter without centers, does not.
    """
    if asked is not None:
        return asked
    if saved is not None:
        return saved
    if published:
        return False
    return shipped or stored > 0


def assemble(
    backbone: Backbone,
    *,
    adapter: Path | None = None,
    adapter_name: str | None = None,
    settings: Mapping[str, Any] | None = None,
    centers: Path | None = None,
    center: bool | None = None,
    saved_center: bool | None = None,
    published: bool = False,
    shipped: bool = False,
    generator: Path | None = None,
    generator_name: str | None = None,
    generates: str | bool | None = None,
    saved_generates: str | bool | None = None,
    where: str | None = None,
) -> GenerativeEmbedder:
    """Put a model together.

    Args:
        backbone: the loaded backbone (no adapter attached yet).
        adapter: the embedding LoRA adapter's folder, attached here (None: none).
        adapter_name: what the model calls it (``model.adapter``).
        settings: the model's settings (``GenerativeEmbedder`` keywords: method, steps, attention,
            prompt_format, tau, max_length, truncate_dim, prompts, ...), already merged with the caller's.
        centers: the folder whose ``centers.safetensors`` belong to the weights embedded with (the
            adapter's, or a saved model's); None: none.
        center, saved_center, published, shipped: :func:`centering`'s inputs (``stored`` is how many
            centers ``centers`` held).
        generator: a generation adapter's folder, attached beside the embedding one (None: none), and
            ``generator_name`` what the model calls it.
        generates, saved_generates: the weights that generate (``model.generation_adapter``) as the caller
            asked and as a saved model was saved (None: not said), decided with the generation adapter and
            the embedding adapter's training by :func:`~genembed.generation.weights.choose_weights`.
        where: what to name in a settings error (a saved model's ``genembed.json``).

    Raises:
        ValueError: a bad setting (prefixed with ``where``).
    """
    if adapter is not None:
        attach_adapter(backbone, adapter)
    stored = load_centers(backbone, centers) if centers is not None else 0
    on = centering(center, saved=saved_center, published=published, stored=stored, shipped=shipped)
    try:
        model = GenerativeEmbedder(backbone, adapter=adapter_name, center=on, **dict(settings or {}))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}" if where else str(exc)) from exc
    model.adapter_path = str(adapter.resolve()) if adapter is not None else None
    model.trained_for = read_trained_for(adapter) if adapter is not None else None
    if generator is not None:
        from ..generation.adapters import attach_generation_adapter

        attach_generation_adapter(backbone, generator)
        model.generation_adapter_name = generator_name or generator.resolve().name
        model.generation_adapter_path = str(generator.resolve())
    joint = bool(model.trained_for and model.trained_for.generation)
    model.generation_adapter = choose_weights(
        generates, saved=saved_generates, generator=generator is not None, joint=joint
    )
    return model

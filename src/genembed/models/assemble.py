"""The one place a model is put together: backbone, LoRA adapter, settings and centers ->
:class:`~genembed.model.GenerativeEmbedder`. Every way :func:`genembed.load` finds a model (bundled,
saved folder, local folder, GGUF, hub id, published checkpoint, adapter repo) ends here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._peft import quiet_peft
from ..backbone.loading import Backbone
from ..encoders.centering import calibration_digest, load_centers
from ..encoders.model_settings import ModelSettings
from ..generation.adapters import attach_generation_adapter
from ..generation.weights import choose_weights
from ..model import GenerativeEmbedder
from .adapters import ChosenAdapters, adapter_folder
from .trained_for import read_trained_for

__all__ = ["assemble", "attach_adapter", "centering"]

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
    given: Mapping[str, Any] | None = None,
    *,
    adapters: ChosenAdapters | None = None,
    own: Mapping[str, Any] | None = None,
    saved: dict[str, Any] | None = None,
    trained: Mapping[str, Any] | None = None,
    centers: Path | None = None,
    center: bool | None = None,
    published: bool = False,
    saved_generates: str | bool | None = None,
    where: str | None = None,
) -> GenerativeEmbedder:
    """Put a model together, each part once and in this order: the adapters attached (peft), the centers
    stored beside the weights (:mod:`genembed.encoders.centering`), centring decided (:func:`centering`), what
    the adapter was trained for (:mod:`genembed.models.trained_for`), the settings
    (:meth:`~genembed.encoders.model_settings.ModelSettings.resolve`), a generation adapter attached beside
    the embedding one, the weights that generate (:func:`~genembed.generation.weights.choose_weights`), and
    the model (:class:`~genembed.model.GenerativeEmbedder`).

    Args:
        backbone: the loaded backbone (no adapter attached yet).
        given: the settings the caller gave (``load``'s keywords; None: not given).
        adapters: the adapters to attach (:func:`~genembed.models.adapters.choose_adapters`; None: none).
        own, saved, trained: the settings of a published checkpoint, a saved model's ``genembed.json`` and the
            adapter's own (:meth:`~genembed.encoders.model_settings.ModelSettings.resolve`).
        centers: the folder whose ``centers.safetensors`` belong to the weights embedded with (the
            adapter's, or a saved model's); None: none.
        center, published: :func:`centering`'s ``asked`` and ``published`` (a saved model's centring is in
            ``saved``; ``stored`` is how many centers ``centers`` held, ``shipped`` whether the adapter is).
        saved_generates: the weights that generate as a saved model was saved (None: not said), decided with
            the caller's, the generation adapter and the embedding adapter's training by
            :func:`~genembed.generation.weights.choose_weights`.
        where: what to name in a settings error (a saved model's ``genembed.json``).

    Raises:
        ValueError: a bad setting (prefixed with ``where``).
    """
    adapters = adapters or ChosenAdapters()
    if adapters.path is not None:
        attach_adapter(backbone, adapters.path, checked=True)
    stored = load_centers(backbone, centers) if centers is not None else 0
    digest = saved.get("calibration_sha256") if saved is not None else None
    stale = bool(digest) and digest != calibration_digest()
    saved_center = saved["encode"].get("center") if saved is not None else None
    on = centering(center, saved=saved_center, published=published, stored=stored, shipped=adapters.shipped)
    if on and stale:
        logger.warning(
            "%s was saved with other calibration texts than this genembed's: centered embeddings will differ", where
        )
    trained_for = read_trained_for(adapters.path) if adapters.path is not None else None
    try:
        settings = ModelSettings.resolve(given or {}, own=own, saved=saved, trained=trained, center=on)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}" if where else str(exc)) from exc
    generator = adapters.generator
    if generator is not None:
        attach_generation_adapter(backbone, generator)
    joint = bool(trained_for and trained_for.generation)
    generates = choose_weights(adapters.generates, saved=saved_generates, generator=generator is not None, joint=joint)
    return GenerativeEmbedder(
        backbone,
        adapter=adapters.name,
        settings=settings,
        adapter_path=str(adapters.path.resolve()) if adapters.path is not None else None,
        trained_for=trained_for,
        generation_adapter=generates,
        generation_adapter_name=(adapters.generator_name or generator.resolve().name) if generator else None,
        generation_adapter_path=str(generator.resolve()) if generator is not None else None,
    )


def attach_adapter(backbone: Any, adapter_path: Path, *, checked: bool = False) -> None:
    """Wrap the backbone's model with the saved LoRA adapter in ``adapter_path`` (peft), in eval mode.

    Raises:
        MissingModelError / DamagedFileError: the folder holds no readable LoRA adapter (checked with
            :func:`~genembed.models.adapters.adapter_folder` unless ``checked``: already, as
            :func:`~genembed.models.adapters.choose_adapters` does).
    """
    from peft import PeftModel

    if not checked:
        adapter_folder(adapter_path)
    with quiet_peft():
        backbone.model = PeftModel.from_pretrained(backbone.model, str(adapter_path)).eval()

"""``genembed.load``: where the model comes from (:mod:`.source`), which adapter and settings it gets,
then :func:`~genembed.models.assemble.assemble`. ``model.save`` (:mod:`.save`) writes what this reads."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..backbone.default_model import MissingModelError
from ..backbone.loading import BUNDLED, load_backbone
from ..encoders.methods import method_for_pooling
from ..encoders.settings import check_given
from ..model import GenerativeEmbedder
from .adapters import ChosenAdapters, choose_adapters
from .assemble import assemble
from .save import BACKBONE_SUBFOLDER, SETTINGS_FILE, adapter_settings, read_settings
from .source import resolve_source

__all__ = ["load"]

logger = logging.getLogger(__name__)


def load(
    model: str | os.PathLike | None = None,
    adapter: str | os.PathLike | None | bool = None,
    dtype: str = "auto",
    device: str = "auto",
    *,
    method: str | None = None,
    steps: int | str | None = None,
    tau: float | None = None,
    attention: str | None = None,
    prompt_format: str | None = None,
    pooling: str | None = None,
    max_length: int | None = None,
    truncate_dim: int | None = None,
    center: bool | None = None,
    generation_adapter: str | os.PathLike | None = None,
    local_files_only: bool = False,
    device_map: Any = None,
    quantization: str | None = None,
    as_published: str | None = None,
) -> GenerativeEmbedder:
    """Load a model for embedding (and generation, reranking, RAG).

    >>> model = genembed.load(method="mean", steps=3)   # settings by the names genembed.json stores
    >>> model.save("my-model")                           # writes what the model holds
    >>> genembed.load("my-model").method
    'mean'

    Args:
        model: None for the bundled default (SmolLM2-135M-Instruct; never downloaded), a folder
            written by ``model.save`` (its ``genembed.json`` restores the settings), a local HF folder,
            a ``.gguf`` file, or a hub id: a published checkpoint of
            :data:`genembed.models.published.PUBLISHED` (``"GritLM/GritLM-7B"``,
            ``"Roytsai27/GIRCSE-QWEN7B"``, ...: loaded with its authors' method, K, temperature, prompt
            format and instructions, centering off), a LoRA adapter repo (loaded on the base model its
            ``adapter_config.json`` names), a saved model or a plain HF model. A hub id comes from the
            local HF cache, downloaded into it when missing (progress bar, resumable) unless
            ``local_files_only`` or ``HF_HUB_OFFLINE=1``. (:mod:`genembed.models.source`.)
        adapter: a LoRA adapter folder (as written by ``genembed train``), the name of an adapter
            shipped for the bundled backbone (:data:`~genembed.models.adapters.SHIPPED_ADAPTERS`:
            ``"joint"``, the default, and its aliases ``"gircse"``, its former name, and the folder's names
            ``"smollm2-135m-joint"`` and ``"smollm2-135m-gircse"``; a local folder of that name wins), or
            a hub id of an adapter (downloaded like a model). None: the shipped adapter when ``model`` is
            the bundled default, a saved model's own adapter, a published or adapter repo's own adapter,
            none for any other model. False: none (the raw backbone). An adapter trained with a next-token loss
            too (see :func:`~genembed.models.adapters.trained_for_generation`; the shipped default is
            one) is used for generation as well (``model.generation_adapter ==
            "adapter"``); an embedding-only adapter only for embedding. What the adapter was trained for is
            read from its saved training config (``model.trained_for``,
            :mod:`genembed.models.trained_for`); ``encode`` warns when asked for another method or
            attention. An adapter folder written by ``genembed train`` carries the settings it was trained
            with (its ``genembed.json``: method, steps, attention, prompt format, tau): they are the model's
            unless given here.
        dtype: ``"auto"`` (default: bfloat16 where the device computes it natively, such as CPUs with
            AVX512-BF16 or AMX, else float32; see :func:`genembed.backbone.default_dtype`; the
            environment variable ``GENEMBED_DTYPE`` overrides it), ``"float32"``, ``"bfloat16"`` or
            ``"float16"``.
        device: ``"auto"`` (default: CUDA, then Apple MPS, then the CPU; with several GPUs, a model
            too large for the first is spread over all of them), or a torch device such as ``"cpu"``
            or ``"cuda:0"``.
        method, steps, tau, attention, prompt_format, max_length, truncate_dim: the model's settings,
            by the names ``genembed.json`` stores and the model holds (``model.method``, ...; see
            :meth:`~genembed.GenerativeEmbedder.encode`). None: the saved model's or published
            checkpoint's, else genembed's defaults. A method other than the source's brings its own
            attention and prompt format unless given. Checked here, before anything loads.
        pooling: ``"soft_tokens"``, ``"mean"`` or ``"last"``: another way to name the method, which
            decides the pooling (:func:`~genembed.encoders.methods.method_for_pooling`; not stored of
            its own).
        center: per-instruction centering in ``encode`` by default (see
            :mod:`genembed.encoders.centering`). None: by the rule of
            :func:`~genembed.models.assemble.centering` (a saved model: as saved; a published
            checkpoint: off; on with a shipped adapter and with any adapter that stores centers beside
            its weights, whose centers are then used, so their instructions cost no calibration
            encode; off otherwise).
        generation_adapter: the weights chat, reranking, RAG answers and stored KV states use
            (:mod:`genembed.generation.weights`). ``"adapter"`` / ``"base"``: the embedding adapter / the
            base weights (True / False: their former spellings, deprecated). A folder or shipped adapter
            name: a second LoRA adapter loaded beside the embedding one and used for generation only
            (``model.generation_adapter == "generation"``); embeddings do not change. None: by the rule of
            :func:`~genembed.generation.weights.choose_weights` (a saved model as it was saved, a
            generation adapter it holds, the adapter when it was trained for generation too, else the base
            weights).
        local_files_only: never download; a model missing from the HF cache fails at once.
        device_map: accelerate's placement of the layers over devices (``"auto"``: over all GPUs).
        quantization: ``"4bit"`` or ``"8bit"``: bitsandbytes weights on a CUDA GPU
            (``pip install "genembed[quant]"``).
        as_published: run ``model`` (a local folder, such as a copy of the weights) with the settings of
            this published model (a hub id of ``genembed models``: its method, prompt format, attention,
            max length and query instruction). A snapshot folder of the HF cache runs as its hub id's
            model without it. A method other than the published one keeps its prompt format (soft
            tokens after the family's own prompt: ``method="gircse"``) unless ``prompt_format`` is given.

    Raises:
        ValueError: a bad setting (an unknown method, K < 1, ...: the message names it and the valid
            choices), or a saved model's ``genembed.json`` is malformed (the message names the field).
        MissingModelError: the model or adapter is not on disk and cannot be downloaded (offline, not
            found, gated); the message names it and says how to get it.
        InsufficientMemoryError: a CPU load whose weights will not fit in the available memory.
        DamagedFileError: a file of the adapter is truncated or damaged (the message names it).
    """
    given = {"method": method_for_pooling(pooling, method), "steps": steps, "tau": tau, "attention": attention}
    given |= {"prompt_format": prompt_format, "max_length": max_length}
    check_given(**given)
    if center is not None and not isinstance(center, bool):
        raise ValueError(f"center must be True, False or None, got {center!r}")
    if truncate_dim is not None:
        given["truncate_dim"] = truncate_dim  # checked by the model
    options = {"dtype": dtype, "device": device, "local_files_only": local_files_only}
    options |= {"device_map": device_map, "quantization": quantization}
    source = resolve_source(model, local_files_only, as_published)
    adapters = choose_adapters(source, adapter, generation_adapter, local_files_only)
    if source.kind == "saved":
        assert source.folder is not None
        return _load_saved(source.folder, adapters, given, center, options)
    trained = adapter_settings(adapters.path)  # what the adapter was trained with (its genembed.json)
    entry = source.entry
    if entry is not None and given["method"] not in (None, entry.method) and given["prompt_format"] is None:
        given["prompt_format"] = entry.prompt_format  # another method after the published prompt
    backbone = load_backbone(source.backbone, **options)
    if source.own_adapter and isinstance(source.backbone, str):
        backbone.name = source.backbone
    elif source.kind == "local" and entry is not None:
        backbone.name = entry.id  # a local copy of a published model runs (and reports) as it
    return assemble(
        backbone,
        given=given,
        adapters=adapters,
        own=source.settings,  # genembed's defaults, unless the published table says otherwise
        trained=trained,
        centers=adapters.path,  # centers written beside the adapter (make centers, model.save) belong to it
        center=center,
        published=entry is not None,
    )


def _load_saved(
    folder: Path, adapters: ChosenAdapters, given: dict[str, Any], center: bool | None, options: dict[str, Any]
) -> GenerativeEmbedder:
    """A folder written by ``model.save``: its backbone, adapter and settings, the caller's winning."""
    settings = read_settings(folder)
    own = adapters.path is not None and adapters.path.resolve() == folder.resolve()
    # another adapter's own settings (what it was trained with) come before the saved model's
    trained = adapter_settings(adapters.path) if adapters.path is not None and not own else None
    saved_adapter = (folder / "adapter_config.json").is_file()
    saved_weights = own or (adapters.path is None and not saved_adapter)  # the weights embedded with are the saved
    if own:
        adapters = replace(adapters, name=settings.get("adapter") or adapters.name)
    if adapters.generator is not None and adapters.generator.parent == folder:  # its own generation adapter
        adapters = replace(adapters, generator_name=settings.get("generation_adapter_name"))
    backbone = _saved_backbone(folder, settings, options)
    return assemble(
        backbone,
        given=given,
        adapters=adapters,
        saved=settings,
        trained=trained,
        centers=folder if saved_weights else adapters.path,  # the saved weights' centers, else the other adapter's
        center=center,
        saved_generates=settings.get("generation_adapter") if saved_weights else None,  # as it was saved
        where=str(folder / SETTINGS_FILE),
    )


def _saved_backbone(folder: Path, settings: dict[str, Any], options: dict[str, Any]) -> Any:
    """The backbone ``genembed.json`` names (``backbone.source``), named as it was saved.

    Raises:
        MissingModelError: it cannot be loaded (the message says how to keep it in the folder).
    """
    recorded = settings["backbone"]["source"]
    source: str | Path | None = recorded
    if recorded is None:  # an adapter trained on a backbone built in memory
        raise MissingModelError(
            f"{folder / SETTINGS_FILE}: backbone {settings['backbone']['name']!r} was built in memory and cannot be "
            f"loaded by name; load it with genembed.load(BASE, adapter={str(folder)!r})"
        )
    if recorded == BUNDLED:
        source = None
    elif recorded == f"{BACKBONE_SUBFOLDER}/":
        source = folder / BACKBONE_SUBFOLDER
    elif recorded.startswith(("./", "../")):  # a local backbone saved with save_backbone=False
        source = folder / recorded
    try:
        backbone = load_backbone(source, **options)
    except MissingModelError as exc:
        raise MissingModelError(
            f"{folder / SETTINGS_FILE}: backbone.source {recorded!r} cannot be loaded ({exc}); "
            "save with save_backbone=True to keep the weights in the folder"
        ) from exc
    backbone.name = settings["backbone"]["name"]
    return backbone

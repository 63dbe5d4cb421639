"""``genembed.load``: backbone + optional LoRA adapter -> :class:`GenerativeEmbedder`."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from .adapter_info import read_trained_for
from .adapter_loading import (
    DEFAULT_ADAPTER,
    SHIPPED_ADAPTERS,
    adapter_folder,
    adapter_name,
    attach_adapter,
    choose_generator,
    default_adapter,
    record_adapter,
    resolve_adapter,
    shipped_adapter,
    trained_for_generation,
)
from .backbone.default_model import MissingModelError
from .backbone.hub import hub_snapshot
from .backbone.loading import BUNDLED, hub_cache_folder, load_backbone
from .encoders.centering import load_centers
from .encoders.methods import DEFAULT_TAU
from .model import GenerativeEmbedder
from .saving import BACKBONE_SUBFOLDER, SETTINGS_FILE, calibration_digest, read_settings

__all__ = [
    "DEFAULT_ADAPTER",
    "SHIPPED_ADAPTERS",
    "adapter_folder",
    "default_adapter",
    "load",
    "saved_folder",
    "shipped_adapter",
    "trained_for_generation",
]

logger = logging.getLogger(__name__)


def load(
    model: str | os.PathLike | None = None,
    adapter: str | os.PathLike | None | bool = None,
    dtype: str = "auto",
    device: str = "auto",
    *,
    tau: float | None = None,
    center: bool | None = None,
    generation_adapter: str | os.PathLike | bool | None = None,
    local_files_only: bool = False,
    device_map: Any = None,
    quantization: str | None = None,
) -> GenerativeEmbedder:
    """Load a model for embedding (and generation, reranking, RAG).

    Args:
        model: None for the bundled default (SmolLM2-135M-Instruct; never downloaded), a folder
            written by ``model.save`` (its ``genembed.json`` restores the settings), a local HF folder,
            a ``.gguf`` file, or a hub id: a published checkpoint of :data:`genembed.published.PUBLISHED`
            (``"GritLM/GritLM-7B"``, ``"Roytsai27/GIRCSE-QWEN7B"``, ...: loaded with its authors'
            method, K, temperature, prompt format and instructions, centering off), a LoRA adapter repo
            (loaded on the base model its ``adapter_config.json`` names), a saved model or a plain HF
            model. A hub id comes from the local HF cache, downloaded into it when missing (progress
            bar, resumable) unless ``local_files_only`` or ``HF_HUB_OFFLINE=1``.
        adapter: a LoRA adapter folder (as written by ``genembed train``), the name of an adapter
            shipped for the bundled backbone (:data:`SHIPPED_ADAPTERS`: ``"gircse"``, ``"joint"``; a
            local folder of that name wins), or a hub id of an adapter (downloaded like a model).
            None: the shipped GIRCSE adapter when ``model`` is the bundled default, a saved model's own
            adapter, a published or adapter repo's own adapter, none for any other model. False: none
            (the raw backbone). An adapter trained with a next-token loss too (see
            :func:`trained_for_generation`; the shipped ``"joint"``) is used for generation as well
            (``model.generation_adapter = True``); an embedding-only adapter, like the shipped default,
            only for embedding. What the adapter was trained for is read from its saved training config
            (``model.trained_for``, :mod:`genembed.adapter_info`); ``encode`` warns when asked for
            another method or attention.
        dtype: ``"auto"`` (default: bfloat16 where the device computes it natively, such as CPUs with
            AVX512-BF16 or AMX, else float32; see :func:`genembed.backbone.default_dtype`; the
            environment variable ``GENEMBED_DTYPE`` overrides it), ``"float32"``, ``"bfloat16"`` or
            ``"float16"``.
        device: ``"auto"`` (default: CUDA, then Apple MPS, then the CPU; with several GPUs, a model
            too large for the first is spread over all of them), or a torch device such as ``"cpu"``
            or ``"cuda:0"``.
        tau: GIRCSE soft-token softmax temperature (None: the saved model's, else ``DEFAULT_TAU``).
        center: per-instruction centering in ``encode`` by default (see
            :mod:`genembed.encoders.centering`). None: the saved model's setting; else on with a
            shipped adapter, where it was measured to help (docs/experiments.md), and with any adapter
            (folder or hub repo) that stores centers beside its weights; off otherwise (published
            checkpoints: their authors' embeddings). The centers stored with the weights
            (``centers.safetensors`` in the saved folder or the adapter folder) are used, so their
            instructions cost no calibration encode.
        generation_adapter: the weights chat, reranking, RAG answers and stored KV states use. None: as
            above (the adapter when it was trained for generation too, else the base weights; a saved
            model: as it was saved). True / False: the embedding adapter / the base weights. A folder or
            shipped adapter name: a second LoRA adapter loaded beside the embedding one and used for
            generation only (``model.generation_adapter == "generation"``); embeddings do not change.
        local_files_only: never download; a model missing from the HF cache fails at once.
        device_map: accelerate's placement of the layers over devices (``"auto"``: over all GPUs).
        quantization: ``"4bit"`` or ``"8bit"``: bitsandbytes weights on a CUDA GPU
            (``pip install "genembed[quant]"``).

    Raises:
        MissingModelError: the model or adapter is not on disk and cannot be downloaded (offline, not
            found, gated); the message names it and says how to get it.
        InsufficientMemoryError: a CPU load whose weights will not fit in the available memory.
        ValueError: a saved model's ``genembed.json`` is malformed (the message names the field).
        DamagedFileError: a file of the adapter is truncated or damaged (the message names it).
    """
    options = {"dtype": dtype, "device": device, "local_files_only": local_files_only}
    options |= {"device_map": device_map, "quantization": quantization}
    hub = _hub_folder(model, local_files_only)
    saved = saved_folder(model) if hub is None else (hub if (hub / SETTINGS_FILE).is_file() else None)
    if saved is not None:
        return _load_saved(saved, adapter=adapter, tau=tau, center=center, generator=generation_adapter, **options)
    if hub is not None:
        from .hub_loading import is_adapter_folder, load_hub_checkpoint
        from .published import published_model

        entry = published_model(str(model))
        if entry is not None or is_adapter_folder(hub):
            return load_hub_checkpoint(
                str(model),  # as spelled: the HF cache folder follows the spelling
                hub,
                entry,
                adapter=adapter,
                tau=tau,
                center=center,
                generation_adapter=generation_adapter,
                **options,
            )
    backbone = load_backbone(model, **options)
    if adapter is None and model is None:
        adapter = default_adapter()
    adapter_path, shipped, stored = None, False, 0
    if adapter not in (None, False):
        adapter_path = resolve_adapter(adapter, local_files_only)
        attach_adapter(backbone, adapter_path)
        stored = load_centers(backbone, adapter_path)
        shipped = adapter_path.resolve() in {folder.resolve() for folder in SHIPPED_ADAPTERS.values()}
    model = GenerativeEmbedder(
        backbone,
        tau=DEFAULT_TAU if tau is None else tau,
        adapter=adapter_name(adapter, adapter_path) if adapter_path else None,
        center=(shipped or stored > 0) if center is None else center,
    )
    record_adapter(model, adapter_path, generation_adapter)
    return model


def _hub_folder(model: str | os.PathLike | None, local_files_only: bool) -> Path | None:
    """The local snapshot of ``model`` when it names no local file or folder (a hub id), downloaded when
    allowed; None for the bundled default and local paths.

    Raises:
        MissingModelError: a path that does not exist, or a hub id that is not cached and cannot be
            downloaded (:func:`~genembed.backbone.hub.hub_snapshot`).
    """
    if model is None:
        return None
    path = Path(os.path.expanduser(str(model)))
    if path.exists() or path.suffix == ".gguf":
        return None
    return hub_snapshot(str(model), local_files_only=local_files_only)


def saved_folder(model: str | os.PathLike | None) -> Path | None:
    """The folder of a model written by ``model.save``: ``model`` itself, or its snapshot in the local
    HF cache when ``model`` is a hub id; None when ``model`` is anything else."""
    if model is None:
        return None
    path = Path(os.path.expanduser(str(model)))
    if path.is_dir():
        return path if (path / SETTINGS_FILE).is_file() else None
    if path.exists() or path.suffix == ".gguf":
        return None
    try:
        folder = hub_cache_folder(str(model))
    except MissingModelError:
        return None  # load_backbone reports it
    return folder if (folder / SETTINGS_FILE).is_file() else None


def _load_saved(
    folder: Path, *, adapter: Any, tau: float | None, center: bool | None, generator: Any, **options: Any
) -> GenerativeEmbedder:
    settings = read_settings(folder)
    where = folder / SETTINGS_FILE
    source = settings["backbone"]["source"]
    if source == BUNDLED:
        source = None
    elif source == f"{BACKBONE_SUBFOLDER}/":
        source = folder / BACKBONE_SUBFOLDER
    elif source.startswith(("./", "../")):  # a local backbone saved with save_backbone=False
        source = folder / source
    try:
        backbone = load_backbone(source, **options)
    except MissingModelError as exc:
        raise MissingModelError(
            f"{where}: backbone.source {settings['backbone']['source']!r} cannot be loaded ({exc}); "
            "save with save_backbone=True to keep the weights in the folder"
        ) from exc
    backbone.name = settings["backbone"]["name"]
    saved_adapter = (folder / "adapter_config.json").is_file()
    name, adapter_path = None, None
    if adapter is None and saved_adapter:
        attach_adapter(backbone, folder)
        adapter_path = folder
        name = settings.get("adapter") or folder.name
    elif adapter not in (None, False):
        adapter_path = resolve_adapter(adapter, options["local_files_only"])
        attach_adapter(backbone, adapter_path)
        name = adapter_name(adapter, adapter_path)
    trained_for = read_trained_for(adapter_path) if adapter_path else None
    if adapter_path == folder or (adapter_path is None and not saved_adapter):  # the saved weights
        load_centers(backbone, folder)
    elif adapter_path is not None:
        load_centers(backbone, adapter_path)
    if adapter_path == folder:  # the saved model's own adapter: as it was saved
        joint = settings.get("generation_adapter") is True
    else:
        joint = bool(trained_for and trained_for.generation)
    encode = dict(settings["encode"])
    encode["tau"] = encode["tau"] if tau is None else tau
    encode["center"] = encode["center"] if center is None else center
    extra = {key: settings[key] for key in ("prompts", "default_prompt_name", "similarity_fn_name") if key in settings}
    try:
        model = GenerativeEmbedder(backbone, adapter=name, **encode, **extra)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
    model.generation_adapter = joint
    model.adapter_path = str(adapter_path.resolve()) if adapter_path else None
    model.trained_for = trained_for
    from .generation.adapters import GENERATION_ADAPTER

    if generator is None and (folder / GENERATION_ADAPTER / "adapter_config.json").is_file():  # saved with one
        choose_generator(model, folder / GENERATION_ADAPTER, name=settings.get("generation_adapter_name"))
        if settings.get("generation_adapter") != GENERATION_ADAPTER:  # saved generating with other weights
            model.generation_adapter = joint
    else:
        choose_generator(model, generator)
    digest = settings.get("calibration_sha256")
    if model.center and digest and digest != calibration_digest():
        logger.warning(
            "%s was saved with other calibration texts than this genembed's: centered embeddings will differ", where
        )
    return model

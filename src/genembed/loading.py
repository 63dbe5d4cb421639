"""``genembed.load``: backbone + optional LoRA adapter -> :class:`GenerativeEmbedder`."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ._peft import quiet_peft
from .adapter_info import read_trained_for
from .backbone.default_model import MissingModelError
from .backbone.device import resolve_device
from .backbone.loading import BUNDLED, hub_cache_folder, load_backbone
from .encoders.centering import load_centres
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

_ADAPTERS = Path(__file__).parent / "adapters"
# the GIRCSE LoRA adapter trained for the bundled backbone (configs/gircse-smollm2.yaml, MODEL_CARD.md)
DEFAULT_ADAPTER = _ADAPTERS / "smollm2-135m-gircse"
# adapters shipped for the bundled backbone, by the name `load(adapter=NAME)` and `--adapter NAME` take:
# "gircse" embeds only; "joint" was trained on with a next-token loss too (configs/gircse-smollm2-joint.yaml),
# so it also generates, reranks and hands its KV states to the generator
SHIPPED_ADAPTERS = {"gircse": DEFAULT_ADAPTER, "joint": _ADAPTERS / "smollm2-135m-gircse-joint"}


def default_adapter() -> Path | None:
    """The adapter shipped for the bundled backbone, or None in a build that does not hold it."""
    return DEFAULT_ADAPTER if (DEFAULT_ADAPTER / "adapter_config.json").is_file() else None


def shipped_adapter(name: str) -> Path | None:
    """The folder of the shipped adapter called ``name`` (a key of :data:`SHIPPED_ADAPTERS`), or None when
    ``name`` names none or this build does not hold it."""
    folder = SHIPPED_ADAPTERS.get(name)
    return folder if folder is not None and (folder / "adapter_config.json").is_file() else None


def _adapter_path(adapter: str | os.PathLike) -> Path:
    """An adapter argument as a folder: a local folder wins over a shipped adapter of the same name."""
    path = Path(os.path.expanduser(str(adapter)))
    if not path.exists() and isinstance(adapter, str) and adapter in SHIPPED_ADAPTERS:
        folder = shipped_adapter(adapter)
        if folder is None:
            raise MissingModelError(f"this install does not ship the {adapter!r} adapter ({SHIPPED_ADAPTERS[adapter]})")
        return folder
    return path


def load(
    model: str | os.PathLike | None = None,
    adapter: str | os.PathLike | None | bool = None,
    dtype: str = "auto",
    device: str = "auto",
    *,
    tau: float | None = None,
    center: bool | None = None,
    generation_adapter: str | os.PathLike | bool | None = None,
) -> GenerativeEmbedder:
    """Load a model for embedding (and generation, reranking, RAG).

    Args:
        model: None for the bundled default (SmolLM2-135M-Instruct), a folder written by
            ``model.save`` (its ``genembed.json`` restores the settings), a local HF folder, a ``.gguf``
            file, or a hub id already in the local HF cache (a saved model or a plain HF model).
            Nothing is downloaded.
        adapter: a LoRA adapter folder (as written by ``genembed train``), or the name of an adapter
            shipped for the bundled backbone (:data:`SHIPPED_ADAPTERS`: ``"gircse"``, ``"joint"``; a
            local folder of that name wins). None: the shipped GIRCSE adapter when ``model`` is the
            bundled default, a saved model's own adapter, none for any other model. False: none (the
            raw backbone). An adapter trained with a next-token loss too (see
            :func:`trained_for_generation`; the shipped ``"joint"``) is used for generation as well
            (``model.generation_adapter = True``); an embedding-only adapter, like the shipped default,
            only for embedding. What the adapter was trained for is read from its saved training config
            (``model.trained_for``, :mod:`genembed.adapter_info`); ``encode`` warns when asked for
            another method or attention.
        dtype: ``"auto"`` (default: bfloat16 where the device computes it natively, such as CPUs with
            AVX512-BF16 or AMX, else float32; see :func:`genembed.backbone.default_dtype`; the
            environment variable ``GENEMBED_DTYPE`` overrides it), ``"float32"``, ``"bfloat16"`` or
            ``"float16"``.
        device: ``"auto"`` (default: CUDA, then Apple MPS, then the CPU), or a torch device such as
            ``"cpu"`` or ``"cuda:0"``.
        tau: GIRCSE soft-token softmax temperature (None: the saved model's, else 1.0).
        center: per-instruction centering in ``encode`` by default (see
            :mod:`genembed.encoders.centering`). None: the saved model's setting; else on with a
            shipped adapter, where it was measured to help (docs/experiments.md), off otherwise. The
            centres stored with the weights (``centres.safetensors`` in the saved folder or the
            adapter folder) are used, so their instructions cost no calibration encode.
        generation_adapter: the weights chat, reranking, RAG answers and stored KV states use. None: as
            above (the adapter when it was trained for generation too, else the base weights; a saved
            model: as it was saved). True / False: the embedding adapter / the base weights. A folder or
            shipped adapter name: a second LoRA adapter loaded beside the embedding one and used for
            generation only (``model.generation_adapter == "generation"``); embeddings do not change.

    Raises:
        MissingModelError: the model or adapter is not on disk; the message says how to get it.
        ValueError: a saved model's ``genembed.json`` is malformed (the message names the field).
        DamagedFileError: a file of the adapter is truncated or damaged (the message names it).
    """
    device = resolve_device(device)
    saved = saved_folder(model)
    if saved is not None:
        return _load_saved(
            saved, adapter=adapter, dtype=dtype, device=device, tau=tau, center=center, generator=generation_adapter
        )
    backbone = load_backbone(model, dtype=dtype, device=device)
    if adapter is None and model is None:
        adapter = default_adapter()
    adapter_path, trained_for, shipped = None, None, False
    if adapter not in (None, False):
        adapter_path = _adapter_path(adapter)
        attach_adapter(backbone, adapter_path)
        load_centres(backbone, adapter_path)
        trained_for = read_trained_for(adapter_path)
        shipped = adapter_path.resolve() in {folder.resolve() for folder in SHIPPED_ADAPTERS.values()}
    model = GenerativeEmbedder(
        backbone,
        tau=1.0 if tau is None else tau,
        adapter=adapter_path.name if adapter_path else None,
        center=shipped if center is None else center,
    )
    model.adapter_path = str(adapter_path.resolve()) if adapter_path else None
    model.trained_for = trained_for
    model.generation_adapter = bool(trained_for and trained_for.generation)
    _choose_generator(model, generation_adapter)
    return model


def _choose_generator(
    model: GenerativeEmbedder, choice: str | os.PathLike | bool | None, name: str | None = None
) -> None:
    """Apply ``load``'s ``generation_adapter`` argument: None keeps the model's default, a bool sets it, a
    folder or shipped name is loaded as the generation adapter (``name``: what to call it, else its folder's)."""
    if choice is None:
        return
    if isinstance(choice, bool):
        model.generation_adapter = choice
        return
    from .generation.adapters import GENERATION_ADAPTER, attach_generation_adapter

    folder = adapter_folder(_adapter_path(choice), "generation adapter folder")
    attach_generation_adapter(model.backbone, folder)
    model.generation_adapter_name = name or folder.resolve().name
    model.generation_adapter_path = str(folder.resolve())
    model.generation_adapter = GENERATION_ADAPTER


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
    folder: Path, *, adapter: Any, dtype: str, device: str, tau: float | None, center: bool | None, generator: Any
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
        backbone = load_backbone(source, dtype=dtype, device=device)
    except MissingModelError as exc:
        raise MissingModelError(
            f"{where}: backbone.source {settings['backbone']['source']!r} cannot be loaded ({exc}); "
            "save with save_backbone=True to keep the weights in the folder"
        ) from exc
    backbone.name = settings["backbone"]["name"]
    saved_adapter = (folder / "adapter_config.json").is_file()
    adapter_name, adapter_path = None, None
    if adapter is None and saved_adapter:
        attach_adapter(backbone, folder)
        adapter_path = folder
        adapter_name = settings.get("adapter") or folder.name
    elif adapter not in (None, False):
        adapter_path = _adapter_path(adapter)
        attach_adapter(backbone, adapter_path)
        adapter_name = adapter_path.name
    trained_for = read_trained_for(adapter_path) if adapter_path else None
    if adapter_path == folder or (adapter_path is None and not saved_adapter):  # the saved weights
        load_centres(backbone, folder)
    elif adapter_path is not None:
        load_centres(backbone, adapter_path)
    if adapter_path == folder:  # the saved model's own adapter: as it was saved
        joint = settings.get("generation_adapter") is True
    else:
        joint = bool(trained_for and trained_for.generation)
    encode = dict(settings["encode"])
    encode["tau"] = encode["tau"] if tau is None else tau
    encode["center"] = encode["center"] if center is None else center
    extra = {key: settings[key] for key in ("prompts", "default_prompt_name", "similarity_fn_name") if key in settings}
    try:
        model = GenerativeEmbedder(backbone, adapter=adapter_name, **encode, **extra)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
    model.generation_adapter = joint
    model.adapter_path = str(adapter_path.resolve()) if adapter_path else None
    model.trained_for = trained_for
    from .generation.adapters import GENERATION_ADAPTER

    if generator is None and (folder / GENERATION_ADAPTER / "adapter_config.json").is_file():  # saved with one
        _choose_generator(model, folder / GENERATION_ADAPTER, name=settings.get("generation_adapter_name"))
        if settings.get("generation_adapter") != GENERATION_ADAPTER:  # saved generating with other weights
            model.generation_adapter = joint
    else:
        _choose_generator(model, generator)
    digest = settings.get("calibration_sha256")
    if model.center and digest and digest != calibration_digest():
        logger.warning(
            "%s was saved with other calibration texts than this genembed's: centred embeddings will differ", where
        )
    return model


def trained_for_generation(adapter_path: str | os.PathLike) -> bool:
    """Whether the adapter in ``adapter_path`` was trained with a next-token loss (GRIT joint training).

    Read from the training config saved beside it (``genembed_train.yaml`` or ``training_config.yaml``):
    generative files with a positive weight. Such an adapter also runs chat, reranking and RAG; an
    embedding-only one (or one without a saved config) leaves them on the base weights.
    """
    trained_for = read_trained_for(adapter_path)
    return bool(trained_for and trained_for.generation)


def adapter_folder(path: str | os.PathLike, what: str = "adapter folder") -> Path:
    """``path`` as a Path, checked to hold a readable peft LoRA adapter; ``what`` names it in the error.

    The config must parse and ``adapter_model.safetensors`` must be complete: its header parsed and its
    size matching it. (A folder holding only ``adapter_model.bin`` is left to peft, which reads it with
    ``torch.load(weights_only=True)``: tensors only, no code.)

    Raises:
        MissingModelError: no ``adapter_config.json`` in ``path``.
        DamagedFileError: the config or the weights file is truncated or damaged (the message names it).
    """
    from ._files import DamagedFileError, check_safetensors, read_json

    folder = Path(os.path.expanduser(str(path)))
    config = folder / "adapter_config.json"
    if not config.is_file():
        raise MissingModelError(f"{what} {folder} holds no adapter_config.json (a peft LoRA adapter)")
    if folder.resolve() == DEFAULT_ADAPTER.resolve():
        fix = "The adapter shipped with genembed is damaged: reinstall genembed."
    else:
        fix = f"Copy the adapter folder {folder} again, or retrain it with `genembed train`."
    if not isinstance(read_json(config, fix=fix), dict):
        raise DamagedFileError(f"{config} is not a JSON object. {fix}")
    weights = folder / "adapter_model.safetensors"
    if weights.is_file() or not (folder / "adapter_model.bin").is_file():
        check_safetensors(weights, fix=fix)
    return folder


def attach_adapter(backbone, adapter_path: Path) -> None:
    """Wrap the backbone's model with a saved LoRA adapter (peft), in eval mode."""
    from peft import PeftModel

    folder = adapter_folder(adapter_path)
    with quiet_peft():
        backbone.model = PeftModel.from_pretrained(backbone.model, str(folder)).eval()

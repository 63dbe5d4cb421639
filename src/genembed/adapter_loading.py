"""LoRA adapters for :func:`genembed.load`: the shipped ones by name, an adapter argument resolved to a
folder (local, shipped or from the hub), checked and attached with peft, and the generation adapter choice."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._peft import quiet_peft
from .adapter_info import read_trained_for
from .backbone.default_model import MissingModelError
from .backbone.hub import hub_snapshot

__all__ = [
    "DEFAULT_ADAPTER",
    "SHIPPED_ADAPTERS",
    "adapter_folder",
    "adapter_name",
    "attach_adapter",
    "choose_generator",
    "record_adapter",
    "default_adapter",
    "resolve_adapter",
    "shipped_adapter",
    "trained_for_generation",
]

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


def resolve_adapter(adapter: str | os.PathLike, local_files_only: bool = False) -> Path:
    """An adapter argument as a folder: a local folder wins over a shipped adapter of the same name, which
    wins over a hub id (its snapshot in the HF cache, downloaded when missing and allowed)."""
    path = Path(os.path.expanduser(str(adapter)))
    if path.exists() or not isinstance(adapter, str):
        return path
    if adapter in SHIPPED_ADAPTERS:
        folder = shipped_adapter(adapter)
        if folder is None:
            raise MissingModelError(f"this install does not ship the {adapter!r} adapter ({SHIPPED_ADAPTERS[adapter]})")
        return folder
    from .backbone.hub import looks_like_path

    return path if looks_like_path(adapter) else hub_snapshot(adapter, local_files_only=local_files_only)


def adapter_name(adapter: str | os.PathLike, folder: Path) -> str:
    """What a model calls its adapter: the hub id for one from the hub, else the folder's name."""
    from .backbone.hub import hub_cache_dir

    return str(adapter) if hub_cache_dir().resolve() in folder.resolve().parents else folder.name


def choose_generator(model: Any, choice: str | os.PathLike | bool | None, name: str | None = None) -> None:
    """Apply ``load``'s ``generation_adapter`` argument: None keeps the model's default, a bool sets it, a
    folder or shipped name is loaded as the generation adapter (``name``: what to call it, else its folder's)."""
    if choice is None:
        return
    if isinstance(choice, bool):
        model.generation_adapter = choice
        return
    from .generation.adapters import GENERATION_ADAPTER, attach_generation_adapter

    folder = adapter_folder(resolve_adapter(choice), "generation adapter folder")
    attach_generation_adapter(model.backbone, folder)
    model.generation_adapter_name = name or folder.resolve().name
    model.generation_adapter_path = str(folder.resolve())
    model.generation_adapter = GENERATION_ADAPTER


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


def record_adapter(model: Any, adapter_path: Path | None, generation_adapter: str | os.PathLike | bool | None) -> None:
    """Note on a freshly built model which adapter it carries (``adapter_path``, ``trained_for``), generate
    with it when it was trained for generation too, then apply ``load``'s ``generation_adapter`` argument."""
    model.adapter_path = str(adapter_path.resolve()) if adapter_path else None
    model.trained_for = read_trained_for(adapter_path) if adapter_path else None
    model.generation_adapter = bool(model.trained_for and model.trained_for.generation)
    choose_generator(model, generation_adapter)

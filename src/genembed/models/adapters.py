"""LoRA adapters for :func:`genembed.load`: the shipped ones by name, and the adapters one load attaches
(:func:`choose_adapters`: the embedding adapter and a generation adapter, resolved to checked folders, local,
shipped or from the hub, before the backbone loads). :mod:`genembed.models.assemble` attaches them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..backbone.default_model import MissingModelError
from ..backbone.hub import hub_cache_dir, hub_snapshot, looks_like_path
from .trained_for import read_trained_for

if TYPE_CHECKING:
    from .source import ModelSource

__all__ = [
    "DEFAULT_ADAPTER",
    "FORMER_NAMES",
    "SHIPPED_ADAPTERS",
    "ChosenAdapters",
    "adapter_folder",
    "adapter_name",
    "choose_adapters",
    "current_name",
    "default_adapter",
    "is_shipped",
    "resolve_adapter",
    "resolve_generator",
    "shipped_adapter",
    "shipped_folders",
    "trained_for_generation",
]

_ADAPTERS = Path(__file__).parent.parent / "adapters"
# the LoRA adapter trained for the bundled backbone (`make default-adapter`, MODEL_CARD.md), jointly (GRIT +
# GIRCSE): it embeds (GIRCSE), and, trained with a next-token loss too (configs/joint-stage-3.yaml),
# generates, reranks and hands its KV states to the generator
DEFAULT_ADAPTER = _ADAPTERS / "smollm2-135m-joint"
# the names shipped adapters' folders had before (former: today's), so that what a model recorded under one
# (an index's model name, the adapter its stored KV states came from) still matches the model today
FORMER_NAMES = {"smollm2-135m-gircse": DEFAULT_ADAPTER.name}
# adapters shipped for the bundled backbone, by the name `load(adapter=NAME)` and `--adapter NAME` take: the
# default is "joint"; "gircse" (its name before it generated too) and the folder's names are aliases
SHIPPED_ADAPTERS = {"joint": DEFAULT_ADAPTER, "gircse": DEFAULT_ADAPTER, DEFAULT_ADAPTER.name: DEFAULT_ADAPTER}
SHIPPED_ADAPTERS |= {former: _ADAPTERS / name for former, name in FORMER_NAMES.items()}


def default_adapter() -> Path | None:
    """The adapter shipped for the bundled backbone, or None in a build that does not hold it."""
    return DEFAULT_ADAPTER if (DEFAULT_ADAPTER / "adapter_config.json").is_file() else None


def shipped_adapter(name: str) -> Path | None:
    """The folder of the shipped adapter called ``name`` (a key of :data:`SHIPPED_ADAPTERS`), or None when
    ``name`` names none or this build does not hold it."""
    folder = SHIPPED_ADAPTERS.get(name)
    return folder if folder is not None and (folder / "adapter_config.json").is_file() else None


def is_shipped(folder: Path) -> bool:
    """Whether ``folder`` is one of the adapters shipped with genembed."""
    return folder.resolve() in {shipped.resolve() for shipped in SHIPPED_ADAPTERS.values()}


def current_name(recorded: str) -> str:
    """``recorded`` (a model name ``"backbone+adapter"``, an adapter name, or ``"adapter@sha256:..."``) with a
    shipped adapter's former name (:data:`FORMER_NAMES`) replaced by today's; anything else unchanged."""
    head, plus, adapter = recorded.rpartition("+")
    name, at, digest = adapter.partition("@")
    return head + plus + FORMER_NAMES.get(name, name) + at + digest


def shipped_folders() -> list[Path]:
    """Each folder :data:`SHIPPED_ADAPTERS` names, once (an alias names a folder another name names)."""
    return list(dict.fromkeys(SHIPPED_ADAPTERS.values()))


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
    return path if looks_like_path(adapter) else hub_snapshot(adapter, local_files_only=local_files_only)


def adapter_name(adapter: str | os.PathLike, folder: Path) -> str:
    """What a model calls its adapter: the hub id for one from the hub, else the folder's name."""
    return str(adapter) if hub_cache_dir().resolve() in folder.resolve().parents else folder.name


def resolve_generator(
    choice: str | os.PathLike | bool | None, local_files_only: bool = False
) -> tuple[Path | None, str | bool | None]:
    """``load``'s ``generation_adapter`` argument as ``(folder, asked)``: a folder or shipped name is a
    generation adapter to load beside the embedding one, which asks for ``"generation"``; one of
    :data:`~genembed.generation.weights.WEIGHTS` (or a bool, their former spelling) names the weights
    (``(None, choice)``); None leaves them to the rule (``(None, None)``;
    :func:`~genembed.generation.weights.choose_weights`).

    Raises:
        MissingModelError / DamagedFileError: the folder holds no readable LoRA adapter.
    """
    from ..generation.weights import GENERATION, WEIGHTS

    if choice is None or isinstance(choice, bool) or choice in WEIGHTS:
        return None, choice  # type: ignore[return-value]
    return adapter_folder(resolve_adapter(choice, local_files_only), "generation adapter folder"), GENERATION


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
    from .._files import DamagedFileError, check_safetensors, read_json

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


@dataclass(frozen=True)
class ChosenAdapters:
    """The adapters one :func:`genembed.load` attaches (:func:`choose_adapters`), as checked folders."""

    path: Path | None = None  # the embedding adapter (None: none)
    name: str | None = None  # what the model calls it (model.adapter)
    shipped: bool = False  # one of the adapters shipped with genembed
    generator: Path | None = None  # a generation adapter attached beside it (None: none)
    generator_name: str | None = None  # what the model calls that one (None: its folder's name)
    generates: str | bool | None = None  # the weights the caller asked to generate with (None: not said)


def choose_adapters(
    source: ModelSource,
    adapter: str | os.PathLike | bool | None,
    generation_adapter: str | os.PathLike | bool | None,
    local_files_only: bool = False,
) -> ChosenAdapters:
    """The adapters a load of ``source`` attaches, before the backbone loads: ``load``'s ``adapter`` (None:
    a saved model's, a published or adapter repo's own, the shipped default for the bundled backbone, else
    none; False: none) and ``generation_adapter`` (:func:`resolve_generator`; a saved model's own
    ``generation/`` adapter when the caller says nothing). Each folder is checked (:func:`adapter_folder`),
    so a missing or damaged adapter fails before any weights load. A saved model's adapters are named here
    by their folders; :func:`genembed.load` names them as its ``genembed.json`` does.

    Raises:
        MissingModelError / DamagedFileError: an adapter folder holds no readable LoRA adapter.
    """
    from ..generation.adapters import GENERATION_ADAPTER

    generator, generates = resolve_generator(generation_adapter, local_files_only)
    own: Path | None = None  # the source's own adapter
    if source.kind == "saved" or source.own_adapter:
        assert source.folder is not None
        if (source.folder / "adapter_config.json").is_file():
            own = source.folder
        saved_generator = source.folder / GENERATION_ADAPTER
        asked = generator is not None or generates is not None
        if source.kind == "saved" and not asked and (saved_generator / "adapter_config.json").is_file():
            generator = adapter_folder(saved_generator, "generation adapter folder")
    elif adapter is None and source.kind == "bundled":
        adapter = default_adapter()
    if adapter is None and own is not None:
        name = source.name if source.own_adapter and source.name else own.name
        return ChosenAdapters(adapter_folder(own), name, is_shipped(own), generator, None, generates)
    if adapter is None or adapter is False:
        return ChosenAdapters(None, None, False, generator, None, generates)
    path = adapter_folder(resolve_adapter(adapter, local_files_only))
    return ChosenAdapters(path, adapter_name(adapter, path), is_shipped(path), generator, None, generates)

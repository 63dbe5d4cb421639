"""``model.save(folder)``: a model and the settings it embeds with, for ``genembed.load(folder)``
(:mod:`genembed.models.load` reads the folder back: :func:`read_settings` here is the one reader of
``genembed.json``).

A saved folder holds:

- ``genembed.json``: the settings (:data:`SETTINGS_FILE`, below);
- ``adapter_config.json`` + ``adapter_model.safetensors``: the LoRA adapter, when the model has one
  (peft's own format, so ``genembed.load(base, adapter=folder)`` and peft read it too);
- ``generation/``: the generation adapter loaded beside it, when there is one (peft's layout for a
  second adapter);
- ``backbone/``: the backbone's weights and tokenizer (a transformers folder), when they cannot be
  found again by name on another machine (a model built in memory, or loaded from a local folder or
  .gguf file) or when asked with ``save_backbone=True``;
- the adapter's training config (``genembed_train.yaml`` or ``training_config.yaml``), when it has one;
- ``README.md``: a model card (:mod:`genembed.models.card`).

``genembed.json`` records the backbone by what loads it (``"bundled"`` for the bundled default, a hub id,
``"backbone/"`` inside the folder, or, saved with ``save_backbone=False``, a local folder's path relative to
the saved one, ``"../base"``), the encoding defaults (method, steps, attention, prompt format, tau,
max_length, centering, truncate_dim: the names ``genembed.load`` takes), the named instructions (``prompts``,
``default_prompt_name``), ``similarity_fn_name``, which weights generation uses (and the generation adapter's
name), and, with centering on, a digest of the calibration texts the centers come from, so that a change to
the bundled texts is reported on load. With centering on, ``centers.safetensors`` holds the centers of the
named instructions (:func:`genembed.encoders.centering.save_centers`), so the first ``encode`` with one of
them after loading computes none. No saved file holds an absolute path of the machine that wrote it
(``adapter_config.json`` names the base model by name). Copy the folder into the HF cache layout
(``models--org--name/snapshots/<rev>/``, e.g. by uploading it and downloading it with ``hf download``) and
``genembed.load("org/name")`` finds it offline.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
import yaml

from .. import __version__
from ..backbone.cache import atomic_directory
from ..backbone.default_model import DEFAULT_MODEL_HUB_ID
from ..backbone.loading import BUNDLED
from ..encoders.model_settings import ModelSettings
from .card import model_card, portable
from .trained_for import read_training_config

__all__ = [
    "BACKBONE_SUBFOLDER",
    "CARD_FILE",
    "ENCODE_KEYS",
    "FORMAT",
    "SETTINGS_FILE",
    "SAVED_EXTRAS",
    "SavableModel",
    "adapter_settings",
    "calibration_digest",
    "read_settings",
    "save_model",
    "settings_record",
    "write_settings",
]

SETTINGS_FILE = "genembed.json"
CARD_FILE = "README.md"  # the model card (genembed.models.card)
BACKBONE_SUBFOLDER = "backbone"
FORMAT = 2  # genembed.json layout version (2 added encode.max_length)
_READABLE = (1, 2)  # format 1 lacks encode.max_length: the default, DEFAULT_MAX_LENGTH
# genembed.json's fields: those of ModelSettings, in its "encode" section or at the top level
ENCODE_KEYS = ModelSettings.fields_in("encode")
SAVED_EXTRAS = ModelSettings.fields_in(None)
# encode keys older formats may lack, with their value (the field's default)
_OPTIONAL = {"max_length": ModelSettings.__dataclass_fields__["max_length"].default}
_WEIGHTS_KEYS = ("generation_adapter", "generation_adapter_name")  # which weights generate (not settings)


class SavableModel(Protocol):
    """What :func:`save_model` reads of a model (:class:`genembed.GenerativeEmbedder` is one)."""

    backbone: Any
    adapter: str | None
    adapter_path: str | None
    center: bool
    prompts: dict[str, str | None]

    def check_settings(self) -> Any: ...

    def embed_settings(self, **changes: Any) -> Any: ...


def save_model(
    model: SavableModel,
    folder: str | os.PathLike,
    *,
    save_backbone: bool | None = None,
    scores: Mapping[str, float] | None = None,
) -> Path:
    """Write ``model`` into ``folder`` atomically (see the module docstring); return the folder.

    Args:
        model: the model to save.
        folder: where to write; an existing folder is replaced only if it is empty or an earlier save.
        save_backbone: also write the backbone's weights into ``folder/backbone``. None: when the
            backbone cannot be found by name on another machine (built in memory, or loaded from a
            local folder or .gguf file). False with a local backbone records its path relative to
            ``folder``. Pass True after changing its weights in place.
        scores: task name: score (x100), for the model card, when you know them.

    Raises:
        ValueError: a setting the model holds is invalid (``model.check_settings()``), or ``folder`` exists
            and holds something other than a genembed save; either way nothing is written.
    """
    model.check_settings()  # before anything is written: a bad setting leaves no folder behind
    folder = Path(os.path.expanduser(str(folder)))
    if folder.exists() and (not folder.is_dir() or (any(folder.iterdir()) and not (folder / SETTINGS_FILE).is_file())):
        raise ValueError(
            f"{folder} exists and is not an earlier genembed save (no {SETTINGS_FILE}); choose a new folder"
        )
    backbone = model.backbone
    lm = backbone.model
    has_adapter = hasattr(lm, "peft_config")
    if save_backbone is None:
        save_backbone = backbone.source is None or _is_local(backbone.source)
    training = read_training_config(model.adapter_path) if has_adapter and model.adapter_path else None
    with atomic_directory(folder, replace=True) as tmp:
        if has_adapter:
            _save_adapters(lm, tmp, base_model=backbone.name)
        if save_backbone:
            _save_base_weights(lm, backbone.tokenizer, tmp / BACKBONE_SUBFOLDER)
        if training is not None:  # how the adapter was trained: read back by load() (trained_for) and the card
            config = yaml.safe_dump(portable(training[1]), sort_keys=False)
            (tmp / training[0].name).write_text(config, encoding="utf-8")
        settings = settings_record(
            backbone,
            folder,
            adapter=model.adapter if has_adapter else None,
            saved=model.settings.to_dict() | {key: getattr(model, key) for key in _WEIGHTS_KEYS},
            center=model.center,
            saved_backbone=save_backbone,
        )
        write_settings(tmp, settings)
        card = model_card(
            settings,
            title=folder.resolve().name,
            base_model=_hub_id(backbone),
            training=portable(training[1]) if training else None,
            scores=scores,
        )
        (tmp / CARD_FILE).write_text(card, encoding="utf-8")
        if model.center:
            _save_named_centers(model, tmp)
    return folder


def settings_record(
    backbone: Any,
    folder: Path,
    *,
    adapter: str | None,
    saved: Mapping[str, Any],
    center: bool = False,
    saved_backbone: bool = False,
) -> dict[str, Any]:
    """What ``genembed.json`` holds for a model whose files go to ``folder``: the backbone by what loads it
    (``saved_backbone``: the copy in ``folder/backbone``; a local folder by its path relative to
    ``folder``; the bundled default or a hub id by name; None: built in memory), the adapter's name and
    ``saved``: the settings (:meth:`ModelSettings.to_dict <genembed.encoders.model_settings.ModelSettings.to_dict>`,
    at least its ``encode`` section) and which weights generate. ``model.save`` and ``genembed train``
    (beside its adapter) write it."""
    source = backbone.source
    if saved_backbone:
        source = f"{BACKBONE_SUBFOLDER}/"
    elif _is_local(source):  # no machine's absolute path in a saved file
        source = Path(os.path.relpath(source, Path(folder).resolve())).as_posix()
        source = source if source.startswith(".") else f"./{source}"
    return {
        "format": FORMAT,
        "genembed_version": __version__,
        "backbone": {"name": backbone.name, "source": source},
        "adapter": adapter,
        **dict(saved),
        "calibration_sha256": calibration_digest() if center else None,
    }


def write_settings(folder: str | os.PathLike, settings: Mapping[str, Any]) -> None:
    """Write ``settings`` (:func:`settings_record`) as ``folder/genembed.json``."""
    (Path(folder) / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")


def adapter_settings(folder: str | os.PathLike | None) -> dict[str, Any]:
    """The settings an adapter folder carries in its ``genembed.json`` (written by ``genembed train``
    beside the adapter, or by ``model.save``): its ``encode`` settings but centring (which follows the
    centers stored with the weights, :func:`genembed.models.assemble.centering`), and its named
    instructions and similarity; empty for a folder without one (adapters written before it).

    Raises:
        ValueError: the file is malformed (the message names the field).
    """
    if folder is None or not (Path(folder) / SETTINGS_FILE).is_file():
        return {}
    settings = read_settings(folder)
    encode = {key: value for key, value in settings["encode"].items() if key in ENCODE_KEYS and key != "center"}
    return encode | {key: settings[key] for key in SAVED_EXTRAS if key in settings}


def _is_local(source: str | None) -> bool:
    return source is not None and os.path.isabs(source)


def _hub_id(backbone: Any) -> str | None:
    """The backbone's hub id (the model card's ``base_model``), or None when it was not loaded by one."""
    if backbone.source == BUNDLED:
        return DEFAULT_MODEL_HUB_ID
    if backbone.source and not os.path.isabs(backbone.source):
        return backbone.source
    return None


def _save_adapters(lm: Any, out: Path, *, base_model: str) -> None:
    """peft's adapter files, naming the base model by ``base_model`` (not the local folder it was loaded
    from) and without peft's hub lookup: genembed never resizes the vocabulary, so the embedding matrices
    never need saving with the adapter. peft's empty model card is replaced by the caller's."""
    configs = lm.peft_config.values()
    before = [config.base_model_name_or_path for config in configs]
    try:
        for config in configs:
            config.base_model_name_or_path = base_model
        lm.save_pretrained(out, safe_serialization=True, save_embedding_layers=False)
    finally:
        for config, name in zip(configs, before, strict=True):
            config.base_model_name_or_path = name


def read_settings(folder: str | os.PathLike) -> dict[str, Any]:
    """The settings in ``folder/genembed.json``, checked for the fields :func:`genembed.load` needs.

    Raises:
        ValueError: the file is not JSON, has another format version, or lacks a field (named).
    """
    path = Path(folder) / SETTINGS_FILE
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(settings, dict) or settings.get("format") not in _READABLE:
        found = settings.get("format") if isinstance(settings, dict) else None
        raise ValueError(f"{path}: format {found!r} is not one of {_READABLE}; saved by a different genembed version?")
    for section, keys in (("backbone", ("name", "source")), ("encode", ENCODE_KEYS)):
        if not isinstance(settings.get(section), dict):
            raise ValueError(f"{path}: field {section!r} is missing or not an object")
        for key in keys:
            if key not in settings[section] and key not in _OPTIONAL:
                raise ValueError(f"{path}: field {section}.{key} is missing")
    settings["encode"] = _OPTIONAL | settings["encode"]
    return settings


def calibration_digest() -> str:
    """sha256 of the bundled calibration texts the centering centers are computed from."""
    from ..encoders.centering import calibration_digest as digest

    return digest()


def _save_named_centers(model: SavableModel, folder: Path) -> None:
    """``centers.safetensors``: the centers of the model's named instructions (``prompts``) with its
    default settings, plus those it was loaded with, so that loading it never computes them."""
    from ..encoders.centering import save_centers

    named = [instruction for instruction in model.prompts.values() if instruction is not None]
    save_centers(model.backbone, folder, model.embed_settings(), named)


def _save_base_weights(lm: Any, tokenizer: Any, out: Path) -> None:
    """Save the backbone without any LoRA layers: peft keeps the original weights as ``base_layer``."""
    base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    state = None
    if base is not lm:
        state = {}
        for name, tensor in base.state_dict().items():
            if "lora_" in name or ".modules_to_save." in name:
                continue
            state[name.replace(".base_layer.", ".").replace(".original_module.", ".")] = tensor
    with torch.no_grad():
        base.save_pretrained(out, state_dict=state, safe_serialization=True)
    tokenizer.save_pretrained(out)

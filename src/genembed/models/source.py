"""Where a model comes from: what :func:`genembed.load`'s ``model`` argument names, resolved before any
weights load.

=================  =========================================================  ===========================
kind               ``model``                                                  backbone loaded from
=================  =========================================================  ===========================
``bundled``        None                                                       the bundled default
``saved``          a folder written by ``model.save`` (or its hub snapshot)   its ``genembed.json``
``published``      a hub id of :data:`genembed.models.published.PUBLISHED`    the id, or the adapter's base
``adapter``        a hub id of a LoRA adapter repo                            the base its config names
``local``          a local HF folder or a ``.gguf`` file                      the path
``hub``            any other hub id                                           the id (HF cache)
=================  =========================================================  ===========================
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backbone.default_model import MissingModelError
from ..backbone.hub import hub_snapshot, looks_like_path
from .published import PublishedModel, published_model
from .save import SETTINGS_FILE

__all__ = ["ModelSource", "adapter_base", "is_adapter_folder", "resolve_source"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSource:
    """A resolved ``model`` argument (see the module docstring)."""

    kind: str  # bundled | saved | published | adapter | local | hub
    backbone: str | os.PathLike | None  # what load_backbone loads (None: the bundled default; saved: read later)
    folder: Path | None = None  # the saved folder, or the hub snapshot of a published or adapter repo
    entry: PublishedModel | None = None  # a published checkpoint's row
    own_adapter: bool = False  # the folder holds a LoRA adapter of its own (an adapter or published repo)
    name: str | None = None  # the hub id as spelled (the HF cache folder follows the spelling)
    # the settings the source brings (a published checkpoint's: PublishedModel.settings); empty: genembed's
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.entry is not None and not self.settings:
            object.__setattr__(self, "settings", self.entry.settings())


def resolve_source(
    model: str | os.PathLike | None, local_files_only: bool = False, as_published: str | None = None
) -> ModelSource:
    """Where ``model`` comes from; a hub id is looked up in the local HF cache (downloaded into it when
    missing and allowed).

    A local folder runs as a published model when ``as_published`` names one (a hub id of
    :data:`~genembed.models.published.PUBLISHED`), or when it is a snapshot in an HF cache
    (``.../models--ORG--NAME/snapshots/REV``) of one.

    Raises:
        MissingModelError: a hub id that is not cached and cannot be downloaded, or an adapter repo whose
            base model cannot be told.
        ValueError: ``as_published`` is not a published model's id.
    """
    named = None
    if as_published is not None:
        named = published_model(as_published)
        if named is None:
            raise ValueError(f"as_published must be a hub id of `genembed models`, got {as_published!r}")
    if model is None:
        return ModelSource("bundled", None)
    path = Path(os.path.expanduser(str(model)))
    if path.exists() or path.suffix == ".gguf":
        if path.is_dir() and (path / SETTINGS_FILE).is_file():
            return ModelSource("saved", None, folder=path)
        entry = named or _cached_snapshot_of(path)
        if entry is not None and path.is_dir():
            return ModelSource("local", model, folder=path, entry=entry, name=entry.id)
        return ModelSource("local", model)
    folder = hub_snapshot(str(model), local_files_only=local_files_only)
    if (folder / SETTINGS_FILE).is_file():
        return ModelSource("saved", None, folder=folder, name=str(model))
    entry = named or published_model(str(model))
    own_adapter = is_adapter_folder(folder)
    if entry is None and not own_adapter:
        return ModelSource("hub", str(model), name=str(model))
    base = adapter_base(folder, entry.base if entry else None) if own_adapter else str(model)
    kind = "published" if entry is not None else "adapter"
    return ModelSource(kind, base, folder=folder, entry=entry, own_adapter=own_adapter, name=str(model))


def _cached_snapshot_of(path: Path) -> PublishedModel | None:
    """The published model whose HF cache snapshot ``path`` is (``models--ORG--NAME/snapshots/REV``), or None."""
    parts = path.resolve().parts
    if len(parts) < 3 or parts[-2] != "snapshots" or not parts[-3].startswith("models--"):
        return None
    return published_model(parts[-3].removeprefix("models--").replace("--", "/", 1))


def is_adapter_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a LoRA adapter only (``adapter_config.json``, no model ``config.json``)."""
    return (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file()


def adapter_base(folder: Path, fallback: str | None = None) -> str | Path:
    """The base model of the adapter in ``folder``: its ``adapter_config.json``'s
    ``base_model_name_or_path`` when that is a local folder or a hub id, else ``fallback`` (a published
    adapter's base from the table: adapters trained on a local copy name a path of the authors' machine).

    Raises:
        MissingModelError: the config names no usable base and there is no fallback.
    """
    from .._files import read_json

    config = read_json(folder / "adapter_config.json", fix=f"Download or copy the adapter {folder} again.")
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if isinstance(base, str) and base:
        local = Path(os.path.expanduser(base))
        if local.is_dir():
            return local
        if not looks_like_path(base):
            if fallback and base != fallback:
                logger.info("%s names base %s (the published table: %s); using the adapter's", folder, base, fallback)
            return base
    if fallback is None:
        raise MissingModelError(
            f"{folder / 'adapter_config.json'} names base model {base!r}, which is neither a local folder nor a "
            "hub id; load the base yourself: genembed.load(BASE, adapter=FOLDER)"
        )
    logger.info("%s names base %r, not a hub id; using the published base %s", folder, base, fallback)
    return fallback

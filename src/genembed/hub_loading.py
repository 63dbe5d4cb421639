"""``genembed.load`` for hub checkpoints that are more than a plain model: the published GIRCSE and GritLM
checkpoints (:mod:`genembed.published`), loaded with their authors' settings, and LoRA adapter repos,
loaded on the base model their ``adapter_config.json`` names."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from .adapter_loading import adapter_name, attach_adapter, record_adapter, resolve_adapter
from .backbone.default_model import MissingModelError
from .backbone.hub import looks_like_path
from .backbone.loading import load_backbone
from .encoders.centering import load_centers
from .model import GenerativeEmbedder
from .published import PublishedModel

__all__ = ["adapter_base", "is_adapter_folder", "load_hub_checkpoint"]

logger = logging.getLogger(__name__)


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
    from ._files import read_json

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


def load_hub_checkpoint(
    repo: str,
    folder: Path,
    entry: PublishedModel | None,
    *,
    adapter: Any,
    tau: float | None,
    center: bool | None,
    generation_adapter: Any,
    **backbone_options: Any,
) -> GenerativeEmbedder:
    """A hub checkpoint as a model: a published one (``entry``) with its authors' settings, or a LoRA
    adapter repo (``folder`` holds the adapter) on its base model with genembed's defaults.

    Args:
        repo: the hub id.
        folder: its local snapshot.
        entry: its row of :data:`genembed.published.PUBLISHED`, or None.
        adapter: None: the checkpoint's own adapter (for an adapter repo); False: none (the bare base);
            a folder or hub id: that adapter instead.
        tau, center, generation_adapter: as :func:`genembed.load` (None: the entry's; centering off, but on
            for an adapter repo that stores centers, ``centers.safetensors``, which are then used).
        backbone_options: dtype, device, local_files_only, device_map, quantization for
            :func:`~genembed.backbone.loading.load_backbone`.
    """

    own_adapter = is_adapter_folder(folder)
    base = adapter_base(folder, entry.base if entry else None) if own_adapter else repo
    backbone = load_backbone(base, **backbone_options)
    if own_adapter and isinstance(base, str):
        backbone.name = base
    adapter_path, own_name = None, None
    if adapter is None and own_adapter:
        adapter_path, own_name = folder, repo
    elif adapter not in (None, False):
        adapter_path = resolve_adapter(adapter, backbone_options.get("local_files_only", False))
        own_name = adapter_name(adapter, adapter_path)
    stored = 0
    if adapter_path is not None:
        attach_adapter(backbone, adapter_path)
        stored = load_centers(backbone, adapter_path)  # centers written beside the adapter (make centers)
    settings: dict[str, Any] = {}  # genembed's defaults, unless the table says otherwise
    if entry is not None:
        settings = {"method": entry.method, "attention": entry.attention, "prompt_format": entry.prompt_format}
        settings |= {"prompts": entry.prompts(), "tau": entry.tau} | ({"steps": entry.steps} if entry.steps else {})
    if tau is not None:
        settings["tau"] = tau
    model = GenerativeEmbedder(
        backbone,
        adapter=own_name,
        # centering is genembed's idea, not the authors': off for a published checkpoint unless asked; on for
        # another adapter repo that stores centers (genembed's adapters ship them: they are used centred)
        center=(entry is None and stored > 0) if center is None else center,
        **settings,
    )
    record_adapter(model, adapter_path, generation_adapter)
    return model

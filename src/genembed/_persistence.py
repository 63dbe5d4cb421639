"""Persistence, the collaborator :class:`genembed.GenerativeEmbedder` saves through: ``save`` (the format in
:mod:`genembed.models.save`). It holds no model: ``save`` takes the model it writes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .models.save import SavableModel

__all__ = ["Persistence"]


class Persistence:
    """``save`` (see :class:`genembed.GenerativeEmbedder`), for the model each call names."""

    def save(
        self,
        model: SavableModel,
        folder: str | os.PathLike,
        *,
        save_backbone: bool | None = None,
        scores: dict[str, float] | None = None,
    ) -> Path:
        """Write the model to ``folder`` so that ``genembed.load(folder)`` restores it with its settings.

        Writes the LoRA adapter (when there is one) with its training config, ``genembed.json``
        (method, steps, tau, prompt format, centering, prompts, backbone), a model card (``README.md``)
        and, with centering on, ``centers.safetensors`` (the named instructions' centers, computed now
        if not yet known), atomically, with no absolute path of this machine; see :mod:`genembed.models.save`.
        The settings are checked first (:meth:`check_settings`): an invalid one writes nothing.

        Args:
            folder: the folder to write (replaced if it holds an earlier save).
            save_backbone: also write the backbone's weights and tokenizer. None: only when the backbone
                cannot be found by name on another machine (built in memory, or loaded from a local
                folder or .gguf file).
            scores: task name: score (x100), shown in the model card.

        Returns:
            The folder.

        Raises:
            ValueError: a bad setting (nothing is written), or ``folder`` holds something else.
        """
        from .models.save import save_model

        return save_model(model, folder, save_backbone=save_backbone, scores=scores)

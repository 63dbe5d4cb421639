"""The embedding-distillation map (``loss.regress_weight > 0``) on disk: ``teacher_map.safetensors`` beside
the trained adapter.

The map turns the student's z_k into the teacher's space; it only serves training, so
``genembed.load`` never reads it and it is not part of an exported or shipped model. It is kept in
the run's folder so that a later stage starting from this adapter (``lora.init_from``) continues the
same map instead of learning a new one from random weights.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from .._files import atomic_write, read_safetensors

if TYPE_CHECKING:  # the loss saves and loads itself through this module
    from .losses.embedding_distill import EmbeddingDistillation

__all__ = ["MAP_FILE", "load_teacher_map", "save_teacher_map"]

MAP_FILE = "teacher_map.safetensors"
logger = logging.getLogger(__name__)


def save_teacher_map(loss: EmbeddingDistillation, folder: str | Path) -> Path:
    """Write the map's weights into ``folder`` atomically; return the file."""
    from safetensors.torch import save_file

    path = Path(folder) / MAP_FILE
    tensors = {key: value.detach().cpu().contiguous() for key, value in loss.state_dict().items()}
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp)))
    return path


def load_teacher_map(loss: EmbeddingDistillation, folder: str | Path) -> bool:
    """Load the map saved in ``folder`` if there is one of the same shape; return whether it was loaded
    (a shipped adapter has none: the map then starts fresh)."""
    path = Path(folder) / MAP_FILE
    if not path.is_file():
        return False
    tensors = read_safetensors(path, fix=f"Delete {path} to start the map afresh.")
    weight = tensors.get("map.weight")
    if weight is None or weight.shape != loss.map.weight.shape:
        got = None if weight is None else tuple(weight.shape)
        logger.warning(
            "%s holds a map of shape %s, not %s: starting a fresh one", path, got, tuple(loss.map.weight.shape)
        )
        return False
    loss.load_state_dict(tensors)
    return True

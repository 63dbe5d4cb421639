"""The weights of the objective's trained terms on disk: the embedding-distillation map
(``loss.regress_weight > 0``), ``teacher_map.safetensors`` beside the trained adapter.

The map turns the student's z_k into the teacher's space; it only serves training, so
``genembed.load`` never reads it and it is not part of an exported or shipped model. It is kept in
the run's folder so that a later stage starting from this adapter (``lora.init_from``) continues the
same map instead of learning a new one from random weights. The loss itself does no file I/O: the
training loop saves its trained terms here and the run set-up loads them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from torch import nn

from .._files import atomic_write, read_safetensors

__all__ = ["MAP_FILE", "load_teacher_map", "save_teacher_map"]

MAP_FILE = "teacher_map.safetensors"
logger = logging.getLogger(__name__)


def save_teacher_map(term: nn.Module, folder: str | Path) -> Path:
    """Write the weights of ``term`` (a trained objective term: the map) into ``folder`` atomically;
    return the file."""
    from safetensors.torch import save_file

    path = Path(folder) / MAP_FILE
    tensors = {key: value.detach().cpu().contiguous() for key, value in term.state_dict().items()}
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp)))
    return path


def load_teacher_map(term: nn.Module, folder: str | Path) -> bool:
    """Load the weights saved in ``folder`` into ``term`` if there are some of the same names and shapes;
    return whether they were loaded (a shipped adapter has none: the map then starts fresh)."""
    path = Path(folder) / MAP_FILE
    if not path.is_file():
        return False
    tensors = read_safetensors(path, fix=f"Delete {path} to start the map afresh.")
    own = term.state_dict()
    for key, tensor in own.items():
        saved = tensors.get(key)
        if saved is None or saved.shape != tensor.shape:
            got = None if saved is None else tuple(saved.shape)
            logger.warning("%s holds a %s of shape %s, not %s: starting afresh", path, key, got, tuple(tensor.shape))
            return False
    term.load_state_dict({key: tensors[key] for key in own})
    return True

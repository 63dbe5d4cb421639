"""Per-instruction centering: subtract the mean embedding of a fixed calibration set.

Embeddings from a causal LM share a common direction. With the shipped GIRCSE adapter the mean
cosine between unrelated training texts is 0.57 at K=5. That squeezes every cosine into a narrow
band. Centering removes the shared part. For each instruction and set of encoding settings, the
model embeds the bundled calibration texts (``genembed/data/calibration.txt``: 64 short texts
written for this purpose, covering questions, reviews, news, science, medicine, banking and
scene descriptions). Their mean unit vector ``c`` is the centre, and an embedding ``z`` becomes
``normalize(z) - c``, normalised again when asked.

An instruction gets its own centre because it moves every embedding made with it. That is the
point of instructions, and a single global mean would leave that shift in place. The centre
costs one encoding of the calibration texts per new instruction and settings. It is memoised per
loaded model, so a query set or a corpus pays it once. ``experiments/embedding_centering.py``
measures the effect on the dev tasks.

Centering is applied after the raw embeddings are computed. The evaluation cache stores raw
embeddings and centres on lookup, so this module is left out of the cache's code fingerprint.
"""

from __future__ import annotations

import weakref
from functools import lru_cache
from importlib.resources import files
from typing import Any

import torch

from .embedder import encode_texts
from .settings import EMBEDDING_FIELDS, EmbedSettings

__all__ = ["apply_centre", "calibration_texts", "centre", "clear_centres"]

_CALIBRATION = "calibration.txt"
# model -> {settings key: centre}; keyed by the torch module, so attaching an adapter (a new
# PeftModel) or loading another model starts afresh, and a dropped model frees its centres
_MEMO: weakref.WeakKeyDictionary[Any, dict[tuple, torch.Tensor]] = weakref.WeakKeyDictionary()


@lru_cache(maxsize=1)
def calibration_texts() -> tuple[str, ...]:
    """The bundled calibration texts, one per non-empty line of ``genembed/data/calibration.txt``."""
    text = files("genembed").joinpath("data", _CALIBRATION).read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def centre(backbone: Any, options: EmbedSettings, instruction: str, *, all_steps: bool = False) -> torch.Tensor:
    """The centre for embeddings made with ``options`` and ``instruction``.

    Returns the mean of the calibration texts' L2-normalised embeddings: ``(D,)``, or ``(K, D)``, one
    centre per step, with ``all_steps`` (GIRCSE ``return_all_steps``).
    """
    key = (instruction, all_steps, *(getattr(options, name) for name in EMBEDDING_FIELDS))
    memo = _MEMO.setdefault(backbone.model, {})
    if key not in memo:
        embeddings, _ = encode_texts(
            backbone,
            list(calibration_texts()),
            options,
            instruction=instruction,
            return_all_steps=all_steps,
            show_progress_bar=False,
        )
        memo[key] = torch.nn.functional.normalize(embeddings.float(), dim=-1).mean(dim=0)
    return memo[key]


def apply_centre(embeddings: torch.Tensor, centre_vector: torch.Tensor) -> torch.Tensor:
    """``normalize(embeddings) - centre`` (not normalised again; callers normalise as asked)."""
    if not embeddings.numel():
        return embeddings
    return torch.nn.functional.normalize(embeddings.float(), dim=-1) - centre_vector


def clear_centres(backbone: Any | None = None) -> None:
    """Forget memoised centres (of one backbone, or all), e.g. after changing a model's weights in place."""
    if backbone is None:
        _MEMO.clear()
    else:
        _MEMO.pop(backbone.model, None)

"""Per-instruction centering: subtract the mean embedding of a fixed calibration set.

Embeddings from a causal LM share a common direction. With the shipped GIRCSE adapter the mean
cosine between unrelated training texts is 0.57 at K=5. That squeezes every cosine into a narrow
band. Centering removes the shared part. For each instruction and set of encoding settings, the
model embeds the bundled calibration texts (``genembed/data/calibration.txt``: 64 short texts
written for this purpose, covering questions, reviews, news, science, medicine, banking and
scene descriptions). Their mean unit vector ``c`` is the center, and an embedding ``z`` becomes
``normalize(z) - c``, normalised again when asked.

An instruction gets its own center because it moves every embedding made with it. That is the
point of instructions, and a single global mean would leave that shift in place. A center costs one
encoding of the calibration texts (seconds on a CPU; docs/serving.md gives the measured cost), so
it is looked up before it is computed, in this order:

1. the centers stored with the model: ``centers.safetensors`` in a folder written by ``model.save``
   or in a shipped adapter's folder, holding its named instructions' centers (:func:`load_centers`;
   used at any dtype: the shipped ones were computed in float32);
2. the centers of this loaded model used lately, at most :attr:`CenterCache.max_size`
   (:data:`DEFAULT_CACHE_SIZE`) of them, least recently used dropped first;
3. the disk cache, keyed by a digest of the model's weights, the settings and the instruction
   (:mod:`genembed.encoders.center_files`; ``GENEMBED_CENTER_CACHE=off`` turns it off).

Only then are the calibration texts encoded. ``experiments/embedding_centering.py`` measures the
effect of centering on the dev tasks.

Centering is applied after the raw embeddings are computed. The evaluation cache stores raw
embeddings and centers on lookup, so this module is left out of the cache's code fingerprint.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections import OrderedDict
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import torch

from . import center_files
from .embedder import encode_texts
from .methods import method_rules
from .settings import EMBEDDING_FIELDS, EmbedSettings

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "CenterCache",
    "apply_center",
    "calibration_digest",
    "calibration_texts",
    "center_cache",
    "center_key",
    "clear_centers",
    "find_center",
    "instruction_center",
    "load_centers",
    "mean_direction",
    "remember_center",
    "save_centers",
    "weights_id",
]

_CALIBRATION = "calibration.txt"
DEFAULT_CACHE_SIZE = 128  # centers of ad-hoc instructions kept in memory per loaded model
# model -> its CenterCache; keyed by the torch module, so attaching an adapter (a new PeftModel) or
# loading another model starts afresh, and a dropped model frees its centers
_CACHES: weakref.WeakKeyDictionary[Any, CenterCache] = weakref.WeakKeyDictionary()


@lru_cache(maxsize=1)
def calibration_texts() -> tuple[str, ...]:
    """The bundled calibration texts, one per non-empty line of ``genembed/data/calibration.txt``."""
    text = files("genembed").joinpath("data", _CALIBRATION).read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


@lru_cache(maxsize=1)
def calibration_digest() -> str:
    """sha256 of the bundled calibration texts the centers are computed from."""
    return hashlib.sha256("\n".join(calibration_texts()).encode("utf-8")).hexdigest()


def center_key(settings: EmbedSettings, instruction: str, *, all_steps: bool = False) -> str:
    """The name a center is kept under: the instruction, ``all_steps`` and the settings that change
    embeddings (:data:`~genembed.encoders.settings.EMBEDDING_FIELDS`; a single-pass method's step
    settings change nothing, so they are left out)."""
    fields = {name: getattr(settings, name) for name in EMBEDDING_FIELDS}
    if not method_rules(settings.method).uses_steps:
        for name in ("steps", "adaptive", "stop_tol"):
            fields.pop(name)
    return center_files.key_name({"instruction": instruction, "all_steps": all_steps, **fields})


class CenterCache:
    """The centers of one loaded model: those stored with it and, at most ``max_size``, others used lately.

    Attributes:
        stored: key -> center, loaded from the model's ``centers.safetensors`` or kept with
            :meth:`keep` (never dropped).
        max_size: how many other centers stay in memory; the least recently used go first.
        computed: how many centers were computed (encoding the calibration texts) for this model.
    """

    def __init__(self, max_size: int = DEFAULT_CACHE_SIZE):
        self.stored: dict[str, torch.Tensor] = {}
        self._recent: OrderedDict[str, torch.Tensor] = OrderedDict()
        self.max_size = max_size
        self.computed = 0
        self.model_id: str | None = None  # digest of the weights, for the disk cache (computed once)

    @property
    def max_size(self) -> int:
        return self._max_size

    @max_size.setter
    def max_size(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"the center cache size must be an int >= 0, got {value!r}")
        self._max_size = value
        self._trim()

    def __len__(self) -> int:
        """Centers held in memory besides the stored ones."""
        return len(self._recent)

    def get(self, key: str) -> torch.Tensor | None:
        if key in self.stored:
            return self.stored[key]
        found = self._recent.get(key)
        if found is not None:
            self._recent.move_to_end(key)
        return found

    def put(self, key: str, value: torch.Tensor) -> None:
        self._recent[key] = value
        self._recent.move_to_end(key)
        self._trim()

    def keep(self, key: str, value: torch.Tensor) -> None:
        """Keep a center with the stored ones, for the model's life (a server's named instructions)."""
        self.stored[key] = value
        self._recent.pop(key, None)

    def _trim(self) -> None:
        while len(self._recent) > self._max_size:
            self._recent.popitem(last=False)


def center_cache(backbone: Any) -> CenterCache:
    """The :class:`CenterCache` of a loaded backbone (made on first use)."""
    cache = _CACHES.get(backbone.model)
    if cache is None:
        cache = _CACHES[backbone.model] = CenterCache()
    return cache


def instruction_center(
    backbone: Any, settings: EmbedSettings, instruction: str, *, all_steps: bool = False
) -> torch.Tensor:
    """The center for embeddings made with ``settings`` and ``instruction``.

    Looked up in the model's stored centers, its recent ones and the disk cache before it is computed
    (see the module docstring).

    Returns:
        The mean of the calibration texts' L2-normalised embeddings: ``(D,)``, or ``(K, D)``, one
        center per step, with ``all_steps`` (GIRCSE ``return_all_steps``).
    """
    found = find_center(backbone, settings, instruction, all_steps=all_steps)
    if found is not None:
        return found
    embeddings, _ = encode_texts(
        backbone,
        list(calibration_texts()),
        settings,
        instruction=instruction,
        return_all_steps=all_steps,
        show_progress_bar=False,
    )
    return remember_center(backbone, center_key(settings, instruction, all_steps=all_steps), mean_direction(embeddings))


def find_center(
    backbone: Any, settings: EmbedSettings, instruction: str, *, all_steps: bool = False
) -> torch.Tensor | None:
    """The center of ``settings`` and ``instruction`` when it is known without encoding anything: stored
    with the model, used lately, or in the disk cache (then kept in memory); else None.

    The first disk lookup of a model digests its weights (about a second for the default model on a CPU);
    :func:`weights_id` does it ahead."""
    cache = center_cache(backbone)
    key = center_key(settings, instruction, all_steps=all_steps)
    found = cache.get(key)
    if found is None and center_files.cache_folder() is not None:
        found = center_files.read_cached(weights_id(backbone), key, calibration_digest())
        if found is not None:
            cache.put(key, found)
    return found


def mean_direction(embeddings: torch.Tensor) -> torch.Tensor:
    """The mean of L2-normalised embeddings over the first axis: a center, from the calibration texts'
    embeddings (``(n, D)`` or ``(n, K, D)``)."""
    return torch.nn.functional.normalize(embeddings.float(), dim=-1).mean(dim=0)


def remember_center(backbone: Any, key: str, center: torch.Tensor) -> torch.Tensor:
    """Keep a newly computed center (named by :func:`center_key`) in memory and in the disk cache,
    count it in :attr:`CenterCache.computed`, and return it."""
    cache = center_cache(backbone)
    cache.computed += 1
    if center_files.cache_folder() is not None:
        center_files.write_cached(weights_id(backbone), key, calibration_digest(), center)
    cache.put(key, center)
    return center


def weights_id(backbone: Any) -> str:
    """The digest of a backbone's weights that its disk-cached centers are filed under (computed once)."""
    cache = center_cache(backbone)
    if cache.model_id is None:
        cache.model_id = _weights_digest(backbone)
    return cache.model_id


def apply_center(embeddings: torch.Tensor, center_vector: torch.Tensor) -> torch.Tensor:
    """``normalize(embeddings) - center`` (not normalised again; callers normalise as asked)."""
    if not embeddings.numel():
        return embeddings
    return torch.nn.functional.normalize(embeddings.float(), dim=-1) - center_vector


def clear_centers(backbone: Any | None = None) -> None:
    """Forget the centers held in memory (of one backbone, or all) and the stored ones, e.g. after
    changing a model's weights in place (its disk cache entries then no longer match its weights)."""
    if backbone is None:
        _CACHES.clear()
    else:
        _CACHES.pop(backbone.model, None)


def save_centers(
    backbone: Any, folder: str | os.PathLike, settings: EmbedSettings, instructions: list[str]
) -> dict[str, torch.Tensor]:
    """Compute (or look up) the centers of ``instructions`` with ``settings`` and write them, with the
    centers already stored with the model, to ``folder/centers.safetensors``; return what was written.

    ``model.save`` calls it for the model's named instructions (``prompts``)."""
    centers = dict(center_cache(backbone).stored)
    for instruction in dict.fromkeys(instructions):
        centers[center_key(settings, instruction)] = instruction_center(backbone, settings, instruction)
    center_files.write_centers(Path(folder) / center_files.CENTERS_FILE, centers, calibration_digest())
    return centers


def load_centers(backbone: Any, folder: str | os.PathLike) -> int:
    """Use the centers stored in ``folder/centers.safetensors`` (when there is one) for this backbone;
    return how many. Only for the weights saved in ``folder``: the centers belong to them.

    Raises:
        DamagedFileError: the file is not a readable safetensors file.
    """
    path = Path(folder) / center_files.CENTERS_FILE
    if not path.is_file():
        return 0
    stored = center_files.read_centers(path, calibration_digest())
    center_cache(backbone).stored.update(stored)
    return len(stored)


def _weights_digest(backbone: Any) -> str:
    """A digest of the backbone's weights, what the disk cache keys by: each tensor's name, dtype, shape
    and about 4,096 of its values, evenly spaced (reading every weight of the default model takes
    about a second on a CPU; a training step or another checkpoint changes the sampled values too).
    Weights changed in place change it (call :func:`clear_centers` so it is computed again)."""
    h = hashlib.sha256(str(getattr(backbone, "name", "")).encode())
    with torch.no_grad():
        for name, tensor in backbone.model.state_dict().items():
            flat = tensor.detach().reshape(-1)
            h.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
            h.update(flat[:: max(1, flat.numel() // 4096)].float().cpu().numpy().tobytes())
    return h.hexdigest()

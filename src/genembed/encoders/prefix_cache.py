"""Instruction prefixes computed once: the keys and values of the tokens before a text, kept per model.

In the ``chat`` format every prompt of one instruction opens with the same tokens (the system and user turn
openers and the instruction: 17 of a 30-token sentence prompt with the default model's query instruction).
Under causal attention their keys and values depend on nothing after them, so they are computed once per
distinct prefix and every text runs from its own first token on, attending to them
(:mod:`genembed.encoders.shared_prefix` groups a batch's rows by prefix; both the CPU fast path and the
transformers path consume :class:`PrefixStates`). The embeddings equal those of the whole prompt up to
floating-point rounding (tested against both paths and the golden files).

A prefix is identified by its token ids (not by its instruction string), so it is exact for any prompt
format whose tokens before the text are the same, and formats tokenized as one string (``gircse``) share
whenever their ids agree. It does not apply under bidirectional attention (GRIT, ``attention=
"bidirectional"``), where a prefix's states depend on the text after it, nor where the KV states of whole
prompts are kept (RAG indexes), nor with gradients on (training computes a batch's prefixes afresh).

The cache is bounded by bytes (:attr:`PrefixCache.max_bytes`, least recently used dropped first; the
default model's prefixes take about 46 KB per token in float32). Its entries belong to the weights they
were computed with: a change of any weight (an optimizer step, a reload, a move to another dtype or
device) or of the active LoRA adapters empties it before the next lookup.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from ..backbone.attention import run_decoder

__all__ = [
    "DEFAULT_PREFIX_CACHE_BYTES",
    "PrefixCache",
    "PrefixStates",
    "compute_prefix_states",
    "prefix_cache",
    "weights_stamp",
]

DEFAULT_PREFIX_CACHE_BYTES = 64 << 20  # per loaded model: about 46 prefixes of 30 tokens of the default model
# model -> its PrefixCache; a dropped model frees its prefixes
_CACHES: weakref.WeakKeyDictionary[Any, PrefixCache] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class PrefixStates:
    """Keys and values of one prefix, per layer ``(1, kv_heads, P, head_dim)``, keys rotated (RoPE) at
    positions ``0..P-1``, as a transformers cache holds them."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    @property
    def length(self) -> int:
        """P, the prefix's tokens."""
        return int(self.keys[0].shape[2])

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def dynamic_cache(self, batch: int) -> Any:
        """A transformers ``DynamicCache`` holding the prefix once per row (``batch`` rows)."""
        from transformers import DynamicCache

        pairs = [
            (k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1))
            for k, v in zip(self.keys, self.values, strict=True)
        ]
        return DynamicCache(ddp_cache_data=pairs)


def compute_prefix_states(model: Any, ids: list[int] | tuple[int, ...]) -> PrefixStates:
    """The prefix's states on the transformers path (causal; with gradients when they are on)."""
    device = next(model.parameters()).device
    input_ids = torch.tensor([list(ids)], dtype=torch.long, device=device)
    out = run_decoder(model, input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=True)
    cache = out.cache
    if hasattr(cache, "layers"):
        pairs = [(layer.keys, layer.values) for layer in cache.layers]
    else:  # transformers < 4.56
        pairs = list(zip(cache.key_cache, cache.value_cache, strict=True))
    return PrefixStates(tuple(k for k, _ in pairs), tuple(v for _, v in pairs))


def weights_stamp(model: Any) -> tuple:
    """What the cached states depend on besides their ids: every parameter's storage and version (an
    in-place update, a reload or a dtype/device move changes them) and each LoRA layer's active adapters,
    scaling and on/off state (``disable_adapter()`` changes no weight). About a millisecond."""
    params = tuple((p.data_ptr(), p._version) for p in model.parameters())
    adapters = tuple(
        (
            bool(getattr(m, "disable_adapters", False)),
            bool(getattr(m, "merged", False)),
            tuple(getattr(m, "active_adapters", ())),
            tuple(sorted(getattr(m, "scaling", {}).items())),
        )
        for m in model.modules()
        if hasattr(m, "lora_A")
    )
    return params, adapters


class PrefixCache:
    """The prefix states of one loaded model, at most ``max_bytes`` of them (least recently used dropped).

    Attributes:
        hits, misses: lookups answered from the cache and lookups that computed the states.
    """

    def __init__(self, max_bytes: int = DEFAULT_PREFIX_CACHE_BYTES):
        self._entries: OrderedDict[Hashable, PrefixStates] = OrderedDict()
        self._stamp: tuple | None = None
        self.nbytes = 0  # bytes held now
        self.hits = 0
        self.misses = 0
        self.max_bytes = max_bytes

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"the prefix cache size must be an int >= 0 (bytes), got {value!r}")
        self._max_bytes = value
        self._trim()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0

    def lookup(self, model: Any, kind: str, compute: Callable[[tuple[int, ...]], PrefixStates]) -> Any:
        """A function ``ids -> PrefixStates`` for the model's current weights: cached states, or
        ``compute(ids)`` kept for later. ``kind`` names the path that computes (its states are its own).

        Checks the weights once, now (:func:`weights_stamp`): call it again after changing them.
        """
        stamp = weights_stamp(model)
        if stamp != self._stamp:
            self.clear()
            self._stamp = stamp

        def states(ids: tuple[int, ...]) -> PrefixStates:
            key = (kind, ids)
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return found
            self.misses += 1
            found = compute(ids)
            if found.nbytes <= self._max_bytes:
                self._entries[key] = found
                self.nbytes += found.nbytes
                self._trim()
            return found

        return states

    def _trim(self) -> None:
        while self.nbytes > self._max_bytes and self._entries:
            _, dropped = self._entries.popitem(last=False)
            self.nbytes -= dropped.nbytes


def prefix_cache(model: Any) -> PrefixCache:
    """The :class:`PrefixCache` of a loaded model (the torch module; made on first use)."""
    cache = _CACHES.get(model)
    if cache is None:
        cache = _CACHES[model] = PrefixCache()
    return cache

"""KV-state plumbing for RAG: read layers out of a transformers cache, build a cache from stored
states, move cached keys to new RoPE positions, and (re-)encode a segment at a chosen offset.

RoPE rotates each (even, odd) key pair ``(x_i, x_{i+d/2})`` by the angle ``p * theta_i`` of its position
``p``. Rotations compose, ``R(a) R(b) = R(a + b)``, so a key computed at position ``p`` becomes the key
at ``p + delta`` by applying the rotary embedding of ``delta`` to it: no forward pass needed. Values
carry no position and are reused unchanged. This is exact in real arithmetic; in float32 the result
matches keys computed at the new position to about 1e-5 (tested).
"""

from __future__ import annotations

from typing import Any

import torch

from ..backbone.attention import decoder_stack, run_decoder

__all__ = ["KV", "build_cache", "cache_layers", "encode_segment", "rotary_embedding", "shift_keys", "stacked_states"]

KV = tuple[torch.Tensor, torch.Tensor]  # keys, values: (layers, kv_heads, tokens, head_dim) each

# RoPE variants whose frequencies depend on the sequence length cannot be composed by a fixed delta.
_UNSHIFTABLE_ROPE = {"dynamic", "longrope"}


def cache_layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer ``(keys, values)`` of a transformers cache, each ``(B, kv_heads, T, head_dim)``."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))  # transformers < 4.56


def stacked_states(cache: Any, row: int, start: int, stop: int) -> KV:
    """Keys and values of positions ``[start, stop)`` of batch row ``row``: ``(layers, H, L, Dh)`` each."""
    layers = cache_layers(cache)
    keys = torch.stack([k[row, :, start:stop] for k, _ in layers])
    values = torch.stack([v[row, :, start:stop] for _, v in layers])
    return keys, values


def build_cache(states: list[KV], *, dtype: torch.dtype | None = None) -> Any:
    """A transformers ``DynamicCache`` holding ``states`` one after the other (batch 1).

    Args:
        states: segments' ``(keys, values)``, each ``(layers, H, L_i, Dh)``, already at their positions.
        dtype: cast to this dtype (the model's); stored states may be float16/bfloat16.
    """
    from transformers import DynamicCache

    if not states:
        return DynamicCache()
    keys = torch.cat([k for k, _ in states], dim=2)
    values = torch.cat([v for _, v in states], dim=2)
    if dtype is not None:
        keys, values = keys.to(dtype), values.to(dtype)
    return DynamicCache(ddp_cache_data=[(keys[i][None], values[i][None]) for i in range(keys.shape[0])])


def rotary_embedding(model: Any) -> Any:
    """The decoder's rotary-embedding module (``LlamaRotaryEmbedding`` and its relatives)."""
    rotary = getattr(decoder_stack(model), "rotary_emb", None)
    if rotary is None:
        raise NotImplementedError(f"{type(model).__name__} has no rotary embedding: cannot re-position cached keys")
    rope_type = getattr(rotary, "rope_type", "default")
    if rope_type in _UNSHIFTABLE_ROPE:
        raise NotImplementedError(f"RoPE type {rope_type!r} depends on the sequence length: keys cannot be shifted")
    return rotary


def shift_keys(model: Any, keys: torch.Tensor, delta: int) -> torch.Tensor:
    """Keys computed at positions ``p`` rotated to positions ``p + delta``.

    Args:
        model: the causal LM the keys came from (its rotary embedding is used).
        keys: ``(..., tokens, head_dim)`` post-RoPE keys (e.g. ``(layers, H, L, Dh)``).
        delta: position offset (may be negative).
    """
    if delta == 0:
        return keys
    rotary = rotary_embedding(model)
    work = keys.float()
    position = torch.tensor([[delta]], device=keys.device)
    cos, sin = rotary(work, position)  # (1, 1, Dh), scaled by attention_scaling
    scale = float(getattr(rotary, "attention_scaling", 1.0))
    cos, sin = cos[0, 0] / scale, sin[0, 0] / scale
    half = work.shape[-1] // 2
    rotated_half = torch.cat((-work[..., half:], work[..., :half]), dim=-1)
    return (work * cos + rotated_half * sin).to(keys.dtype)


@torch.inference_mode()
def encode_segment(model: Any, ids: list[int], *, attention: str, offset: int = 0) -> KV:
    """Encode one segment alone at positions ``offset .. offset + L - 1`` and return its KV states.

    This is what a stored segment is (computed at offset 0 during the embedding pass) and the
    reference that re-positioned cached states are tested against.
    """
    device = next(model.parameters()).device
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    mask = torch.ones_like(input_ids)
    positions = torch.arange(offset, offset + len(ids), device=device)[None]
    out = run_decoder(
        model, input_ids=input_ids, attention_mask=mask, attention=attention, position_ids=positions, use_cache=True
    )
    return stacked_states(out.cache, 0, 0, len(ids))

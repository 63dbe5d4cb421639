"""Recompute the cached tokens that isolation changed most (CacheBlend's selective recomputation).

A cached segment that is not the first after the head was computed after the head alone: its states
never attended to the segments before it (isolation; :mod:`genembed.retrieval.context`). CacheBlend
(Yao et al., "CacheBlend: Fast Large Language Model Serving for RAG with Cached Knowledge Fusion",
EuroSys 2025) recovers most of a full prefill's quality by recomputing a small share of those tokens,
those whose KV states deviate most from a full pass. Here, with one selection (CacheBlend refines it
layer by layer):

1. run the first two decoder layers over the prompt's cached prefix (2/L of a prefill): layer 0's
   states depend only on the token and its position, so layer 1's are the first that isolation changes;
2. take the ``fraction`` of isolated tokens whose layer-1 keys and values differ most (L2) from the cached ones;
3. recompute those tokens through every layer in one pass, each attending by position to the kept
   cached states and to the other recomputed tokens (an explicit 4D mask), and put their states in the
   cache in place of the cached ones.

The cache's order no longer follows positions afterwards (kept states, then recomputed ones): RoPE is
in the keys, and every later token sees all of them, so this changes nothing for decoding. With
``fraction=1`` every isolated token is recomputed and the states equal a full causal pass (tested).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..backbone.attention import decoder_stack, run_decoder
from .kv_ops import build_cache, cache_layers

__all__ = ["PROBE_LAYERS", "blend", "deviations"]

PROBE_LAYERS = 2  # layers run over the whole prefix to find the tokens that isolation changed


class _Stop(Exception):
    """Raised by a forward hook to end a pass after the probe layers."""


@torch.inference_mode()
def deviations(model: Any, cache: Any, ids: list[int]) -> torch.Tensor:
    """Per position ``(P,)``: L2 distance between the layer-1 keys and values in ``cache`` (positional order,
    ``P`` = ``len(ids)`` states) and those of a causal pass over ``ids`` (run only up to layer 1)."""
    from transformers import DynamicCache

    stack = decoder_stack(model)
    if len(stack.layers) < PROBE_LAYERS:
        raise ValueError(f"selective recomputation needs at least {PROBE_LAYERS} decoder layers")
    layer = PROBE_LAYERS - 1
    keys, values = cache_layers(cache)[layer]
    if keys.shape[2] != len(ids):
        raise ValueError(f"the cache holds {keys.shape[2]} positions for {len(ids)} tokens")
    device = next(model.parameters()).device
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    probe = DynamicCache()

    def stop(*_: Any) -> None:
        raise _Stop

    handle = stack.layers[PROBE_LAYERS - 1].register_forward_hook(stop)
    try:
        run_decoder(
            model,
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            position_ids=torch.arange(len(ids), device=device)[None],
            cache=probe,
        )
    except _Stop:
        pass
    finally:
        handle.remove()
    ref_keys, ref_values = cache_layers(probe)[layer]
    diff = (keys.float() - ref_keys.float()).square().sum((0, 1, 3))
    return (diff + (values.float() - ref_values.float()).square().sum((0, 1, 3))).sqrt()


@torch.inference_mode()
def blend(model: Any, cache: Any, ids: list[int], candidates: list[int], fraction: float) -> tuple[Any, list[int]]:
    """Recompute the ``fraction`` of ``candidates`` that isolation changed most; return the new cache and them.

    Args:
        model: the generator (its generation weights active).
        cache: states of positions ``0 .. len(ids) - 1`` in positional order (as :func:`~.context.assemble` builds it).
        ids: the tokens at those positions.
        candidates: positions whose states are isolated (cached segments after the first).
        fraction: share of the candidates to recompute, in ``[0, 1]``; at least one token when above 0.

    Returns:
        ``(cache, recomputed positions)``; the cache is unchanged when nothing is recomputed.

    Raises:
        ValueError: a fraction outside ``[0, 1]``.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"the share of cached tokens to recompute must be in [0, 1], got {fraction}")
    # (checked before the early return: assemble calls this for every prompt, with or without candidates)
    n = math.ceil(fraction * len(candidates))
    if n == 0:
        return cache, []
    device = next(model.parameters()).device
    if n == len(candidates):
        chosen = torch.tensor(sorted(candidates), device=device)
    else:
        where = torch.tensor(candidates, device=device)
        top = deviations(model, cache, ids)[where].topk(n).indices
        chosen = where[top].sort().values
    keep = torch.ones(len(ids), dtype=torch.bool, device=device)
    keep[chosen] = False
    kept = keep.nonzero().squeeze(1)
    layers = cache_layers(cache)
    new_cache = build_cache(
        [(torch.stack([k[0][:, kept] for k, _ in layers]), torch.stack([v[0][:, kept] for _, v in layers]))]
    )
    dtype = layers[0][0].dtype
    key_positions = torch.cat([kept, chosen])
    allowed = key_positions[None, :] <= chosen[:, None]  # (n, kept + n): by position, recomputed ones included
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    token_ids = torch.tensor(ids, dtype=torch.long, device=device)[chosen]
    run_decoder(
        model, input_ids=token_ids[None], attention_mask=mask[None, None], position_ids=chosen[None], cache=new_cache
    )
    return new_cache, chosen.tolist()

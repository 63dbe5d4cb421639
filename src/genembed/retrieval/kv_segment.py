"""KV states of RAG prompt segments from the generator's own causal pass.

Every cached segment of a RAG prompt (see :mod:`genembed.retrieval.context`) is computed the same way:
one causal pass over ``head + segment`` with the *generation* weights (the LoRA adapter only when the
model generates with it), keeping the states of the segment's positions ``h .. h + L - 1``. In the prompt
the head sits at ``0 .. h - 1``, so the first segment after it lands exactly where it was computed:
its states equal those of a full causal pass (tested to 1e-4 in float32). Later segments are rotated
to their place (:func:`~genembed.retrieval.kv_ops.shift_keys`); they never attended to the segments
before them, only to the head, which keeps a shared attention sink at position 0 instead of one at
the start of every segment.

These states can come from two places, with the same result:

- the embedding pass, when it already *is* this pass: same weights active, causal attention, and an
  embedding prompt that starts with ``head + segment`` (:func:`reusable_prefix`);
- a separate pass (:func:`segment_states`), at index build time for passages (streamed shard by shard
  by :mod:`~genembed.retrieval.index_build`) and at question time for the query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..backbone.attention import run_decoder
from ..encoders.batching import collate, length_sorted_batches
from ..encoders.prompts import EncodedPrompt
from ..generation.adapters import adapter_mode
from .kv_ops import KV, stacked_states

__all__ = ["reusable_prefix", "segment_states"]


def reusable_prefix(embed_ids: Sequence[int], head: Sequence[int], segment: Sequence[int]) -> bool:
    """Whether an embedding prompt ``embed_ids`` starts with ``head + segment``, so that its causal pass
    holds the segment's states at positions ``len(head) .. len(head) + len(segment) - 1``."""
    n = len(head) + len(segment)
    return len(embed_ids) >= n and list(embed_ids[:n]) == [*head, *segment]


@torch.inference_mode()
def segment_states(
    model: Any,
    head: Sequence[int],
    segments: Sequence[Sequence[int]],
    *,
    batch_size: int = 16,
    kv_dtype: torch.dtype | None = None,
) -> tuple[KV | None, list[KV]]:
    """One causal pass over ``head + segment`` per segment with the generation weights.

    Args:
        model: a :class:`~genembed.GenerativeEmbedder` (its ``generation_adapter`` chooses the weights).
        head: the prompt's head token ids (may be empty).
        segments: each segment's token ids.
        batch_size: segments per forward pass (length-sorted, left-padded).
        kv_dtype: cast the returned states (e.g. ``torch.float16`` for storage).

    Returns:
        ``(head_states, states)``: the head's ``(keys, values)`` at ``0 .. h - 1`` (None when the head is
        empty or there are no segments), and each segment's at ``h .. h + L - 1``, ``(layers, kv_heads, L,
        head_dim)`` each, on the CPU.
    """
    lm, tokenizer = model.backbone.model, model.backbone.tokenizer
    device = next(lm.parameters()).device
    h = len(head)
    prompts = [EncodedPrompt([*head, *ids], h, h + len(ids)) for ids in segments]
    states: list[KV | None] = [None] * len(prompts)
    head_states: KV | None = None
    with adapter_mode(lm, getattr(model, "generation_adapter", False)):
        for indices in length_sorted_batches([len(p.ids) for p in prompts], batch_size):
            batch = collate([prompts[i] for i in indices], tokenizer.pad_token_id).to(device)
            cache = run_decoder(
                lm, input_ids=batch.input_ids, attention_mask=batch.attention_mask, attention="causal", use_cache=True
            ).cache
            width = batch.input_ids.shape[1]
            for row, i in enumerate(indices):
                start = width - len(prompts[i].ids)
                keys, values = stacked_states(cache, row, start + h, width)
                if head_states is None and h:
                    head_states = _cast(stacked_states(cache, row, start, start + h), kv_dtype)
                states[i] = _cast((keys, values), kv_dtype)
    return head_states, states  # type: ignore[return-value]


def _cast(kv: KV, dtype: torch.dtype | None) -> KV:
    keys, values = kv
    if dtype is not None:
        keys, values = keys.to(dtype), values.to(dtype)
    return keys.cpu().contiguous(), values.cpu().contiguous()

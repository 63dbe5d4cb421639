"""One forward pass of a decoder's transformer stack with per-call causal or bidirectional attention.

Transformers >= 5.2 accepts ``is_causal`` per forward call for Llama-family decoders (Llama, Mistral,
Qwen2, Qwen3, ...): with ``is_causal=False`` the mask is built by ``create_bidirectional_mask`` and only
padding is masked. We always pass explicit ``position_ids = cumsum(mask) - 1`` so that a text's
positions do not depend on how much padding its batch needed.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Literal

import torch

__all__ = ["Attention", "decoder_stack", "check_attention", "position_ids_from_mask", "run_decoder"]

Attention = Literal["causal", "bidirectional"]
_ATTENTIONS = ("causal", "bidirectional")


def check_attention(attention: str) -> bool:
    """Validate an attention name; return ``is_causal``."""
    if attention not in _ATTENTIONS:
        raise ValueError(f"attention must be 'causal' or 'bidirectional', got {attention!r}")
    return attention == "causal"


def decoder_stack(model: Any) -> Any:
    """The transformer stack (e.g. ``LlamaModel``) inside a causal LM, a peft wrapper or the stack itself."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(base, "model", base)


def position_ids_from_mask(attention_mask: torch.Tensor, offset: torch.Tensor | int = 0) -> torch.Tensor:
    """Positions that count only real tokens: ``cumsum(mask) - 1`` (pads get 0), plus ``offset``."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.clamp(min=0) + offset


def run_decoder(
    model: Any,
    *,
    input_ids: torch.Tensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    attention_mask: torch.Tensor,
    attention: str = "causal",
    position_ids: torch.Tensor | None = None,
    cache: Any = None,
    use_cache: bool = False,
) -> Any:
    """Run the transformer stack (no LM head) and return its output (``last_hidden_state``, ``cache``).

    Args:
        model: a causal LM (or peft wrapper, or bare stack).
        input_ids / inputs_embeds: exactly one of them, ``(B, T)`` or ``(B, T, D)``.
        attention_mask: ``(B, past + T)``, 1 for real tokens (past tokens included when a cache is given).
        attention: ``"causal"`` or ``"bidirectional"``.
        position_ids: defaults to ``cumsum(mask) - 1`` over the new tokens.
        cache: a transformers ``Cache`` holding earlier tokens, extended in place.
        use_cache: create and return a cache when none is given.
    """
    is_causal = check_attention(attention)
    if position_ids is None:
        n_new = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        position_ids = position_ids_from_mask(attention_mask)[:, -n_new:]
    stack = decoder_stack(model)
    kwargs = {_cache_kwarg(type(stack)): cache}
    out = stack(
        input_ids=input_ids,
        inputs_embeds=inputs_embeds,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=use_cache or cache is not None,
        is_causal=is_causal,
        **kwargs,
    )
    if not hasattr(out, "cache"):  # transformers before the past_key_values -> cache rename
        out.cache = getattr(out, "past_key_values", None)
    return out


@functools.cache
def _cache_kwarg(stack_type: type) -> str:
    """``cache`` in current transformers, ``past_key_values`` before the rename."""
    return "cache" if "cache" in inspect.signature(stack_type.forward).parameters else "past_key_values"

"""Show the "embedding language": the most probable vocabulary tokens of each soft token p_k."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .batching import collate
from .prompts import encode_prompts
from .settings import EmbedSettings
from .soft_tokens import generate_soft_tokens

__all__ = ["SoftTokenStep", "inspect_soft_tokens"]


@dataclass
class SoftTokenStep:
    """One generation step: its number (1-based) and the top ``(token, probability)`` pairs of p_k."""

    step: int
    tokens: list[tuple[str, float]]


@torch.inference_mode()
def inspect_soft_tokens(
    backbone: Any, text: str, settings: EmbedSettings, *, instruction: str = "", top: int = 8
) -> list[SoftTokenStep]:
    """Per step, the ``top`` most probable tokens of ``p_k`` for one text."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if top < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    tokenizer = backbone.tokenizer
    prompt = encode_prompts(
        tokenizer, [text], instruction=instruction, prompt_format=settings.prompt_format, max_length=settings.max_length
    )
    device = next(backbone.model.parameters()).device
    batch = collate(prompt, tokenizer.pad_token_id).to(device)
    out = generate_soft_tokens(
        backbone.model,
        batch.input_ids,
        batch.attention_mask,
        steps=settings.steps,
        tau=settings.tau,
        attention=settings.attention,
        top=min(top, len(tokenizer)),
    )
    steps = []
    for k in range(settings.steps):
        ids, probs = out.top_ids[0, k].tolist(), out.top_probs[0, k].tolist()
        steps.append(SoftTokenStep(k + 1, [(tokenizer.decode([i]), p) for i, p in zip(ids, probs, strict=True)]))
    return steps

"""Forward passes for training: embeddings with gradients, and response-token logits.

Embeddings come from the embedding core (:func:`genembed.encoders.core.embed_prepared`), as at
inference, with :class:`~genembed.encoders.settings.EmbedSettings`:

- GIRCSE: :func:`genembed.encoders.soft_tokens.generate_soft_tokens` with gradients; the KV cache is
  kept across the K soft-token steps (``use_cache=True``), so a step costs one prefill plus K
  single-token passes instead of K+1 passes over the whole sequence (``use_cache=False``, the
  reference's way, kept for the equivalence test and the benchmark). Only the last position goes
  through the LM head. Returns ``z_1..z_K`` (running means of the soft tokens' hidden states).
- GRIT: one bidirectional pass, mean over the text tokens (instruction and template excluded).
- Single-pass baselines (the GIRCSE paper's ablations): ``mean`` (mean over the text tokens) and
  ``last`` (the last prompt token's hidden state), both under ``attention``.
- Generative: one causal pass; the LM head runs only at positions that predict a response token.

Gradient checkpointing recomputes each chunk of texts during the backward pass
(``torch.utils.checkpoint``, non-reentrant). It wraps the whole soft-token generation of a chunk,
cache included, because transformers' per-layer checkpointing drops the KV cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from ..backbone.attention import run_decoder
from ..encoders.batching import Batch, collate
from ..encoders.core import embed_prepared
from ..encoders.pooling import running_means
from ..encoders.prompts import EncodedPrompt, encode_prompts
from ..encoders.settings import EmbedSettings
from ..encoders.soft_tokens import output_head
from .data.generative import IGNORE, GenerativeBatch

__all__ = ["embed_batch", "response_logits", "running_means", "tokenize_texts"]


def tokenize_texts(
    tokenizer: Any, texts: Sequence[str], instructions: Sequence[str], *, prompt_format: str, max_length: int
) -> Batch:
    """Prompts for texts that may each carry a different instruction, left-padded into one batch."""
    prompts: list[EncodedPrompt | None] = [None] * len(texts)
    for instruction in dict.fromkeys(instructions):
        indices = [i for i, inst in enumerate(instructions) if inst == instruction]
        encoded = encode_prompts(
            tokenizer,
            [texts[i] for i in indices],
            instruction=instruction,
            prompt_format=prompt_format,
            max_length=max_length,
        )
        for i, prompt in zip(indices, encoded, strict=True):
            prompts[i] = prompt
    return collate(prompts, tokenizer.pad_token_id)  # type: ignore[arg-type]


def _embed_tensors(
    model: Any,
    settings: EmbedSettings,
    share_prefix: bool,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    text_mask: torch.Tensor,
) -> torch.Tensor:
    batch = Batch(input_ids, attention_mask, text_mask)
    return embed_prepared(model, batch, settings, share_prefix=share_prefix).steps  # (B, K, D)


def embed_batch(
    model: Any, batch: Batch, settings: EmbedSettings, checkpoint_chunk: int = 0, *, share_prefix: bool = False
) -> torch.Tensor:
    """Training embeddings ``(B, K, D)`` (``K = 1`` for the single-pass methods), differentiable;
    ``checkpoint_chunk`` > 0 recomputes chunks of this many texts in the backward pass (gradient
    checkpointing: the same values and gradients, less memory); ``share_prefix`` computes each
    instruction's prefix once per batch (:attr:`~genembed.encoders.settings.RunOptions.share_prefix`)."""
    chunk = checkpoint_chunk
    if chunk <= 0 or not torch.is_grad_enabled():
        return _embed_tensors(model, settings, share_prefix, batch.input_ids, batch.attention_mask, batch.text_mask)
    parts = []
    for start in range(0, batch.input_ids.shape[0], chunk):
        rows = slice(start, start + chunk)
        parts.append(
            checkpoint(
                _embed_tensors,
                model,
                settings,
                share_prefix,
                batch.input_ids[rows],
                batch.attention_mask[rows],
                batch.text_mask[rows],
                use_reentrant=False,
            )
        )
    return torch.cat(parts, dim=0)


def _causal_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    return run_decoder(model, input_ids=input_ids, attention_mask=attention_mask, attention="causal").last_hidden_state


def response_logits(
    model: Any, batch: GenerativeBatch, checkpoint_chunk: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Causal pass; logits only where a response token is predicted.

    Args:
        model: a causal LM (or peft wrapper).
        batch: left-padded conversations with response-only labels.
        checkpoint_chunk: > 0 recomputes the pass per chunk of this many sequences in the backward.

    Returns:
        ``(logits (M, V), targets (M,), sample_index (M,))`` for the M predicted response tokens.
    """
    if checkpoint_chunk <= 0 or not torch.is_grad_enabled():
        hidden = _causal_hidden(model, batch.input_ids, batch.attention_mask)  # (B, T, D)
    else:
        hidden = torch.cat(
            [
                checkpoint(
                    _causal_hidden,
                    model,
                    batch.input_ids[i : i + checkpoint_chunk],
                    batch.attention_mask[i : i + checkpoint_chunk],
                    use_reentrant=False,
                )
                for i in range(0, batch.input_ids.shape[0], checkpoint_chunk)
            ]
        )
    targets = batch.labels[:, 1:]  # (B, T-1): position t predicts token t+1
    selected = targets != IGNORE
    head, _ = output_head(model)
    logits = head(hidden[:, :-1][selected])  # (M, V)
    rows = torch.arange(targets.shape[0], device=targets.device)[:, None].expand_as(targets)
    return logits, targets[selected], rows[selected]

"""Length-sorted batches sized by texts and tokens, and left-padded collation."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .prompts import EncodedPrompt

__all__ = ["MAX_BATCH_ROWS", "Batch", "collate", "length_sorted_batches"]

# rows per batch at most however short the texts: a GIRCSE step holds (rows, vocabulary) float32 probabilities
# (256 rows: 50 MB with the default model's 49,152 tokens)
MAX_BATCH_ROWS = 256


class Batch:
    """Left-padded tensors for one batch: ``input_ids``, ``attention_mask`` and ``text_mask``
    (1 on the text tokens only, for pooling; the whole prompt for an empty text), all ``(B, T)``."""

    def __init__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, text_mask: torch.Tensor):
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.text_mask = text_mask

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.input_ids.to(device), self.attention_mask.to(device), self.text_mask.to(device))


def length_sorted_batches(lengths: Sequence[int], batch_size: int, max_tokens: int = 0) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first (so memory peaks early).

    Args:
        lengths: each item's tokens.
        batch_size: items per batch; with ``max_tokens``, the fewest a batch takes (long texts).
        max_tokens: 0, or a budget of padded tokens (rows x the batch's longest item): a batch of short
            items takes more than ``batch_size`` of them while they fit (at most :data:`MAX_BATCH_ROWS`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, start = [], 0
    while start < len(order):
        rows = batch_size
        if max_tokens:  # the batch's first item is its longest
            rows = max(batch_size, min(max_tokens // max(lengths[order[start]], 1), MAX_BATCH_ROWS))
        batches.append(order[start : start + rows])
        start += rows
    return batches


def collate(prompts: Sequence[EncodedPrompt], pad_id: int) -> Batch:
    """Left-pad prompts to the longest one: the last position is every row's last real token."""
    width = max(len(p.ids) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    text_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        pad = width - len(p.ids)
        input_ids[row, pad:] = torch.tensor(p.ids, dtype=torch.long)
        attention_mask[row, pad:] = 1
        if p.text_end > p.text_start:
            text_mask[row, pad + p.text_start : pad + p.text_end] = 1
        else:  # an empty text: pool over its whole prompt rather than over nothing
            text_mask[row, pad:] = 1
    return Batch(input_ids, attention_mask, text_mask)

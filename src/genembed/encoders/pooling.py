"""Pooling hidden states into one vector per text."""

from __future__ import annotations

import torch

__all__ = ["last_token_pool", "masked_mean", "running_means"]


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``hidden`` ``(B, T, D)`` over positions where ``mask`` ``(B, T)`` is 1.

    A row with an empty mask (an empty text) gets the zero vector rather than NaN.
    """
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    total = (hidden * weights).sum(dim=1)  # (B, D)
    return total / weights.sum(dim=1).clamp(min=1.0)


def last_token_pool(hidden: torch.Tensor) -> torch.Tensor:
    """The last position's hidden state; with left padding that is every row's last real token."""
    return hidden[:, -1]


def running_means(hidden: torch.Tensor) -> torch.Tensor:
    """GIRCSE's step embeddings ``z_k = mean(h_1..h_k)`` for every k: ``(B, K, D)`` -> ``(B, K, D)``."""
    counts = torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=hidden.dtype)
    return hidden.cumsum(dim=1) / counts[None, :, None]

"""How per-token losses of a batch of sequences become one loss (the generative losses share it)."""

from __future__ import annotations

import torch

__all__ = ["AGGREGATIONS", "aggregate"]

AGGREGATIONS = ("sample", "token", "mixed")


def aggregate(token_loss: torch.Tensor, sample_index: torch.Tensor, num_samples: int, aggregation: str) -> torch.Tensor:
    """One loss from per-token losses ``(M,)`` of ``num_samples`` sequences (``sample_index`` ``(M,)``), weighed
    as ``aggregation`` says (see the module docstring)."""
    if aggregation == "mixed":
        return token_loss.mean()
    if aggregation == "token":
        return token_loss.sum() / num_samples
    sums = token_loss.new_zeros(num_samples).index_add(0, sample_index, token_loss)  # (num_samples,)
    counts = torch.bincount(sample_index, minlength=num_samples).to(token_loss.dtype)
    has = counts > 0
    return (sums[has] / counts[has]).mean()

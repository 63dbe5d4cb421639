"""The mean of a per-row loss over the rows a term applies to (the teacher terms leave some out)."""

from __future__ import annotations

import torch

__all__ = ["mean_over_rows"]


def mean_over_rows(values: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """The mean of ``values`` ``(B,)`` over the rows where boolean ``rows`` ``(B,)`` is True (all when
    None); 0 when it selects none."""
    if rows is None:
        return values.mean()
    rows = rows.to(values.device, torch.bool)
    return values.masked_fill(~rows, 0.0).sum() / rows.sum().clamp_min(1)

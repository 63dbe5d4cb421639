"""Right-padded batches of token rows for the generative scorers (rerank, query likelihood)."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..encoders.batching import length_sorted_batches

__all__ = ["right_padded_batches"]


def right_padded_batches(
    rows: list[list[int]], batch_size: int, pad_id: int | None, *, prefix: int = 0
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Length-sorted batches of ``rows``: ``(indices, ids (b, width), mask (b, prefix + width))``.

    Rows are right-padded (with ``pad_id``, or 0), so real tokens never attend to the pads, which are
    masked; the mask opens with ``prefix`` ones for a cached prompt the rows continue.
    """
    for indices in length_sorted_batches([len(r) for r in rows], batch_size):
        width = max(len(rows[i]) for i in indices)
        ids = torch.full((len(indices), width), pad_id or 0, dtype=torch.long)
        mask = torch.zeros((len(indices), prefix + width), dtype=torch.long)
        mask[:, :prefix] = 1
        for row, i in enumerate(indices):
            ids[row, : len(rows[i])] = torch.tensor(rows[i])
            mask[row, prefix : prefix + len(rows[i])] = 1
        yield indices, ids, mask

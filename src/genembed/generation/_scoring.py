"""What the generative scorers (rerank, GRIT rerank, query likelihood) share: their size check,
right-padded batches of token rows, and the yes/no log-odds read at each row's last token."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..encoders.batching import length_sorted_batches

__all__ = ["check_sizes", "right_padded_batches", "yes_no_log_odds"]


def check_sizes(batch_size: int, max_length: int) -> None:
    """ValueError unless both are >= 1."""
    if batch_size < 1 or max_length < 1:
        raise ValueError(f"batch_size and max_length must be >= 1, got {batch_size} and {max_length}")


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


def yes_no_log_odds(head: torch.nn.Module, hidden: torch.Tensor, lengths: list[int], yes: int, no: int) -> torch.Tensor:
    """``log P(yes) - log P(no)`` (softmax over the two tokens) after each row's last real token.

    Args:
        head: the LM head.
        hidden: ``(b, width, D)`` last hidden states of right-padded rows.
        lengths: each row's real tokens (its last one is read).
        yes, no: the two answer token ids.

    Returns:
        ``(b,)`` float32 log-odds on the CPU.
    """
    device = hidden.device
    last = torch.tensor([n - 1 for n in lengths], device=device)
    logits = head(hidden[torch.arange(len(lengths), device=device), last])[:, [yes, no]].float()  # (b, 2)
    log_probs = torch.log_softmax(logits, dim=-1)
    return (log_probs[:, 0] - log_probs[:, 1]).cpu()

"""A batch whose prompts share prefixes, embedded with each prefix's states computed once.

A prompt is its prefix (the template and instruction before its text) and the rest (its text and the
template after it). :func:`embed_by_prefix` groups the rows of a left-padded batch by the token ids before
their text (read from the text mask), cuts each group's rows after their prefix and embeds them with that
prefix's :class:`~genembed.encoders.prefix_cache.PrefixStates`, which every row's tokens attend to; the
results come back in the batch's row order, equal to the unshared path's up to floating-point rounding
(tested). One implementation serves both uses:

- training: a contrastive batch embeds many texts under few instructions; each prefix is computed once
  per batch, with gradients (``RunOptions.share_prefix``);
- inference: the states come from the model's bounded
  :class:`~genembed.encoders.prefix_cache.PrefixCache`, computed once per instruction for every batch
  and request after it, on the fast path or the transformers path.

Causal attention only: under bidirectional attention a prefix's states depend on the text after it.
A row whose text is empty is pooled over its whole prompt, so it keeps its prefix (runs unshared).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .batching import Batch

__all__ = ["embed_by_prefix", "prefix_groups", "rows_after_prefix", "select_rows", "sharing_groups"]

# embeds one group: (its rows as a batch, the prefix ids they were cut after, or None) -> per-row tensors
GroupFn = Callable[[Batch, "tuple[int, ...] | None"], Sequence["torch.Tensor | None"]]


def prefix_groups(batch: Batch) -> list[tuple[list[int], int]]:
    """The batch's rows grouped by the ids before their text, with that prefix's length, in first-row order.

    A row whose text mask covers its whole prompt (an empty text) has no prefix of its own: length 0.
    """
    lengths = batch.attention_mask.sum(dim=1).tolist()
    width = batch.attention_mask.shape[1]
    starts = batch.text_mask.argmax(dim=1).tolist()  # the first text column of each row
    ids = batch.input_ids.tolist()
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, (length, text_start) in enumerate(zip(lengths, starts, strict=True)):
        first = width - length
        groups.setdefault(tuple(ids[row][first:text_start]), []).append(row)
    return [(rows, len(prefix)) for prefix, rows in groups.items()]


def sharing_groups(batch: Batch, *, share_single: bool) -> tuple[list[tuple[list[int], int]], list[int]]:
    """The batch's :func:`prefix_groups` that run after their shared prefix, and the rows that run whole (in
    row order): those without a prefix (empty texts) and, unless ``share_single``, each lone row of its prefix."""
    shared, whole = [], []
    for rows, prefix_len in prefix_groups(batch):
        if prefix_len and (share_single or len(rows) > 1):
            shared.append((rows, prefix_len))
        else:
            whole.extend(rows)
    return shared, sorted(whole)


def select_rows(batch: Batch, rows: list[int]) -> Batch:
    """Rows of a left-padded batch, trimmed to the longest of them."""
    index = torch.tensor(rows, device=batch.input_ids.device)
    width = int(batch.attention_mask[index].sum(dim=1).max())
    return Batch(*(t[index, -width:] for t in (batch.input_ids, batch.attention_mask, batch.text_mask)))


def rows_after_prefix(batch: Batch, rows: list[int], prefix_len: int) -> tuple[Batch, tuple[int, ...]]:
    """Rows that share their first ``prefix_len`` real tokens, cut after them: a left-padded batch of each
    row's remaining tokens (trimmed to the longest), and the prefix's ids."""
    rest = select_rows(batch, rows)
    width = rest.input_ids.shape[1]
    lengths = rest.attention_mask.sum(dim=1)
    if prefix_len >= int(lengths.min()):
        raise ValueError(f"prefix_len {prefix_len} leaves a prompt of {int(lengths.min())} tokens no token after it")
    first = width - int(lengths[0])  # row 0's first real token
    prefix = tuple(rest.input_ids[0, first : first + prefix_len].tolist())
    columns = torch.arange(width - prefix_len, device=lengths.device)
    mask = (columns[None] >= (width - lengths)[:, None]).to(rest.attention_mask.dtype)  # (B, T - P)
    cut = Batch(rest.input_ids[:, prefix_len:], mask, rest.text_mask[:, prefix_len:] * mask)
    return cut, prefix


def embed_by_prefix(batch: Batch, embed: GroupFn, *, share_single: bool) -> tuple[torch.Tensor | None, ...]:
    """Embed a batch group by group (:func:`prefix_groups`) and return the per-row results in row order.

    Args:
        batch: left-padded prompts with their text masks.
        embed: ``embed(group batch, prefix ids or None)``: a tuple of ``(rows, ...)`` tensors (or None
            entries) for the group; given prefix ids, the group batch holds the tokens after them.
        share_single: also cut a group of one row after its prefix (worth it when the prefix's states are
            cached; else a lone row runs whole). The rows that run whole (lone rows, empty texts) run
            together, in one call of ``embed``.
    """
    shared, whole = sharing_groups(batch, share_single=share_single)
    parts: list[tuple[list[int], Sequence[torch.Tensor | None]]] = [
        (rows, embed(*rows_after_prefix(batch, rows, prefix_len))) for rows, prefix_len in shared
    ]
    if whole:  # one pass for all of them, not one per row
        parts.append((whole, embed(select_rows(batch, whole), None)))
    if len(parts) == 1:
        return tuple(parts[0][1])
    order = [row for rows, _ in parts for row in rows]
    inverse = torch.tensor(order, device=batch.input_ids.device).argsort()  # batch row -> its place in the groups
    merged = []
    for field in zip(*(out for _, out in parts), strict=True):
        merged.append(None if field[0] is None else torch.cat(field)[inverse])  # type: ignore[arg-type]
    return tuple(merged)

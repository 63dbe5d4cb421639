"""Soft tokens for a batch whose prompts share prefixes: each instruction's prefix computed once.

A training batch embeds many texts under few instructions (one per contrastive batch side, a handful per
single-text batch), and in the ``chat`` format an instruction and its template are a third of the prompt
tokens. :func:`embed_shared_prefixes` groups the rows of a left-padded batch by the tokens before their
text (the instruction and template, read from the text mask), and runs
:func:`~genembed.encoders.soft_tokens.generate_soft_tokens` once per group with that prefix computed
once (``prefix_len``), each group trimmed to its own longest prompt. The hidden states come back in the
batch's row order, equal to the unshared path's up to floating-point rounding (tested).

Causal attention only: under bidirectional attention a prefix's states depend on the text after it.
"""

from __future__ import annotations

from typing import Any

import torch

from .batching import Batch
from .soft_tokens import SoftTokenOutput, generate_soft_tokens

__all__ = ["embed_shared_prefixes", "prefix_groups"]


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


def embed_shared_prefixes(
    model: Any,
    batch: Batch,
    *,
    steps: int,
    tau: float,
    stop_tol: float | None = None,
) -> SoftTokenOutput:
    """:func:`generate_soft_tokens` (cached, causal) with every prefix group's prefix computed once.

    Returns ``hidden`` ``(B, K, D)`` and ``steps_used`` ``(B,)`` in the batch's row order (no cache).
    """
    hidden, used, order = [], [], []
    for rows, prefix_len in prefix_groups(batch):
        index = torch.tensor(rows, device=batch.input_ids.device)
        mask = batch.attention_mask[index]
        width = int(mask.sum(dim=1).max())  # trim the columns every row of the group pads
        out = generate_soft_tokens(
            model,
            batch.input_ids[index, -width:],
            mask[:, -width:],
            steps=steps,
            tau=tau,
            attention="causal",
            use_cache=True,
            stop_tol=stop_tol,
            prefix_len=prefix_len if len(rows) > 1 else 0,
        )
        hidden.append(out.hidden)
        used.append(out.steps_used)
        order += rows
    if len(hidden) == 1:
        return SoftTokenOutput(hidden=hidden[0], steps_used=used[0])
    inverse = torch.tensor(order, device=batch.input_ids.device).argsort()  # batch row -> its place in the groups
    return SoftTokenOutput(hidden=torch.cat(hidden)[inverse], steps_used=torch.cat(used)[inverse])

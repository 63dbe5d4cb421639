"""Multi-process helpers: process rank and size, and an all-gather that keeps gradients locally.

``cross_device_negatives``: every process gathers the embeddings of all processes, so each query is
scored against every document of the global batch. ``torch.distributed.all_gather`` returns tensors
without gradient history, so the local slice is put back as the original (differentiable) tensor:
gradients flow into this process's own embeddings only. When every process computes the same
global loss, the gradient of the whole batch is the *sum* of the processes' local gradients, while
data-parallel training averages them, hence the loss is scaled by the world size for backward
(:class:`genembed.training.objective.Objective` does this).
"""

from __future__ import annotations

import torch

from .._distributed import rank_and_world

__all__ = ["gather_with_grad", "rank_and_world"]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` from every process along dim 0, in rank order.

    The local part keeps its autograd history; the other parts are constants. Processes may hold
    different numbers of rows. Without a process group this returns ``tensor`` unchanged.
    """
    import torch.distributed as dist

    rank, world = rank_and_world()
    if world == 1:
        return tensor
    sizes = [torch.zeros(1, dtype=torch.long, device=tensor.device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([tensor.shape[0]], device=tensor.device))
    rows = [int(s.item()) for s in sizes]
    padded = tensor.detach()
    if tensor.shape[0] < max(rows):  # all_gather needs equal shapes
        pad = tensor.new_zeros((max(rows) - tensor.shape[0], *tensor.shape[1:]))
        padded = torch.cat([padded, pad])
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded.contiguous())
    pieces = [part[:n] for part, n in zip(parts, rows, strict=True)]
    pieces[rank] = tensor
    return torch.cat(pieces, dim=0)

"""Process rank, world size and barriers for multi-process runs (``torchrun``, ``accelerate launch``).

Without a process group every helper acts as the only process: rank 0 of 1, and barriers return at
once. Training (:mod:`genembed.training.distributed`) and corpus encoding
(:mod:`genembed.encoders.corpus`) both use these, so they sit here, below both.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["barrier", "process_group", "rank_and_world"]


def rank_and_world() -> tuple[int, int]:
    """``(rank, world size)`` of the default process group, ``(0, 1)`` without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    """Wait until every process gets here; returns at once without a process group."""
    import torch.distributed as dist

    if rank_and_world()[1] > 1:
        dist.barrier()


@contextlib.contextmanager
def process_group() -> Iterator[tuple[int, int]]:
    """Yield ``(rank, world size)``, first joining the process group that torchrun / accelerate launch
    describe in the environment (``WORLD_SIZE`` > 1; NCCL with CUDA, else gloo) unless one exists.
    A group joined here is left again on exit."""
    import torch
    import torch.distributed as dist

    owned = False
    if not (dist.is_available() and dist.is_initialized()) and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        owned = True
    try:
        yield rank_and_world()
    finally:
        if owned:
            dist.destroy_process_group()

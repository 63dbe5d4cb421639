"""Centring a new instruction in the server without making other clients wait.

With a centering model, a request whose instruction has no center yet needs one: the mean embedding of
the 64 calibration texts made with that instruction (:mod:`genembed.encoders.centering`). Computed in
one go on the model thread, it would hold every other client back for as long as it takes (seconds on
a CPU). Here the calibration texts go to the batcher as background jobs, one text each, which it runs
in small batches taking turns with the client batches (:mod:`genembed.serve.batcher`); only the
requests that need the center wait for it.

A server-wide budget bounds the work: at most ``max_active`` instructions are centred at once (1 by
default), at most ``max_queue`` more wait for their turn, and a request with yet another new
instruction is refused with :class:`CenteringBusyError` (HTTP 429 with ``Retry-After``). Requests that
need a center already being computed share it and take no place in the queue.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..encoders.centering import calibration_texts, center_key, find_center, mean_direction, remember_center
from ..encoders.settings import EmbedSettings
from .batcher import EmbeddingBatcher
from .worker import QueueFullError

__all__ = ["CalibrationKey", "CenterScheduler", "CenteringBusyError"]


class CenteringBusyError(QueueFullError):
    """Too many new instructions are being centred; answered with HTTP 429 and ``Retry-After``.

    Attributes:
        retry_after: whole seconds after which the queue has likely room again.
    """

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class CalibrationKey:
    """The batch key of calibration texts; the model thread returns their L2-normalised embeddings,
    uncentered."""

    instruction: str
    steps: int | str


class CenterScheduler:
    """Find or compute the centers that requests need, within the server's centring budget.

    Args:
        backbone: the served model's backbone (its center cache and disk cache are used).
        batcher: the running :class:`EmbeddingBatcher`.
        items: ``items(texts, instruction, steps) -> (items, costs)``: what the model thread embeds for each
            text (tokenized once, on the event loop) and the tokens each costs (the batcher's budget).
        max_active: instructions centred at once.
        max_queue: new instructions waiting for their turn; more are refused.
    """

    def __init__(
        self,
        backbone: Any,
        batcher: EmbeddingBatcher,
        items: Callable[[list[str], str, int | str], tuple[list[Any], list[int]]],
        *,
        max_active: int,
        max_queue: int,
    ):
        self._backbone = backbone
        self._batcher = batcher
        self._items = items
        self.max_active = max_active
        self.max_queue = max_queue
        self._slots = asyncio.Semaphore(max_active)
        self._pending: dict[str, asyncio.Task[torch.Tensor]] = {}  # center key -> its computation
        self.active = 0  # instructions being centred now
        self.last_seconds: float | None = None  # how long the latest center took, start to end

    @property
    def waiting(self) -> int:
        """New instructions waiting for their turn to be centred."""
        return len(self._pending) - self.active

    async def center(self, settings: EmbedSettings, instruction: str, steps: int | str) -> torch.Tensor:
        """The center of ``instruction`` embedded with ``settings`` (batch key ``steps``).

        Known centers (stored, recent, or on disk) return at once; a new one is computed through the
        batcher, and concurrent requests for it await the same computation.

        Raises:
            CenteringBusyError: the budget is spent (``max_active`` computing, ``max_queue`` waiting).
        """
        found = find_center(self._backbone, settings, instruction)
        if found is not None:
            return found
        key = center_key(settings, instruction)
        task = self._pending.get(key)
        if task is None:
            if len(self._pending) >= self.max_active + self.max_queue:
                raise CenteringBusyError(
                    f"{self.active} new instruction(s) are being centred and {self.waiting} wait (the server centres "
                    f"{self.max_active} at a time and queues {self.max_queue}); retry later, or use a named "
                    "instruction (prompt_name / input_type / task)",
                    self.retry_after(),
                )
            task = asyncio.get_running_loop().create_task(self._compute(key, settings, instruction, steps))
            self._pending[key] = task
            task.add_done_callback(lambda _: self._pending.pop(key, None))
        # shielded: a client that gives up does not cancel the work others (or its retry) await
        return await asyncio.shield(task)

    def retry_after(self) -> int:
        """Seconds until a queue place is likely free: one center's time per instruction ahead, over
        the instructions centred at once (1 before any center was timed)."""
        if self.last_seconds is None:
            return 1
        ahead = self.waiting + 1
        return max(1, math.ceil(self.last_seconds * ahead / self.max_active))

    async def _compute(self, key: str, settings: EmbedSettings, instruction: str, steps: int | str) -> torch.Tensor:
        async with self._slots:
            self.active += 1
            start = time.monotonic()
            try:
                found = find_center(self._backbone, settings, instruction)  # computed while this one waited?
                if found is not None:
                    return found
                texts = list(calibration_texts())
                batcher = self._batcher
                job = CalibrationKey(instruction, steps)
                items, costs = self._items(texts, instruction, steps)
                rows = await asyncio.gather(
                    *(batcher.submit([i], key=job, cost=c, background=True) for i, c in zip(items, costs, strict=True))
                )
                embeddings = torch.from_numpy(np.concatenate(rows, axis=0))
                center = remember_center(self._backbone, key, mean_direction(embeddings))
                self.last_seconds = time.monotonic() - start
                return center
            finally:
                self.active -= 1

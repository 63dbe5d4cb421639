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

Waits are bounded (``max_wait``, the server's ``max_centering_wait``, 15 s by default). Before a new
center is queued, its time is estimated: the tokens of its calibration texts and of the centring work
ahead of it, at the model's measured seconds per token, over the share of the model background work
gets (all of it while no client competes, a third while clients keep it busy:
:meth:`~genembed.serve.batcher.EmbeddingBatcher.background_seconds`). When the estimate exceeds the
bound, the request is refused at once with 429 and ``Retry-After`` the estimate, and the center is
computed all the same, so the retry finds it. A request whose center is not ready after ``max_wait``
(the estimate was low, or no batch had been timed yet) gets the same 429 then. The center itself is
always the mean over all 64 calibration texts: when it is ready does not change what it is.
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
        max_wait: seconds a request waits for a new center at most (module docstring).
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        backbone: Any,
        batcher: EmbeddingBatcher,
        items: Callable[[list[str], str, int | str], tuple[list[Any], list[int]]],
        *,
        max_active: int,
        max_queue: int,
        max_wait: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._backbone = backbone
        self._batcher = batcher
        self._items = items
        self.max_active = max_active
        self.max_queue = max_queue
        self.max_wait = max_wait
        self._clock = clock
        self._slots = asyncio.Semaphore(max_active)
        self._pending: dict[str, asyncio.Task[torch.Tensor]] = {}  # center key -> its computation
        self._ready_at: dict[str, float] = {}  # center key -> when it is expected (clock time)
        self._unstarted: dict[str, int] = {}  # center key -> calibration tokens, while it waits for a slot
        self.active = 0  # instructions being centred now
        self.last_seconds: float | None = None  # how long the latest center took, start to end

    @property
    def waiting(self) -> int:
        """New instructions waiting for their turn to be centred."""
        return len(self._pending) - self.active

    async def center(self, settings: EmbedSettings, instruction: str, steps: int | str) -> torch.Tensor:
        """The center of ``instruction`` embedded with ``settings`` (batch key ``steps``).

        Known centers (stored, recent, or on disk) return at once; a new one is computed through the
        batcher, and concurrent requests for it await the same computation, each for ``max_wait`` at most.

        Raises:
            CenteringBusyError: the budget is spent (``max_active`` computing, ``max_queue`` waiting), or
                the center is not expected (or not ready) within ``max_wait``; in the latter case it is
                being computed, and ``retry_after`` says when it is expected.
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
            task = self._start(key, settings, instruction, steps)
        return await self._wait(key, task)

    def _start(self, key: str, settings: EmbedSettings, instruction: str, steps: int | str) -> asyncio.Task:
        """Queue the computation of a new center and note when it is expected."""
        items, costs = self._items(list(calibration_texts()), instruction, steps)
        tokens = sum(costs)
        estimate = self._batcher.background_seconds(tokens + sum(self._unstarted.values()))
        self._unstarted[key] = tokens
        if estimate is not None:
            self._ready_at[key] = self._clock() + estimate
        job = CalibrationKey(instruction, steps)
        task = asyncio.get_running_loop().create_task(self._compute(key, settings, job, items, costs))
        self._pending[key] = task

        def done(_: asyncio.Task) -> None:
            for table in (self._pending, self._ready_at, self._unstarted):
                table.pop(key, None)

        task.add_done_callback(done)
        return task

    async def _wait(self, key: str, task: asyncio.Task) -> torch.Tensor:
        """Await ``task`` for ``max_wait`` at most; refuse at once when it is expected later than that."""
        expected = self._ready_at.get(key)
        if expected is not None and expected - self._clock() > self.max_wait:
            raise CenteringBusyError(self._late_message(expected), self._retry_in(expected))
        try:  # shielded: a client that gives up does not cancel the work others (or its retry) await
            return await asyncio.wait_for(asyncio.shield(task), timeout=self.max_wait)
        except TimeoutError:
            expected = self._ready_at.get(key)
            raise CenteringBusyError(
                f"this instruction's center was not ready within {self.max_wait:g} s (the server's "
                "max_centering_wait); it is still being computed: retry later, or use a named instruction "
                "(prompt_name / input_type / task)",
                self._retry_in(expected) if expected is not None else self.retry_after(),
            ) from None

    def _late_message(self, expected: float) -> str:
        seconds = expected - self._clock()
        return (
            f"centring this new instruction is expected to take {seconds:.0f} s under the current load, more than "
            f"the server waits ({self.max_wait:g} s, max_centering_wait); it is being computed: retry after "
            "Retry-After seconds, or use a named instruction (prompt_name / input_type / task)"
        )

    def _retry_in(self, expected: float) -> int:
        return max(1, math.ceil(expected - self._clock()))

    def retry_after(self) -> int:
        """Seconds until a queue place is likely free: one center's time per instruction ahead, over
        the instructions centred at once (1 before any center was timed)."""
        if self.last_seconds is None:
            return 1
        ahead = self.waiting + 1
        return max(1, math.ceil(self.last_seconds * ahead / self.max_active))

    async def _compute(
        self, key: str, settings: EmbedSettings, job: CalibrationKey, items: list[Any], costs: list[int]
    ) -> torch.Tensor:
        async with self._slots:
            self._unstarted.pop(key, None)
            self.active += 1
            start = self._clock()
            try:
                found = find_center(self._backbone, settings, job.instruction)  # computed while this one waited?
                if found is not None:
                    return found
                batcher = self._batcher
                rows = await asyncio.gather(
                    *(batcher.submit([i], key=job, cost=c, background=True) for i, c in zip(items, costs, strict=True))
                )
                embeddings = torch.from_numpy(np.concatenate(rows, axis=0))
                center = remember_center(self._backbone, key, mean_direction(embeddings))
                self.last_seconds = self._clock() - start
                return center
            finally:
                self.active -= 1

"""Micro-batching of concurrent embedding requests, as text-embeddings-inference does.

Requests wait in one FIFO queue. Whenever the model thread is free, the batcher takes the oldest
request and adds the next waiting requests that can share its forward passes (same instruction and
steps) while their tokens fit the batch budget, runs them as one ``encode`` call, and hands each
request its own rows. Nothing waits on a timer: requests that arrive while a batch runs form the
next batch, so batches grow with load and a lone request is served at once.

Background work (the calibration texts that centre a new instruction, :mod:`genembed.serve.centers`)
waits in a second queue and is batched the same way, with two rules that keep it from delaying clients:

- while clients wait, a background batch runs no more often than a client batch (they alternate);
- a background batch holds at most ``background_share`` (half) of the tokens of the client batch
  before it, and at least one job. A client that arrives while background work runs waits for one
  such batch, at most, before its own batch runs;
- once no client batch has run for ``idle_after`` seconds (1 s), each further background batch may
  hold four times as many tokens as the one before (up to ``max_batch_tokens``), so work that nobody
  competes with is not run in needlessly small batches; the next client batch starts the growth
  over. A client that arrives during such a larger batch waits for it. (A closed-loop client leaves
  the model free for a few milliseconds between its requests: growing then made it wait for batches
  several times its own.)

The batcher also measures what a centring estimate needs (:meth:`EmbeddingBatcher.background_seconds`):
the model's seconds per token (a moving average over the batches run) and whether clients compete for
the model now; under competition the turns above give background work at least
``background_share / (1 + background_share)`` of the tokens (a third by default).

A full queue refuses new requests (:class:`~genembed.serve.worker.QueueFullError`, HTTP 429);
:meth:`EmbeddingBatcher.close` refuses new ones and finishes every accepted one (background work too).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .worker import QueueFullError

__all__ = ["BatcherClosedError", "EmbeddingBatcher"]

logger = logging.getLogger(__name__)

EncodeFn = Callable[[Hashable, list[Any]], np.ndarray]
RunFn = Callable[..., Awaitable[np.ndarray]]


class BatcherClosedError(Exception):
    """The server is shutting down and takes no new requests (HTTP 503)."""


@dataclass(eq=False)
class _Job:
    texts: list[Any]  # what encode embeds: texts, or (text, prompt) pairs tokenized once by the server
    key: Hashable  # jobs with equal keys can share forward passes
    cost: int  # tokens this job adds to a batch
    future: asyncio.Future = field(repr=False)


class EmbeddingBatcher:
    """Queue embedding requests and run them in token-budgeted micro-batches.

    Args:
        encode: ``encode(key, texts) -> (len(texts), dim)`` array; runs on the model thread.
        run: awaitable runner that executes ``encode`` on the model thread (``ModelWorker.run``).
        max_batch_tokens: a batch takes more requests only while their summed cost fits.
            A request costlier than the budget still runs, alone.
        max_batch_requests: requests per batch at most; 1 disables micro-batching.
        max_queue: waiting requests at most; more are refused with ``QueueFullError``.
        on_batch: called with ``(requests, texts)`` after each client batch that ran (metrics).
        background_share: right after a client batch, a background batch takes jobs while their summed
            cost fits this share of that batch's cost (always at least one job; see the module docstring).
        clock: seconds, monotonic (tests pass a fake one); times the batches for :meth:`background_seconds`
            and ``idle_after``.
        idle_after: seconds without a client batch after which background batches grow (module docstring).
    """

    def __init__(
        self,
        encode: EncodeFn,
        run: RunFn,
        *,
        max_batch_tokens: int,
        max_batch_requests: int,
        max_queue: int,
        on_batch: Callable[[int, int], None] | None = None,
        background_share: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        idle_after: float = 1.0,
    ):
        self._encode = encode
        self._run = run
        self._on_batch = on_batch
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_requests = max_batch_requests
        self.max_queue = max_queue
        self.background_share = background_share
        self._clock = clock
        self.idle_after = idle_after
        self._last_client_end = -float("inf")  # when the latest client batch finished (clock time)
        self.seconds_per_token: float | None = None  # moving average over the batches run (None: none yet)
        self._queue: deque[_Job] = deque()
        self._background: deque[_Job] = deque()
        self._last_client_cost = 0  # cost of the latest client batch: sizes the background batches
        self._client_turn = True  # while both queues hold jobs, whose batch runs next
        self._background_streak = 0  # background batches run since the latest client batch
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.closing = False
        self.running = 0  # requests in the batch on the model thread now
        self.batches = 0  # batches run
        self.batched_requests = 0  # requests served
        self.largest_batch = 0  # most requests in one batch so far
        self.background_batches = 0  # background batches run

    @property
    def queued(self) -> int:
        """Requests waiting for a batch (not counting the batch running now)."""
        return len(self._queue)

    @property
    def queued_background(self) -> int:
        """Background jobs waiting for a batch."""
        return len(self._background)

    @property
    def contended(self) -> bool:
        """Whether clients compete for the model now (a client batch runs or client requests wait)."""
        return bool(self.running or self._queue)

    def background_seconds(self, tokens: int) -> float | None:
        """Estimated seconds until ``tokens`` more background tokens, queued now, are done: the background
        jobs already queued come first; under competition from clients background work gets its
        guaranteed share of the model (module docstring), else all of it. None before any batch was timed.
        """
        if self.seconds_per_token is None:
            return None
        ahead = sum(job.cost for job in self._background if not job.future.done())
        share = self.background_share / (1 + self.background_share) if self.contended else 1.0
        return (ahead + tokens) * self.seconds_per_token / share

    def start(self) -> None:
        """Start the batching loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="genembed-batcher")

    async def submit(self, texts: list[Any], *, key: Hashable, cost: int, background: bool = False) -> np.ndarray:
        """Queue texts and wait for their embeddings, ``(len(texts), dim)``, in order.

        Args:
            texts: what ``encode`` embeds: the server's ``(text, prompt)`` pairs (tokenized once, on the
                event loop), or plain texts.
            key: jobs with equal keys can share forward passes (``encode`` receives it).
            cost: tokens this job adds to a batch.
            background: server work (centring) rather than a client request: it takes turns with the
                client batches in smaller batches and does not count against ``max_queue`` (its
                producer bounds it).

        Raises:
            QueueFullError: ``max_queue`` requests are already waiting.
            BatcherClosedError: the batcher is shutting down.
        """
        if self.closing:
            raise BatcherClosedError("the server is shutting down")
        if not background and len(self._queue) >= self.max_queue:
            raise QueueFullError(f"{len(self._queue)} embedding requests are already waiting")
        job = _Job(texts, key, cost, asyncio.get_running_loop().create_future())
        (self._background if background else self._queue).append(job)
        self._wakeup.set()
        return await job.future

    async def close(self) -> None:
        """Refuse new requests, finish every accepted one, then stop the loop."""
        self.closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task

    def _next_batch(self) -> tuple[list[_Job], bool]:
        """The next batch and whether it is a client batch (see the module docstring for the turns)."""
        for queue in (self._queue, self._background):
            while queue and queue[0].future.done():  # abandoned by its client
                queue.popleft()
        if self._background and (not self._queue or not self._client_turn):
            self._client_turn = True
            # half the client batch before it; four times larger for each background batch since, while no
            # client waited (a lone new instruction is centred in a few large batches, not 64 small ones)
            base = max(int(self.background_share * self._last_client_cost), self._background[0].cost)
            if self._clock() - self._last_client_end < self.idle_after:
                self._background_streak = 0  # clients were served a moment ago and may come back: stay small
            budget = min(base << min(2 * self._background_streak, 60), max(self.max_batch_tokens, base))
            self._background_streak += 1
            return self._take(self._background, budget), False
        if not self._queue:
            return [], True
        self._client_turn = False
        self._background_streak = 0
        batch = self._take(self._queue, self.max_batch_tokens)
        self._last_client_cost = sum(job.cost for job in batch)
        return batch, True

    def _take(self, queue: deque[_Job], budget: int) -> list[_Job]:
        """Remove and return the head of ``queue`` and the jobs after it that share its key while the
        batch fits ``budget`` tokens and ``max_batch_requests``; the others keep their order."""
        head = queue.popleft()
        batch, tokens, rest = [head], head.cost, deque()
        full = False
        while queue:
            job = queue.popleft()
            if job.future.done():
                continue
            if not full and job.key == head.key:
                if len(batch) < self.max_batch_requests and tokens + job.cost <= budget:
                    batch.append(job)
                    tokens += job.cost
                    continue
                full = True  # keep FIFO order: later requests do not jump over one that did not fit
            rest.append(job)
        queue.extend(rest)
        return batch

    async def _loop(self) -> None:
        while True:
            if not self._queue and not self._background:
                if self.closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch, client = self._next_batch()
            if batch:
                self.running = len(batch) if client else 0
                try:
                    await self._run_batch(batch, client)
                finally:
                    self.running = 0

    def _time(self, tokens: int, seconds: float) -> None:
        """Fold one batch's seconds per token into the moving average (the latest batch weighs a quarter)."""
        if tokens <= 0:
            return
        rate = seconds / tokens
        self.seconds_per_token = rate if self.seconds_per_token is None else 0.75 * self.seconds_per_token + 0.25 * rate

    async def _run_batch(self, batch: list[_Job], client: bool = True) -> None:
        texts = [text for job in batch for text in job.texts]
        start = self._clock()
        try:
            vectors = await self._run(self._encode, batch[0].key, texts)
            self._time(sum(job.cost for job in batch), self._clock() - start)
        except Exception as exc:
            if len(batch) > 1:  # one bad request must not fail its batch mates: retry each alone
                logger.warning("batch of %d requests failed (%s); retrying them one by one", len(batch), exc)
                for job in batch:
                    await self._run_batch([job], client)
                return
            if not batch[0].future.done():
                batch[0].future.set_exception(exc)
            return
        if client:
            self._last_client_end = self._clock()
            self.batches += 1
            self.batched_requests += len(batch)
            self.largest_batch = max(self.largest_batch, len(batch))
            if self._on_batch is not None:
                self._on_batch(len(batch), len(texts))
        else:
            self.background_batches += 1
        start = 0
        for job in batch:
            rows = vectors[start : start + len(job.texts)]
            start += len(job.texts)
            if not job.future.done():
                job.future.set_result(rows)

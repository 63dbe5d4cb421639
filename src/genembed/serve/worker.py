"""One thread owns the model: every forward pass (embedding batches, generation steps, reranking)
runs there, one at a time, off the event loop.

torch modules are not safe for concurrent forward passes on one set of weights, and on a CPU two
overlapping passes would only fight over the same cores; a single worker thread serializes them and
keeps the event loop free to accept requests, tokenize and stream.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["ModelWorker", "QueueFullError"]

T = TypeVar("T")


class QueueFullError(Exception):
    """More requests are waiting than the server accepts (answered with HTTP 429)."""


class ModelWorker:
    """A single-thread executor for model calls, plus an admission counter for long requests.

    Args:
        max_active: requests (chat, rerank, inspect) that may be admitted at once; more get
            :class:`QueueFullError`.
    """

    def __init__(self, max_active: int):
        self.max_active = max_active
        self.active = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="genembed-model")

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on the model thread and await its result."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Queue ``fn(*args)`` on the model thread without waiting (e.g. closing an abandoned stream)."""
        return self._executor.submit(fn, *args)

    def check_capacity(self) -> None:
        """Raise :class:`QueueFullError` when ``max_active`` requests are already admitted."""
        if self.active >= self.max_active:
            raise QueueFullError(f"{self.active} generation/rerank requests are already running or waiting")

    @contextmanager
    def admit(self) -> Iterator[None]:
        """Count one request as active for the block (call :meth:`check_capacity` first to refuse)."""
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1

    def shutdown(self) -> None:
        """Finish queued model calls and stop the thread."""
        self._executor.shutdown(wait=True)

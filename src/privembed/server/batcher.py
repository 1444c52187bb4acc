"""An asyncio micro-batcher: concurrent requests share one model call.

Requests put *jobs* (a few texts each) on a bounded queue; worker tasks take jobs until a batch
holds ``max_batch`` texts or the oldest job has waited ``max_wait`` seconds, and hand the batch
to a processing coroutine (one model call, then protection). While a batch is being processed
new jobs accumulate, so under load batches fill without waiting at all.

The queue is bounded in *texts*: a job that does not fit raises :class:`QueueFull` at once (the
server answers 503 with ``Retry-After``) instead of letting memory grow. :meth:`MicroBatcher.close`
refuses new jobs; :meth:`MicroBatcher.stop` also lets the workers finish every job already
queued, then ends them (graceful shutdown).

The processor resolves every job's future, during the call or later (the server hands
ledger-bound groups on to their own lane, so a batch worker never waits for the ledger); if it
raises, the batch's unresolved jobs fail with its exception.

Waiting is measured by an injectable ``clock`` (default :func:`time.monotonic`): a worker sends
its batch once the oldest job is ``max_wait`` old by that clock, at the latest when the next job
arrives (and, with the real clock, when the wait runs out).

Examples
--------
>>> async def demo():
...     sizes = []
...     async def process(jobs):
...         sizes.append(sum(j.size for j in jobs))
...         for j in jobs:
...             j.future.set_result(len(j.payload))
...     b = MicroBatcher(process, max_batch=8, max_wait=0.01, max_queue=100)
...     b.start()
...     out = await asyncio.gather(*(b.submit(["x"] * 3) for _ in range(4)))
...     await b.stop()
...     return out, sizes
>>> asyncio.run(demo())
([3, 3, 3, 3], [6, 6])
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Job", "MicroBatcher", "QueueFull", "ShuttingDown"]


class QueueFull(Exception):
    """The queue has no room for the job's texts (answer 503 with Retry-After)."""


class ShuttingDown(Exception):
    """The batcher is stopping and takes no new jobs."""


@dataclass(eq=False)
class Job:
    """Work for one request: ``size`` texts and the future its result is delivered to."""

    payload: Any
    size: int
    future: asyncio.Future[Any]
    #: when the job was queued, by the batcher's clock
    enqueued: float = field(default_factory=time.monotonic)


class MicroBatcher:
    """Collect jobs into batches of at most ``max_batch`` texts, waiting at most ``max_wait`` s.

    Parameters
    ----------
    process : async callable(list[Job]) -> None
        Handles one batch and resolves every job's future (result or exception), now or
        later; if it raises, the batch's unresolved jobs fail with that exception.
    max_batch : int
        Texts per batch (a single larger job forms a batch of its own).
    max_wait : float
        Seconds the oldest queued job may wait for company before its batch starts.
    max_queue : int
        Texts that may wait; beyond that :meth:`submit` raises :class:`QueueFull`.
    workers : int
        Batches processed at the same time (1 for an in-process model).
    on_batch : callable(int), optional
        Called with the number of texts of each batch (metrics).
    clock : callable() -> float, optional
        Monotonic seconds (default :func:`time.monotonic`).
    """

    def __init__(
        self,
        process: Callable[[list[Job]], Awaitable[None]],
        *,
        max_batch: int,
        max_wait: float,
        max_queue: int,
        workers: int = 1,
        on_batch: Callable[[int], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._process = process
        self._clock = clock if clock is not None else time.monotonic
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.workers = workers
        self._on_batch = on_batch
        self._queue: deque[Job] = deque()
        self.pending = 0
        self._wakeup: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._intake_closed = False
        self.busy = 0

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker tasks (call from the running event loop)."""
        self._wakeup = asyncio.Event()
        self._closing = False
        self._intake_closed = False
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]

    def close(self) -> None:
        """Take no new jobs (:meth:`enqueue` raises :class:`ShuttingDown`); the workers go on."""
        self._intake_closed = True

    async def stop(self) -> None:
        """Take no new jobs, finish the queued ones, then end the workers."""
        self._intake_closed = True
        self._closing = True
        if self._wakeup is not None:
            self._wakeup.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # ---- submitting --------------------------------------------------------------------------
    def retry_after(self) -> int:
        """Seconds a refused client should wait (about one queue's worth of batches)."""
        return max(1, min(30, int(self.pending // max(1, self.max_batch)) // 10 + 1))

    def enqueue(self, payload: Any, size: int | None = None) -> asyncio.Future[Any]:
        """Queue a job at once; its future gets the result.

        Parameters
        ----------
        payload : object
            Handed to the processor in :attr:`Job.payload`.
        size : int, optional
            Texts in the job (default ``len(payload)``).

        Raises
        ------
        QueueFull
            The queue has no room for ``size`` more texts.
        ShuttingDown
            :meth:`stop` has been called.
        """
        if self._closing or self._intake_closed or self._wakeup is None:
            raise ShuttingDown()
        n = len(payload) if size is None else size
        if self.pending + n > self.max_queue:
            raise QueueFull()
        job = Job(payload, n, asyncio.get_running_loop().create_future(), self._clock())
        self._queue.append(job)
        self.pending += n
        self._wakeup.set()
        return job.future

    async def submit(self, payload: Any, size: int | None = None) -> Any:
        """Queue a job (:meth:`enqueue`) and wait for its result."""
        return await self.enqueue(payload, size)

    # ---- the worker --------------------------------------------------------------------------
    def _take(self) -> list[Job]:
        batch: list[Job] = []
        total = 0
        while self._queue:
            job = self._queue[0]
            if batch and total + job.size > self.max_batch:
                break
            self._queue.popleft()
            self.pending -= job.size
            if job.future.done():  # the client gave up (timeout): skip the work
                continue
            batch.append(job)
            total += job.size
        return batch

    async def _worker(self) -> None:
        assert self._wakeup is not None
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            # wait for company: until the batch is full or the oldest job is max_wait old
            deadline = self._queue[0].enqueued + self.max_wait
            while self.pending < self.max_batch and not self._closing:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    break
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
                except TimeoutError:
                    break
            batch = self._take()
            if not batch:
                continue
            if self._on_batch is not None:
                self._on_batch(sum(j.size for j in batch))
            self.busy += 1
            try:
                await self._process(batch)
            except Exception as exc:  # the processor failed as a whole: fail its jobs
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(exc)
            finally:
                self.busy -= 1

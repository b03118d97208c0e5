"""Pools: many workers behind one ``get_state``.

The pool does not know which kind its workers are. It shares one :class:`Inbox` with
them; the only difference between the async pool and the forced-sync twin is the order
in which that inbox hands outcomes out (first finished vs first sent).
"""

from __future__ import annotations

import asyncio
import operator
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, ClassVar, Generic, Literal, TypeVar

import anyio

from ._batch import Batch
from ._errors import ClosedError, NoActionInFlight, StateNotTaken, UnknownWorker, WorkerError
from ._inbox import Inbox, Outcome
from ._sentinels import RESET
from ._supervision import Supervision
from .workers._base import Worker

__all__ = ["AsyncWorkerPool", "SyncWorkerPool", "WorkerPool"]

S = TypeVar("S")


class WorkerPool(Generic[S]):
    """The methods both pools share. Use :class:`AsyncWorkerPool` or :class:`SyncWorkerPool`.

    A pool is an async context manager that owns its workers: leaving the ``async with``
    block closes every worker (timed: close, wait ``cleanup_time``, terminate, kill), even
    when the body raised or was cancelled. Worker ids are the positions in ``workers``.
    """

    _ordered: ClassVar[bool]

    def __init__(
        self,
        workers: Sequence[Worker[S]],
        *,
        cleanup_time: float = 5.0,
        step_timeout: float | None = None,
        start_timeout: float | None = None,
        restart: Literal["never", "on_failure"] = "never",
        max_restarts: int = 3,
        restart_backoff: float = 0.0,
        on_failure: Callable[[WorkerError], None] | None = None,
    ) -> None:
        workers = list(workers)
        if not workers:
            raise ValueError("a pool needs at least one worker")
        for position, worker in enumerate(workers):
            if not isinstance(worker, Worker):
                raise TypeError(
                    f"workers[{position}] is a {type(worker).__name__}, not an aioenv worker "
                    "(SyncWorker, ThreadWorker or ProcessWorker); use make_pool() to build "
                    "workers from envs"
                )
            if worker._in_pool or any(other is worker for other in workers[:position]):
                raise ValueError(f"workers[{position}] ({worker.name}) already belongs to a pool")
        if not (isinstance(cleanup_time, (int, float)) and cleanup_time >= 0):
            raise ValueError(f"cleanup_time must be a number >= 0, got {cleanup_time!r}")
        supervision = Supervision(
            step_timeout=step_timeout,
            start_timeout=start_timeout,
            restart=restart,
            max_restarts=max_restarts,
            restart_backoff=restart_backoff,
            on_failure=self._on_worker_failure,
        )
        self.cleanup_time = float(cleanup_time)
        #: Failures seen (env exceptions, deaths, timeouts), restarted or raised.
        self.failures = 0
        self._on_failure = on_failure
        self._inbox = Inbox(ordered=self._ordered)
        for worker_id, worker in enumerate(workers):
            worker._attach(self._inbox, worker_id, supervision)
        self._workers = workers
        self._closed = False
        self._close_done: anyio.Event | None = None

    @property
    def restarts(self) -> int:
        """Restarts done so far, over all workers."""
        return sum(worker.restarts for worker in self._workers)

    def _on_worker_failure(self, error: WorkerError) -> None:
        self.failures += 1
        if self._on_failure is not None:
            try:
                self._on_failure(error)
            except Exception as exc:  # a broken callback must not break the pool's wiring
                warnings.warn(f"on_failure callback raised {exc!r}", RuntimeWarning, stacklevel=2)

    @property
    def workers(self) -> tuple[Worker[S], ...]:
        return tuple(self._workers)

    def __len__(self) -> int:
        return len(self._workers)

    def __repr__(self) -> str:
        kinds = ", ".join(sorted({worker.kind for worker in self._workers}))
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} of {len(self)} workers ({kinds}), {state}>"

    # Sending ---------------------------------------------------------------------------
    def send_action(self, action: Any, worker_id: int) -> None:
        """Send ``action`` (or ``RESET``/``CLOSE``) to one worker. Returns at once."""
        self._check_open()
        self._worker(worker_id).send_action(action)

    def reset(self) -> None:
        """Send ``RESET`` to every open worker; the replies come back through
        ``get_state``/``get_batch`` like any other state."""
        self._check_open()
        targets = [worker for worker in self._workers if not worker.closed]
        for worker in targets:
            if worker._failure is not None:
                raise worker._failure
            if self._inbox.is_owed(worker.worker_id):
                raise StateNotTaken(
                    f"reset(): {worker.name} has an action in flight or a state not taken; "
                    "take every pending state before resetting (nothing was sent)"
                )
        for worker in targets:
            worker.send_action(RESET)

    # Receiving -------------------------------------------------------------------------
    async def get_state(self, timeout: float | None = None) -> tuple[S, int] | None:
        """The state of whichever worker finished first (the async pool), or of the oldest
        action sent (the sync pool), as ``(state, worker_id)``; None if ``timeout``
        seconds pass first."""
        self._check_open()
        outcome = self._inbox.pop_next()
        if outcome is None:
            outcome = await self._wait_next(timeout)
            if outcome is None:
                return None
        if outcome.error is not None:
            raise outcome.error
        return outcome.state, outcome.worker_id  # type: ignore[return-value]

    async def get_batch(
        self, min_size: int = 1, max_size: int | None = None, timeout: float | None = None
    ) -> Batch[S]:
        """Wait until ``min_size`` states are ready (or ``timeout`` passes) and return up
        to ``max_size`` of them. After a timeout the batch holds whatever was ready, which
        may be nothing. An env error is raised when it is next in line; states ready
        before it are returned first, so nothing is lost."""
        self._check_open()
        if not isinstance(min_size, int) or min_size < 1:
            raise ValueError(f"min_size must be an int >= 1, got {min_size!r}")
        if max_size is not None and (not isinstance(max_size, int) or max_size < min_size):
            raise ValueError(f"max_size must be None or an int >= min_size, got {max_size!r}")
        inbox = self._inbox
        deadline = self._deadline(timeout)
        while inbox.num_ready() < min_size:
            owed = inbox.num_owed
            if owed < min_size:
                raise NoActionInFlight(
                    f"get_batch(min_size={min_size}) would wait forever: only {owed} worker(s) "
                    "have an action in flight or a state not taken"
                )
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                break
            await inbox.wait(deadline)
            self._check_open()
        limit = inbox.num_ready() if max_size is None else min(max_size, inbox.num_ready())
        outcomes: list[Outcome] = []
        while len(outcomes) < limit:
            upcoming = inbox.peek_next()
            if upcoming is None:
                break
            if upcoming.error is not None:
                if not outcomes:
                    inbox.pop_next()
                    raise upcoming.error
                break
            inbox.pop_next()
            outcomes.append(upcoming)
        ids = [outcome.worker_id for outcome in outcomes]
        space = self._workers[ids[0]].observation_space if ids else None  # type: ignore[index]
        return Batch(ids, [outcome.state for outcome in outcomes], space)  # type: ignore[arg-type]

    def __aiter__(self) -> AsyncIterator[tuple[S, int]]:
        """``async for state, worker_id in pool``: states as they arrive, until no worker
        has an action in flight."""
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[tuple[S, int]]:
        while self._inbox.num_owed:
            item = await self.get_state()
            assert item is not None
            yield item

    async def _wait_next(self, timeout: float | None) -> Outcome | None:
        inbox = self._inbox
        deadline = self._deadline(timeout)
        while True:
            if not inbox.num_owed:
                raise NoActionInFlight(
                    "get_state() would wait forever: no worker has an action in flight; "
                    "call pool.send_action(action, worker_id) or pool.reset() first"
                )
            await inbox.wait(deadline)
            self._check_open()
            outcome = inbox.pop_next()
            if outcome is not None:
                return outcome
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                return None

    @staticmethod
    def _deadline(timeout: float | None) -> float | None:
        if timeout is None:
            return None
        if not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")
        return asyncio.get_running_loop().time() + timeout

    # Lifecycle -------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close every worker concurrently, each bounded by ``cleanup_time`` (then
        terminate, then kill). Idempotent; runs to the end even if cancelled."""
        if self._close_done is not None:
            with anyio.CancelScope(shield=True):
                await self._close_done.wait()
            return
        self._close_done = anyio.Event()
        self._closed = True
        with anyio.CancelScope(shield=True):
            self._inbox.close()
            try:
                async with anyio.create_task_group() as group:
                    for worker in self._workers:
                        group.start_soon(worker.aclose, self.cleanup_time)
            finally:
                self._close_done.set()

    async def __aenter__(self) -> WorkerPool[S]:
        self._check_open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # Helpers ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the pool is closed; create a new pool to keep going")

    def _worker(self, worker_id: int) -> Worker[S]:
        try:
            index = operator.index(worker_id)
        except TypeError:
            raise UnknownWorker(f"worker ids are ints, got {worker_id!r}") from None
        if not 0 <= index < len(self._workers) or isinstance(worker_id, bool):
            raise UnknownWorker(
                f"no worker {worker_id!r}: this pool has workers 0..{len(self._workers) - 1}"
            )
        return self._workers[index]


class AsyncWorkerPool(WorkerPool[S]):
    """Hands out states in the order they finish: a fast env never waits for a slow one."""

    _ordered = False

    async def __aenter__(self) -> AsyncWorkerPool[S]:
        self._check_open()
        return self


class SyncWorkerPool(WorkerPool[S]):
    """The forced-sync twin: the same methods and rules, but states come back in the order
    their actions were sent, so a program gives the same result on every run. With
    :class:`~aioenv.SyncWorker` workers (``make_pool(..., force_sync=True)``) nothing runs
    concurrently at all."""

    _ordered = True

    async def __aenter__(self) -> SyncWorkerPool[S]:
        self._check_open()
        return self

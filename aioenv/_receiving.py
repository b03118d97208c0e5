"""A pool's receiving side: ``get_state``, ``get_batch``, ``async for`` and ``drain``.

Everything here takes outcomes from the pool's :class:`~aioenv._inbox.Inbox` (the one place
where states are delivered): waiting there, never polling, and raising an env's error in
place of its state, in the order the pool hands states out.
"""

from __future__ import annotations

import abc
import asyncio
import operator
from collections.abc import AsyncIterator
from typing import Any, Generic, TypeVar

from ._batch import Batch, ReusedRows
from ._episodes import EpisodeCounter
from ._errors import NoActionInFlight, WorkerError, WorkerPaused
from ._inbox import Inbox, Outcome
from .loops._here import not_on_asyncio
from .workers._base import Worker

__all__ = ["Receiving"]

S = TypeVar("S")


class Receiving(abc.ABC, Generic[S]):
    """The receiving methods of :class:`~aioenv.WorkerPool`."""

    _inbox: Inbox
    _workers: list[Worker[S]]
    _episodes: EpisodeCounter
    _reused_rows: ReusedRows
    _loop: asyncio.AbstractEventLoop | None
    copy: bool

    @abc.abstractmethod
    def _check_open(self) -> None:
        """Raise ClosedError if the pool is closed."""

    @abc.abstractmethod
    def _worker(self, worker_id: int) -> Worker[S]:
        """The worker with this id (UnknownWorker otherwise)."""

    async def get_state(
        self, timeout: float | None = None, *, worker_id: int | None = None
    ) -> tuple[S, int] | None:
        """The state of whichever worker finished first (the async pool), or of the oldest
        action sent (the sync pool), as ``(state, worker_id)``; None if ``timeout``
        seconds pass first. ``worker_id=i`` waits for worker ``i``'s state only; the
        others' states stay in the pool for later calls."""
        self._check_open()
        if worker_id is not None:
            outcome = await self._wait_for(self._worker(worker_id), timeout)
        else:
            outcome = self._inbox.pop_next()
            if outcome is None:
                outcome = await self._wait_next(timeout)
        if outcome is None:
            return None
        if outcome.error is not None:
            raise outcome.error
        state = outcome.state
        if outcome.borrowed and self.copy:
            state = state.owned()
        self._episodes.record(outcome.worker_id, state)  # type: ignore[arg-type]
        return state, outcome.worker_id  # type: ignore[return-value]

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
        if self._loop is not asyncio._get_running_loop():
            self._check_loop()
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
        outcomes = inbox.take(limit)
        if outcomes and outcomes[0].error is not None:
            raise outcomes[0].error
        record = self._episodes.record
        for outcome in outcomes:
            record(outcome.worker_id, outcome.state)  # type: ignore[arg-type]
        space = self._workers[outcomes[0].worker_id].observation_space if outcomes else None  # type: ignore[index]
        rows = None if self.copy else self._reused_rows
        return Batch.of_outcomes(outcomes, space, rows)

    def __aiter__(self) -> AsyncIterator[tuple[S, int]]:
        """``async for state, worker_id in pool``: states as they arrive, until no worker
        has an action in flight."""
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[tuple[S, int]]:
        self._check_open()
        while self._inbox.num_owed:
            item = await self.get_state()
            assert item is not None
            yield item

    async def drain(self) -> list[tuple[S | WorkerError, int]]:
        """Wait for every action in flight and take every state not yet taken, so the pool
        is idle (``reset()`` works again). Returns ``(state, worker_id)`` in worker-id
        order; where a worker's action failed, the error it raised takes the state's place
        (it is returned, not raised, so no other state is lost). Paused workers are left
        alone: they keep their pending state until resumed. Cancel-safe: states are taken
        only once all of them are ready, so a cancelled ``drain()`` takes nothing."""
        self._check_open()
        inbox = self._inbox
        while inbox.num_ready() < inbox.num_owed:
            await inbox.wait(None)
            self._check_open()
        taken: list[tuple[Any, int]] = []
        while (outcome := inbox.pop_next()) is not None:
            worker_id: int = outcome.worker_id  # type: ignore[assignment]
            if outcome.error is not None:
                taken.append((outcome.error, worker_id))
                continue
            state = outcome.state.owned() if outcome.borrowed and self.copy else outcome.state
            self._episodes.record(worker_id, state)
            taken.append((state, worker_id))
        return sorted(taken, key=operator.itemgetter(1))

    def _check_loop(self) -> None:
        """Before waiting on a new event loop: a worker whose reply was due on an old one
        raises at once (its reply is lost with that loop) rather than hang."""
        loop = asyncio._get_running_loop()
        if loop is None:
            raise not_on_asyncio("a pool's get_state()/get_batch()")
        if loop is self._loop:
            return
        for worker in self._workers:
            if self._inbox.is_owed(worker.worker_id):
                worker.enter_loop()
        self._loop = loop

    async def _wait_next(self, timeout: float | None) -> Outcome | None:
        inbox = self._inbox
        self._check_loop()
        deadline = self._deadline(timeout)
        while True:
            if not inbox.num_owed:
                raise NoActionInFlight(
                    "get_state() would wait forever: no unpaused worker has an action in "
                    "flight; call pool.send_action(action, worker_id) or pool.reset() first"
                )
            await inbox.wait(deadline)
            self._check_open()
            outcome = inbox.pop_next()
            if outcome is not None:
                return outcome
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                return None

    async def _wait_for(self, worker: Worker[S], timeout: float | None) -> Outcome | None:
        inbox = self._inbox
        self._check_loop()
        deadline = self._deadline(timeout)
        if inbox.is_paused(worker.worker_id):
            raise WorkerPaused(f"{worker.name} is paused; pool.resume({worker.worker_id}) first")
        while True:
            outcome = inbox.pop(worker.worker_id)
            if outcome is not None:
                return outcome
            if not inbox.is_owed(worker.worker_id):
                raise NoActionInFlight(
                    f"get_state(worker_id={worker.worker_id}) would wait forever: {worker.name} "
                    "has no action in flight; send it an action first"
                )
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                return None
            await inbox.wait(deadline)
            self._check_open()

    @staticmethod
    def _deadline(timeout: float | None) -> float | None:
        if timeout is None:
            return None
        if not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")
        return asyncio.get_running_loop().time() + timeout

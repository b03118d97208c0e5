"""The one place where states are delivered to waiters.

Every worker kind hands its outcomes to an :class:`Inbox`: a standalone worker owns one,
a pool shares one among all its workers. An outcome stays in the inbox until a consumer
pops it, and waiters are only woken (never handed a value), so a consumer that is
cancelled while waiting loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

__all__ = ["Inbox", "Outcome"]


@dataclasses.dataclass
class Outcome:
    """What one action produced: a state, or the error to raise in its place."""

    worker_id: int | None
    state: Any
    error: BaseException | None = None


class Inbox:
    """Outcomes owed by workers and those ready to be taken.

    ``ordered=False`` (the async pool): outcomes are taken in arrival order, whichever
    worker finished first. ``ordered=True`` (the forced-sync pool): outcomes are taken in
    the order the actions were sent, whatever order they finish in.
    """

    def __init__(self, *, ordered: bool) -> None:
        self.ordered = ordered
        self._owed: dict[int | None, None] = {}  # insertion order == send order
        self._ready: dict[int | None, Outcome] = {}  # insertion order == arrival order
        self._waiters: list[asyncio.Future[None]] = []
        self.closed = False

    # Producer side -------------------------------------------------------------------
    def owe(self, worker_id: int | None) -> None:
        """An action was sent to ``worker_id``; its outcome is now owed."""
        self._owed[worker_id] = None

    def is_owed(self, worker_id: int | None) -> bool:
        return worker_id in self._owed

    def deliver(self, outcome: Outcome) -> None:
        if outcome.worker_id not in self._owed:
            return  # forgiven (the worker was closed); nobody waits for it
        self._ready[outcome.worker_id] = outcome
        self._wake()

    def forgive(self, worker_id: int | None) -> None:
        """Stop owing ``worker_id``'s outcome (its worker is being closed)."""
        self._owed.pop(worker_id, None)
        self._ready.pop(worker_id, None)
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    # Consumer side -------------------------------------------------------------------
    @property
    def num_owed(self) -> int:
        return len(self._owed)

    def num_ready(self) -> int:
        if not self.ordered:
            return len(self._ready)
        count = 0
        for worker_id in self._owed:
            if worker_id not in self._ready:
                break
            count += 1
        return count

    def pop_next(self) -> Outcome | None:
        """The next outcome to take, or None if it has not arrived yet."""
        if self.ordered:
            if not self._owed:
                return None
            worker_id = next(iter(self._owed))
            outcome = self._ready.pop(worker_id, None)
        else:
            if not self._ready:
                return None
            worker_id = next(iter(self._ready))
            outcome = self._ready.pop(worker_id)
        if outcome is not None:
            del self._owed[worker_id]
        return outcome

    def peek_next(self) -> Outcome | None:
        if self.ordered:
            if not self._owed:
                return None
            return self._ready.get(next(iter(self._owed)))
        return next(iter(self._ready.values()), None)

    def pop(self, worker_id: int | None) -> Outcome | None:
        outcome = self._ready.pop(worker_id, None)
        if outcome is not None:
            del self._owed[worker_id]
        return outcome

    async def wait(self, deadline: float | None) -> None:
        """Return after the next delivery, forgiveness or close, or at ``deadline``
        (loop time). Callers re-check what they wait for: wake-ups can be spurious."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = None if deadline is None else loop.call_at(deadline, _wake_one, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            with contextlib.suppress(ValueError):  # a wake-up already took it off the list
                self._waiters.remove(waiter)

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                _wake_one(waiter)


def _wake_one(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)

"""The one place where states are delivered to waiters.

Every worker kind hands its outcomes to an :class:`Inbox`: a standalone worker owns one,
a pool shares one among all its workers. An outcome stays in the inbox until a consumer
pops it, and waiters are only woken (never handed a value), so a consumer that is
cancelled while waiting loses nothing.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from typing import Any

from ..loops._here import not_on_asyncio

__all__ = ["Inbox", "Outcome"]


@dataclasses.dataclass(slots=True)
class Outcome:
    """What one action produced: a state, or the error to raise in its place."""

    worker_id: int | None
    state: Any
    error: BaseException | None = None
    borrowed: bool = False  # the state's observation views shared memory: copy it to keep it


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
        #: The async pool's outcomes in arrival order, for its hot path: taking a dict's
        #: first key scans past every key deleted before it (a dict used as a queue slows
        #: down with its traffic), a deque's is O(1). Outcomes taken some other way (by
        #: worker, while some are paused) or forgiven stay here, stale, until met.
        self._arrivals: collections.deque[Outcome] = collections.deque()
        self._waiters: list[asyncio.Future[None]] = []
        self._paused: set[int | None] = set()  # their outcomes wait until they are resumed

    # Producer side -------------------------------------------------------------------
    def owe(self, worker_id: int | None) -> None:
        """An action was sent to ``worker_id``; its outcome is now owed."""
        self._owed[worker_id] = None

    def is_owed(self, worker_id: int | None) -> bool:
        return worker_id in self._owed

    def deliver(self, outcome: Outcome) -> None:
        worker_id = outcome.worker_id
        if worker_id not in self._owed:
            return  # forgiven (the worker was closed); nobody waits for it
        ready = self._ready
        ready[worker_id] = outcome
        if not self.ordered:
            self._arrivals.append(outcome)
        if self._waiters:
            self._wake()

    def forgive(self, worker_id: int | None) -> None:
        """Stop owing ``worker_id``'s outcome (its worker is being closed)."""
        self._owed.pop(worker_id, None)
        if self._ready.pop(worker_id, None) is not None:
            self._left_out_of_order()
        self._wake()

    def close(self) -> None:
        """The pool is closing: wake every waiter (each re-checks and raises)."""
        self._wake()

    def pause(self, worker_id: int | None) -> None:
        self._paused.add(worker_id)

    def resume(self, worker_id: int | None) -> None:
        self._paused.discard(worker_id)
        self._wake()

    def is_paused(self, worker_id: int | None) -> bool:
        return worker_id in self._paused

    # Consumer side -------------------------------------------------------------------
    @property
    def num_owed(self) -> int:
        """Outcomes owed by workers that are not paused (what a consumer can wait for)."""
        if not self._paused:
            return len(self._owed)
        return sum(1 for worker_id in self._owed if worker_id not in self._paused)

    def num_ready(self) -> int:
        paused = self._paused
        if not self.ordered:
            if not paused:
                return len(self._ready)
            return sum(1 for worker_id in self._ready if worker_id not in paused)
        count = 0
        for worker_id in self._owed:
            if worker_id in paused:
                continue
            if worker_id not in self._ready:
                break
            count += 1
        return count

    def _next_id(self) -> int | bool | None:
        """The worker whose outcome is next in line (False: none is)."""
        paused = self._paused
        if self.ordered:
            for worker_id in self._owed:
                if worker_id not in paused:
                    return worker_id if worker_id in self._ready else False
            return False
        for worker_id in self._ready:
            if worker_id not in paused:
                return worker_id
        return False

    def pop_next(self) -> Outcome | None:
        """The next outcome to take, or None if it has not arrived yet."""
        if not self._paused and not self.ordered:  # the hot path: arrival order
            arrivals, ready = self._arrivals, self._ready
            while arrivals:
                outcome = arrivals.popleft()
                worker_id = outcome.worker_id
                if ready.get(worker_id) is outcome:  # else stale: taken or forgiven
                    del ready[worker_id], self._owed[worker_id]
                    return outcome
            return None
        worker_id = self._next_id()
        if worker_id is False:
            return None
        del self._owed[worker_id]
        outcome = self._ready.pop(worker_id)
        self._left_out_of_order()
        return outcome

    def take(self, limit: int) -> list[Outcome]:
        """Up to ``limit`` outcomes in the order ``pop_next`` would give them, stopping
        before an error unless it comes first (so states ready before it are not lost)."""
        taken: list[Outcome] = []
        if not self._paused and not self.ordered:  # the hot path: arrival order
            arrivals, ready, owed = self._arrivals, self._ready, self._owed
            while arrivals and len(taken) < limit:
                outcome = arrivals[0]
                worker_id = outcome.worker_id
                if ready.get(worker_id) is not outcome:  # stale: taken or forgiven
                    arrivals.popleft()
                    continue
                if outcome.error is not None and taken:
                    break
                arrivals.popleft()
                del ready[worker_id], owed[worker_id]
                taken.append(outcome)
                if outcome.error is not None:
                    break
            return taken
        while len(taken) < limit:
            upcoming = self.peek_next()
            if upcoming is None or (upcoming.error is not None and taken):
                break
            self.pop_next()
            taken.append(upcoming)
            if upcoming.error is not None:
                break
        return taken

    def peek_next(self) -> Outcome | None:
        worker_id = self._next_id()
        return None if worker_id is False else self._ready[worker_id]

    def pop(self, worker_id: int | None) -> Outcome | None:
        outcome = self._ready.pop(worker_id, None)
        if outcome is not None:
            del self._owed[worker_id]
            self._left_out_of_order()
        return outcome

    def _left_out_of_order(self) -> None:
        """An outcome left the ready set other than from the front of the arrivals, which
        keep it, stale: once they are mostly stale, keep only the ready ones (in arrival
        order: the ready set's insertion order)."""
        if not self.ordered and len(self._arrivals) > 2 * len(self._ready) + 64:
            self._arrivals = collections.deque(self._ready.values())

    async def wait(self, deadline: float | None) -> None:
        """Return after the next delivery, forgiveness or close, or at ``deadline``
        (loop time). Callers re-check what they wait for: wake-ups can be spurious."""
        try:  # free unless it raises
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise not_on_asyncio("waiting for a state (get_state, get_batch, drain)") from None
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = None if deadline is None else loop.call_at(deadline, _wake_one, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if waiter in self._waiters:  # unless a wake-up already took it off the list
                self._waiters.remove(waiter)

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                _wake_one(waiter)


def _wake_one(waiter: asyncio.Future[None]) -> None:
    if waiter.done():
        return
    try:  # a try costs nothing here, a suppress() context would on every delivery
        waiter.set_result(None)
    except RuntimeError:
        return  # its event loop is closed: nobody waits on it any more

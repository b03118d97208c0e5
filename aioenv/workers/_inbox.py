"""The one place where states are delivered to waiters.

Every worker kind hands its outcomes to an :class:`Inbox`: a standalone worker owns one,
a pool shares one among all its workers. An outcome stays in the inbox until a consumer
pops it, and waiters are only woken (never handed a value), so a consumer that is
cancelled while waiting loses nothing.

A worker keeps its requests in fields of its own (see
:class:`~aioenv.workers._supervised.SupervisedEnv`): their sequence numbers, the one whose
reply is awaited, the control requests answered in order after it (the futures their
answers go to), and the inbox where the worker's states go. A reply is used only while its
request is awaited (the step, reset or rollout in flight) or pending (a control request:
call a method, get or set an attribute); any other reply is stale (a late answer to a
request given up on) and is dropped unread.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

from ..core._errors import WorkerError, pool_closed
from ..loops._here import not_on_asyncio

__all__ = ["IN_LINE_WAIT", "Inbox", "Outcome"]

#: Seconds a pool that serves fairly waits, at most, for another worker's answer on its
#: way before it hands out an in-line state again (see ``Inbox.let_the_others_in``).
IN_LINE_WAIT = 0.001


@dataclasses.dataclass(slots=True)
class Outcome:
    """What one action produced: a state, or the error to raise in its place (a worker's
    failure: a request that failed, or a worker given up on, answers a WorkerError)."""

    worker_id: int | None
    state: Any
    error: WorkerError | None = None
    borrowed: bool = False  # the state's observation views shared memory: copy it to keep it


class Inbox:
    """Outcomes owed by workers and those ready to be taken.

    ``ordered=False`` (the async pool): outcomes are taken in arrival order, whichever
    worker finished first. ``ordered=True`` (the forced-sync pool): outcomes are taken in
    the order the actions were sent, whatever order they finish in.

    After :meth:`serve_fairly` (an async pool that mixes workers answering in line with
    others): of the outcomes ready, the one of the worker served longest ago is taken
    first (ties in arrival order), so an outcome that came in after one a worker handed in
    again at once still goes first. Arrival order already serves no worker twice while
    another's outcome waits (a worker's next outcome arrives only after it was served),
    except for outcomes delivered inside the send, before the others'.
    """

    def __init__(self, *, ordered: bool) -> None:
        self.ordered = ordered
        #: The workers whose outcome is owed, in send order (a dict as an ordered set):
        #: read it anywhere (``worker_id in inbox.owed``); change it only here, and in a
        #: worker's ``send_action`` (``owe``, inlined: the per-step path).
        self.owed: dict[int | None, None] = {}
        self._ready: dict[int | None, Outcome] = {}  # insertion order == arrival order
        #: The async pool's outcomes in arrival order, for its hot path: taking a dict's
        #: first key scans past every key deleted before it (a dict used as a queue slows
        #: down with its traffic), a deque's is O(1). Outcomes taken some other way (by
        #: worker, while some are paused) or forgiven stay here, stale, until met. None
        #: where outcomes are not taken in arrival order (ordered, or after serve_fairly()).
        self._arrivals: collections.deque[Outcome] | None = None if ordered else collections.deque()
        self._waiters: list[asyncio.Future[None]] = []
        #: The workers paused: their outcomes wait until they are resumed (read it anywhere;
        #: change it with pause() and resume()).
        self.paused: set[int | None] = set()
        #: After serve_fairly(): per worker, the turn (a count) its last outcome was taken.
        self._served: dict[int | None, int] | None = None
        self._turn = 0
        #: The pool is closed (:meth:`close`): every call of its raises (:meth:`check_open`).
        self.closed = False

    def serve_fairly(self) -> None:
        """Take outcomes least recently served worker first from now on (see the class)."""
        if self.ordered:
            raise ValueError("an ordered inbox takes outcomes in the order they were owed")
        self._served = {}
        self._arrivals = None

    # Producer side -------------------------------------------------------------------
    def owe(self, worker_id: int | None) -> None:
        """An action was sent to ``worker_id``; its outcome is now owed."""
        self.owed[worker_id] = None

    def deliver(self, outcome: Outcome) -> None:
        worker_id = outcome.worker_id
        if worker_id not in self.owed:
            return  # forgiven (the worker was closed); nobody waits for it
        ready = self._ready
        ready[worker_id] = outcome
        if self._arrivals is not None:
            self._arrivals.append(outcome)
        if self._waiters:
            self._wake()

    def forgive(self, worker_id: int | None) -> None:
        """Stop owing ``worker_id``'s outcome (its worker is being closed)."""
        self.owed.pop(worker_id, None)
        if self._ready.pop(worker_id, None) is not None:
            self._left_out_of_order()
        self._wake()

    def close(self) -> None:
        """The pool is closing: wake every waiter (its wait raises ClosedError)."""
        self.closed = True
        self._wake()

    def check_open(self) -> None:
        """Raise :class:`~aioenv.ClosedError` once the pool is closed."""
        if self.closed:
            raise pool_closed()

    def pause(self, worker_id: int | None) -> None:
        self.paused.add(worker_id)
        self._wake()  # a wait for its outcome alone now waits for nothing: it re-checks

    def resume(self, worker_id: int | None) -> None:
        self.paused.discard(worker_id)
        self._wake()

    # Consumer side -------------------------------------------------------------------
    @property
    def num_owed(self) -> int:
        """Outcomes owed by workers that are not paused (what a consumer can wait for)."""
        if not self.paused:
            return len(self.owed)
        return sum(1 for worker_id in self.owed if worker_id not in self.paused)

    def num_ready(self) -> int:
        """Outcomes that can be taken now, one after another (see :meth:`_next_id`)."""
        paused, ready = self.paused, self._ready
        if not self.ordered and not paused:
            return len(ready)
        count = 0
        for worker_id in self.owed if self.ordered else ready:
            if worker_id in paused:
                continue
            if worker_id not in ready:  # ordered: the next outcome owed is not in yet
                break
            count += 1
        return count

    def _next_id(self) -> int | bool | None:
        """The worker whose outcome is next in line (False: none is): ordered, the first
        worker owed (not paused) if its outcome is ready; else, of the outcomes ready (not
        paused), the first to arrive, or after serve_fairly() the one of the worker served
        longest ago (ties in arrival order)."""
        paused, ready, served = self.paused, self._ready, self._served
        chosen: int | bool | None = False
        oldest = 0
        for worker_id in self.owed if self.ordered else ready:
            if worker_id in paused:
                continue
            if served is None:  # ordered (the first owed, if it is in) or arrival order
                return worker_id if worker_id in ready else False
            turn = served.get(worker_id, -1)
            if chosen is False or turn < oldest:
                chosen, oldest = worker_id, turn
        return chosen

    def pop_next(self) -> Outcome | None:
        """The next outcome to take, or None if it has not arrived yet."""
        if self._arrivals is not None and not self.paused:  # the hot path: arrival order
            arrivals, ready = self._arrivals, self._ready
            while arrivals:
                outcome = arrivals.popleft()
                worker_id = outcome.worker_id
                if ready.get(worker_id) is outcome:  # else stale: taken or forgiven
                    del ready[worker_id], self.owed[worker_id]
                    return outcome
            return None
        worker_id = self._next_id()
        if worker_id is False:
            return None
        # In line rather than through pop(): a sync pool's (and a fair pool's) every state.
        del self.owed[worker_id]
        outcome = self._ready.pop(worker_id)
        self._left_out_of_order()
        self._record_service(worker_id)
        return outcome

    def take(self, limit: int) -> list[Outcome]:
        """Up to ``limit`` outcomes in the order ``pop_next`` would give them, stopping
        before an error unless it comes first (so states ready before it are not lost)."""
        taken: list[Outcome] = []
        if self._arrivals is not None and not self.paused:  # the hot path: arrival order
            arrivals, ready, owed = self._arrivals, self._ready, self.owed
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
        while len(taken) < limit and (worker_id := self._next_id()) is not False:
            upcoming = self._ready[worker_id]
            if upcoming.error is not None and taken:
                break
            self.pop(worker_id)
            taken.append(upcoming)
            if upcoming.error is not None:
                break
        return taken

    def pop(self, worker_id: int | None) -> Outcome | None:
        outcome = self._ready.pop(worker_id, None)
        if outcome is not None:
            del self.owed[worker_id]
            self._left_out_of_order()
            self._record_service(worker_id)
        return outcome

    def last_served(self, worker_id: int | None) -> int:
        """After serve_fairly(): the turn ``worker_id``'s last outcome was taken (-1: never)."""
        assert self._served is not None
        return self._served.get(worker_id, -1)

    def oldest_on_its_way(self) -> int | None:
        """After serve_fairly(): of the workers whose outcome is owed but not ready (not
        paused), the earliest turn one was last served (-1: never); None if there is none."""
        served, ready, paused = self._served, self._ready, self.paused
        assert served is not None
        oldest: int | None = None
        for worker_id in self.owed:
            if worker_id not in ready and worker_id not in paused:
                turn = served.get(worker_id, -1)
                if oldest is None or turn < oldest:
                    oldest = turn
        return oldest

    async def let_the_others_in(
        self, in_line: Sequence[bool], deadline: float | None, *, whole_batch: bool
    ) -> bool:
        """After :meth:`serve_fairly`, before a pool takes states, where ``in_line[i]``
        says worker ``i`` answers in line (its state is here as soon as its action is
        sent): while the next state (``whole_batch``: any state ready) is an in-line
        worker's, served after some other worker whose answer is still on its way, wait
        for answers, at most ``IN_LINE_WAIT`` in all and never past ``deadline``: that
        worker is served first (it was served longer ago). So among the workers whose
        answers are in or on their way, an in-line worker is not served twice before each
        of the others once, unless they take longer than that; the others are never held
        back. The wait releases the GIL and the CPU, which a thread worker needs to finish
        its step and a process worker may need to run. True if it waited."""
        loop = asyncio.get_running_loop()
        until: float | None = None  # set before the first wait: it waited once it is
        # While answers are on their way (owed, not ready, not paused: every outcome ready
        # is owed); the answers of paused workers are not waited for.
        while (oldest := self.oldest_on_its_way()) is not None:
            if whole_batch:  # every worker whose outcome is ready (not paused)
                held = [i for i in self._ready if i not in self.paused]
            else:  # the worker whose outcome is next in line, if any
                next_id = self._next_id()
                held = [] if next_id is False else [next_id]
            held = [i for i in held if in_line[i]]  # type: ignore[index]
            if not any(self.last_served(i) > oldest for i in held):
                break
            if until is None:
                until = loop.time() + IN_LINE_WAIT
                if deadline is not None:
                    until = min(until, deadline)
            elif loop.time() >= until:
                break
            await self.wait(until)
        return until is not None

    def _record_service(self, worker_id: int | None) -> None:
        if self._served is not None:
            self._served[worker_id] = self._turn
            self._turn += 1

    def _left_out_of_order(self) -> None:
        """An outcome left the ready set other than from the front of the arrivals, which
        keep it, stale: once they are mostly stale, keep only the ready ones (in arrival
        order: the ready set's insertion order)."""
        if self._arrivals is not None and len(self._arrivals) > 2 * len(self._ready) + 64:
            self._arrivals = collections.deque(self._ready.values())

    async def wait(self, deadline: float | None) -> None:
        """Return after the next delivery or forgiveness, or at ``deadline`` (loop time);
        raise :class:`~aioenv.ClosedError` where the pool was closed (:meth:`check_open`).
        Callers re-check what they wait for: wake-ups can be spurious."""
        try:  # free unless it raises
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise not_on_asyncio("waiting for a state (get_state, get_batch, drain)") from None
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        # At the deadline every waiter wakes (each re-checks): no call per delivery to
        # wake one.
        timer = None if deadline is None else loop.call_at(deadline, self._wake)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if waiter in self._waiters:  # unless a wake-up already took it off the list
                self._waiters.remove(waiter)
        if self.closed:  # check_open(), inlined: every wait's path
            raise pool_closed()

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if waiter.done():
                    continue
                try:  # a try costs nothing here, a suppress() context would
                    waiter.set_result(None)
                except RuntimeError:
                    continue  # its event loop is closed: nobody waits on it any more

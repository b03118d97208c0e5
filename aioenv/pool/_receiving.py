"""A pool's receiving side: ``get_state``, ``get_batch``, ``async for`` and ``drain``, and
the episode statistics counted from the states handed out.

Everything here takes outcomes from the pool's :class:`~aioenv.workers._inbox.Inbox` (the one place
where states are delivered): waiting there, never polling, and raising an env's error in
place of its state, in the order the pool hands states out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
from collections.abc import AsyncIterator
from typing import Any

from ..core._errors import NoActionInFlight, WorkerPaused
from ..loops._here import not_on_asyncio, running_loop, still_here, thread_id
from ..workers._inbox import Inbox, Outcome
from ..workers._seam import Member
from ._batch import Batch, ReusedRows
from ._episodes import EpisodeCounter, EpisodeStats
from ._roster import Roster

__all__ = ["IN_LINE_WAIT", "Receiver"]

#: Seconds the pool waits, at most, for another worker's answer on its way before it hands
#: out an in-line state again (see ``Receiver._let_the_others_in``).
IN_LINE_WAIT = 0.001


class Receiver:
    """The receiving side of a :class:`~aioenv.WorkerPool` (whose methods of the same names
    say what each does): takes outcomes from the pool's ``inbox``, counts episodes in
    ``episodes``, raises once the pool is closed (the inbox knows), and copies
    borrowed states where ``copy`` (else reuses a batch's rows)."""

    def __init__(
        self,
        roster: Roster,
        inbox: Inbox,
        episodes: EpisodeCounter,
        *,
        copy: bool,
    ) -> None:
        self._roster = roster
        self._inbox = inbox
        self._episodes = episodes
        self._copy = copy
        self._reused_rows = ReusedRows(len(roster))  # with copy=False
        self._loop: asyncio.AbstractEventLoop | None = None  # where states were last awaited
        self._loop_thread: int | None = None  # the thread _loop was found running in
        #: Which workers answer in line (sync workers: their state is in the inbox as soon
        #: as their action is sent), where the pool also has workers whose states come in
        #: through the event loop; else None. A loop that keeps taking in-line states and
        #: sending them actions would never wait: the event loop would never run, the
        #: others' states (and every deadline) would never come in, and a thread worker
        #: would not even get the GIL to finish its step. Such a pool serves fairly (the
        #: inbox takes the worker served longest ago first) and lets the others in (see
        #: _let_the_others_in).
        in_line = [member.answers_in_line for member in roster.members]
        mixed = any(in_line) and not all(in_line) and not inbox.ordered
        self._in_line: list[bool] | None = in_line if mixed else None
        if mixed:
            inbox.serve_fairly()
        #: The last state handed out was answered in line: the next call lets the others
        #: in before it takes anything (so a cancelled call loses nothing).
        self._owes_loop_a_turn = False

    async def get_state(
        self, timeout: float | None = None, *, worker_id: int | None = None
    ) -> tuple[Any, int] | None:
        self._inbox.check_open()
        if worker_id is not None:
            if self._owes_loop_a_turn:  # that worker's state, whoever else has one
                await self._give_loop_a_turn()
            outcome = await self._wait_for(self._roster.live(worker_id), timeout)
        elif self._in_line is not None:
            outcome = await self._take_fairly(timeout)
        else:
            outcome = self._inbox.pop_next()
            if outcome is None:
                self._check_loop()
                outcome = await self._wait_next(self._deadline(timeout))
        if outcome is None:
            return None
        if self._in_line is not None:
            self._owes_loop_a_turn = self._in_line[outcome.worker_id]  # type: ignore[index]
        return self._handed_out(outcome)

    def _handed_out(self, outcome: Outcome) -> tuple[Any, int]:
        """The state (and worker id) ``get_state`` hands out for ``outcome``, counted; or
        its error, raised (its worker leaves the pool where that is its end)."""
        worker_id: int = outcome.worker_id  # type: ignore[assignment]
        if outcome.error is not None:
            self._roster.hand_out(worker_id, outcome.error)
            raise outcome.error
        state = outcome.state
        if outcome.borrowed and self._copy:
            state = state.owned()
        self._episodes.record(worker_id, state)
        return state, worker_id

    async def get_batch(
        self, min_size: int = 1, max_size: int | None = None, timeout: float | None = None
    ) -> Batch[Any]:
        self._inbox.check_open()
        if not isinstance(min_size, int) or min_size < 1:
            raise ValueError(f"min_size must be an int >= 1, got {min_size!r}")
        if max_size is not None and (not isinstance(max_size, int) or max_size < min_size):
            raise ValueError(f"max_size must be None or an int >= min_size, got {max_size!r}")
        inbox = self._inbox
        if not still_here(self._loop, self._loop_thread) and (
            self._loop is not None or running_loop() is not None
        ):
            self._check_loop()
        deadline = self._deadline(timeout)
        if self._in_line is not None:
            await self._let_the_others_in(deadline, whole_batch=True)
        while inbox.num_ready() < min_size:
            owed = inbox.num_owed
            if owed < min_size:
                if not owed:
                    self._roster.check_some_left("get_batch()")
                raise NoActionInFlight(
                    f"get_batch(min_size={min_size}) would wait forever: only {owed} worker(s) "
                    f"have an action in flight or a state not taken{self._roster.removed_note()}"
                )
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                break
            await inbox.wait(deadline)
            self._inbox.check_open()
        limit = inbox.num_ready() if max_size is None else min(max_size, inbox.num_ready())
        outcomes = inbox.take(limit)
        if outcomes and outcomes[0].error is not None:
            self._roster.hand_out(outcomes[0].worker_id, outcomes[0].error)
            raise outcomes[0].error
        record = self._episodes.record
        for outcome in outcomes:
            record(outcome.worker_id, outcome.state)  # type: ignore[arg-type]
        if self._in_line is not None:
            in_line = self._in_line
            self._owes_loop_a_turn = any(in_line[o.worker_id] for o in outcomes)  # type: ignore[index]
        space = self._roster.members[outcomes[0].worker_id].observation_space if outcomes else None  # type: ignore[index]
        rows = None if self._copy else self._reused_rows
        return Batch.of_outcomes(outcomes, space, rows)

    async def iterate(self) -> AsyncIterator[tuple[Any, int]]:
        inbox = self._inbox
        inbox.check_open()
        if not inbox.num_owed:
            self._roster.check_some_left("async for")
        while inbox.num_owed if inbox.paused else inbox.owed:  # num_owed, short cut
            if self._in_line is not None or inbox.closed:
                item = await self.get_state()  # raises once closed
                assert item is not None
                yield item
                continue
            # get_state()'s branch for a pool that takes states first ready first, inlined:
            # this is the per-state path of every `async for` loop.
            outcome = inbox.pop_next()
            if outcome is None:
                self._check_loop()
                outcome = await self._wait_next(None)
                assert outcome is not None  # with no deadline, it waits until one is in
            if outcome.error is None and not outcome.borrowed:  # _handed_out's common case
                self._episodes.record(outcome.worker_id, outcome.state)  # type: ignore[arg-type]
                yield outcome.state, outcome.worker_id  # type: ignore[misc]
            else:
                yield self._handed_out(outcome)

    async def drain(self) -> list[tuple[Any, int]]:
        self._inbox.check_open()
        inbox = self._inbox
        while inbox.num_ready() < inbox.num_owed:  # cancel-safe: nothing taken until then
            await inbox.wait(None)
            self._inbox.check_open()
        taken: list[tuple[Any, int]] = []
        while (outcome := inbox.pop_next()) is not None:
            worker_id: int = outcome.worker_id  # type: ignore[assignment]
            if outcome.error is not None:
                self._roster.hand_out(worker_id, outcome.error)
                taken.append((outcome.error, worker_id))
                continue
            state = outcome.state.owned() if outcome.borrowed and self._copy else outcome.state
            self._episodes.record(worker_id, state)
            taken.append((state, worker_id))
        return sorted(taken, key=operator.itemgetter(1))

    async def _take_fairly(self, timeout: float | None) -> Outcome | None:
        """``get_state()``'s next outcome in a pool that mixes in-line workers with others
        (see ``_in_line``)."""
        self._check_loop()
        deadline = self._deadline(timeout)
        await self._let_the_others_in(deadline, whole_batch=False)
        outcome = self._inbox.pop_next()
        if outcome is None:
            outcome = await self._wait_next(deadline)
        return outcome

    async def _let_the_others_in(self, deadline: float | None, *, whole_batch: bool) -> None:
        """Before taking states in a pool that mixes in-line workers with others (see
        ``_in_line``): while the next state (``whole_batch``: any state ready) is an
        in-line worker's, served after some other worker whose answer is still on its
        way, wait for answers, at most ``IN_LINE_WAIT`` in all and never past
        ``deadline``: that worker is served first (it was served longer ago). So among the
        workers whose answers are in or on their way, an in-line worker is not served
        twice before each of the others once, unless they take longer than that; the
        others are never held back. The wait releases the GIL and the CPU, which a thread
        worker needs to finish its step and a process worker may need to run. With no
        wait, the event loop still gets a turn after an in-line state, so its ready I/O
        and timers run."""
        inbox, in_line = self._inbox, self._in_line
        assert in_line is not None
        loop = asyncio.get_running_loop()
        until: float | None = None
        while inbox.num_owed > inbox.num_ready():  # answers on their way
            oldest = inbox.oldest_on_its_way()
            if oldest is None:
                break  # only paused workers' answers
            if whole_batch:
                held = [i for i in inbox.ready_ids() if in_line[i]]  # type: ignore[index]
            else:
                upcoming = inbox.peek_next()
                held = [upcoming.worker_id] if upcoming is not None else []
                held = [i for i in held if in_line[i]]  # type: ignore[index]
            if not any(inbox.last_served(i) > oldest for i in held):
                break
            if until is None:
                until = loop.time() + IN_LINE_WAIT
                if deadline is not None:
                    until = min(until, deadline)
            elif loop.time() >= until:
                break
            self._owes_loop_a_turn = False  # the wait is the loop's turn
            await inbox.wait(until)
            self._inbox.check_open()
        if self._owes_loop_a_turn:
            await self._give_loop_a_turn()

    async def _give_loop_a_turn(self) -> None:
        """Let the event loop run once (its ready I/O and timers) before taking a state:
        after an in-line state, whose taker never waited (see ``_in_line``)."""
        self._owes_loop_a_turn = False
        await asyncio.sleep(0)
        self._inbox.check_open()

    def episode_stats(self) -> list[EpisodeStats]:
        if self._episodes.saw_custom_state:
            raise TypeError(
                "episode_stats() needs gymnasium envs (aioenv.Step states); this pool handed "
                "out custom states, whose episode ends only the env's terminated() knows: "
                "count episodes in your own loop"
            )
        return [dataclasses.replace(stats) for stats in self._episodes.stats]

    def _check_loop(self) -> None:
        """Before waiting on a new event loop: a worker whose reply was due on an old one
        raises at once (its reply is lost with that loop) rather than hang."""
        if still_here(self._loop, self._loop_thread):
            return
        loop = running_loop()
        if loop is None:
            raise not_on_asyncio("a pool's get_state()/get_batch()")
        if loop is not self._loop:
            for worker in self._roster.members:
                if worker.worker_id in self._inbox.owed:
                    worker.enter_loop()
            self._loop = loop
        self._loop_thread = thread_id()

    async def _wait_next(self, deadline: float | None) -> Outcome | None:
        """Wait for the next outcome (after ``_check_loop``), until ``deadline``."""
        inbox = self._inbox
        while True:
            if not inbox.num_owed:
                self._roster.check_some_left("get_state()")
                raise NoActionInFlight(
                    "get_state() would wait forever: no unpaused worker has an action in "
                    "flight; call pool.send_action(action, worker_id) or pool.reset() first"
                    f"{self._roster.removed_note()}"
                )
            await inbox.wait(deadline)
            self._inbox.check_open()
            outcome = inbox.pop_next()
            if outcome is not None:
                return outcome
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                return None

    async def _wait_for(self, worker: Member, timeout: float | None) -> Outcome | None:
        inbox = self._inbox
        self._check_loop()
        deadline = self._deadline(timeout)
        if worker.worker_id in inbox.paused:
            raise WorkerPaused(f"{worker.name} is paused; pool.resume({worker.worker_id}) first")
        while True:
            outcome = inbox.pop(worker.worker_id)
            if outcome is not None:
                return outcome
            if worker.worker_id not in inbox.owed:
                raise NoActionInFlight(
                    f"get_state(worker_id={worker.worker_id}) would wait forever: {worker.name} "
                    "has no action in flight; send it an action first"
                )
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                return None
            await inbox.wait(deadline)
            self._inbox.check_open()

    @staticmethod
    def _deadline(timeout: float | None) -> float | None:
        if timeout is None:
            return None
        if not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")
        return asyncio.get_running_loop().time() + timeout

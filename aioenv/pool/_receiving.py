"""A pool's receiving side: ``get_state``, ``get_batch`` and ``async for`` (the pool's own
``drain`` takes the states left with its pieces), and the episodes counted from the states
handed out.

Everything here takes outcomes from the pool's :class:`~aioenv.workers._inbox.Inbox` (the one place
where states are delivered): waiting there, never polling, and raising an env's error in
place of its state, in the order the pool hands states out.

Episodes are counted in the parent, here beside the states they are counted from (one
module on every state's path): one ledger per counting (episode ids, the open episode's
return and length, each finished episode added to its worker's statistics; rollouts and
collection keep ledgers too), and the pool's running statistics per worker, counted from
the states it hands out (rewards and step counts) in the pool's own ledger (an
:class:`EpisodeCounter`). Nothing is added to the env's info.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any, Generic, TypeVar

import anyio.lowlevel

from ..core._environment import Step
from ..core._errors import NoActionInFlight, WorkerPaused
from ..core._messages import resets_next
from ..core._restarts import is_restart_reset
from ..core._seeds import checked_count
from ..loops._here import not_on_asyncio, running_loop, thread_id
from ..workers._inbox import Inbox, Outcome
from ..workers._seam import Member
from ._batch import Batch, ReusedRows
from ._roster import Roster

__all__ = ["EpisodeCounter", "EpisodeLedger", "EpisodeStats", "PoolReceiving"]

S = TypeVar("S")


@dataclasses.dataclass
class EpisodeStats:
    """Finished episodes of one worker: how many, their total return and length (in
    steps), and the return and length of the last one (NaN and 0 before the first)."""

    episodes: int = 0
    total_return: float = 0.0
    total_length: int = 0
    last_return: float = math.nan
    last_length: int = 0

    @property
    def mean_return(self) -> float:
        return self.total_return / self.episodes if self.episodes else math.nan

    @property
    def mean_length(self) -> float:
        return self.total_length / self.episodes if self.episodes else math.nan


class EpisodeLedger:
    """The episodes of ``lanes`` envs (a lane is one env, counted across the workers in
    worker order; one per worker where each steps one env): per lane, the episodes started
    and the open episode's return and length so far. ``stats`` (one per lane, the lanes of
    a worker sharing their worker's) receive each finished episode; without them the
    ledger only counts."""

    def __init__(self, lanes: int, stats: Sequence[EpisodeStats] | None = None) -> None:
        self.lanes = lanes
        self._stats = stats
        self._started = [0] * lanes
        #: Per lane, the open episode's return and length so far.
        self.returns = [0.0] * lanes
        self.lengths = [0] * lanes

    def start(self, lane: int) -> int:
        """Open the lane's next episode and return its id: the ``k``-th episode (from 0)
        of lane ``l`` has id ``k * lanes + l``, unique in this ledger whatever order the
        lanes play in (and ``id % lanes`` is its lane)."""
        ordinal = self._started[lane]
        self._started[lane] = ordinal + 1
        self.returns[lane], self.lengths[lane] = 0.0, 0
        return ordinal * self.lanes + lane

    def latest(self, lane: int) -> int | None:
        """The id of the lane's latest episode, open or not (None before its first)."""
        started = self._started[lane]
        return (started - 1) * self.lanes + lane if started else None

    def add(self, lane: int, reward: float, done: bool = False) -> float | None:
        """Add one step's reward to the lane's open episode; where the step ends it
        (``done``), :meth:`finish` it and return its return."""
        self.returns[lane] += reward  # the reward's own arithmetic: no float() rounding
        self.lengths[lane] += 1
        return self.finish(lane) if done else None

    def finish(self, lane: int) -> float:
        """Close the lane's open episode, count it in the lane's worker's statistics, and
        return its return. Steps added after it without a :meth:`start` go to the lane's
        next episode (under ``"same_step"`` autoreset no reset state starts it)."""
        episode_return, length = self.returns[lane], self.lengths[lane]
        if self._stats is not None:  # counted in the lane's worker's statistics
            stats = self._stats[lane]
            stats.episodes += 1
            stats.total_return += episode_return
            stats.total_length += length
            stats.last_return, stats.last_length = episode_return, length
        self.returns[lane], self.lengths[lane] = 0.0, 0
        return episode_return


class EpisodeCounter(EpisodeLedger):
    """The pool's ledger: adds up each worker's rewards and steps from the states it hands
    out, and closes an episode at the state that ends it. A state that answers a reset (a
    ``RESET`` sent, the state after a finished episode under ``"next_step"``, a restart)
    starts a new one. Workers that step several envs together hand out states that are not
    a :class:`~aioenv.Step`, so a worker is one lane of this ledger."""

    def __init__(self, num_workers: int, autoreset: str) -> None:
        self.stats = [EpisodeStats() for _ in range(num_workers)]
        super().__init__(num_workers, self.stats)
        #: Per worker, the next state answers a reset (a rollout that plays its one env
        #: hands its episode on to the steps sent by hand, which clears it).
        self.resetting = [True] * num_workers
        self._next_step = resets_next(autoreset, True)  # after each episode's end
        #: The last worker that handed out a state that is not an aioenv.Step (a custom
        #: env's, or the BatchStep of a worker of several envs): its episodes go uncounted.
        self.uncounted: int | None = None

    def expect_reset(self, worker_id: int) -> None:
        """A reset was sent to ``worker_id``: its next state starts an episode."""
        self.resetting[worker_id] = True

    def record(self, worker_id: int, state: Any) -> None:
        if type(state) is not Step:
            self.uncounted = worker_id
            return
        # A reset, or a restarted env's reset handed out in place of a step (its marker
        # is in the info: most steps have none). An episode a failure cut short ends as
        # a truncated step, counted below like any other.
        if self.resetting[worker_id] or (state.info and is_restart_reset(state)):
            self.resetting[worker_id] = False
            self.start(worker_id)
            return
        # add(), inlined: this is every state's path.
        self.returns[worker_id] += state.reward
        self.lengths[worker_id] += 1
        if state.terminated or state.truncated:
            self.finish(worker_id)
            self.resetting[worker_id] = self._next_step


class PoolReceiving(Generic[S]):
    """The receiving side of a :class:`~aioenv.WorkerPool`, which inherits it: takes
    outcomes from the pool's inbox (its roster's), counts episodes in the pool's
    ``_episodes``, raises once the pool is closed (the inbox knows), and copies borrowed
    states where the pool's ``copy`` (else reuses a batch's rows).
    :meth:`_start_receiving` sets up what it keeps."""

    _roster: Roster
    _inbox: Inbox
    _episodes: EpisodeCounter
    copy: bool

    def _start_receiving(self) -> None:
        """No loop seen yet; a ``copy=False`` pool's reused rows; the in-line workers."""
        self._reused_rows = None if self.copy else ReusedRows(len(self._roster))
        self._loop: asyncio.AbstractEventLoop | None = None  # where states were last awaited
        self._loop_thread: int | None = None  # the thread _loop was found running in
        #: Which workers answer in line (sync workers: their state is in the inbox as soon
        #: as their action is sent), where the pool also has workers whose states come in
        #: through the event loop and hands states out first ready; else None. A loop that
        #: keeps taking in-line states and sending them actions would never wait: the event
        #: loop would never run, the others' states (and every deadline) would never come
        #: in, and a thread worker would not even get the GIL to finish its step. Such a
        #: pool serves fairly (the inbox takes the worker served longest ago first) and lets
        #: the others in (see _let_the_others_in).
        self._in_line = None if self._inbox.ordered else self._roster.in_line
        if self._in_line is not None:
            self._inbox.serve_fairly()
        #: The last state handed out was answered in line: the next call lets the others
        #: in before it takes anything (so a cancelled call loses nothing).
        self._owes_loop_a_turn = False

    async def get_state(
        self, timeout: float | None = None, *, worker_id: int | None = None
    ) -> tuple[S, int] | None:
        """The state of whichever worker finished first (the async pool), or of the oldest
        action sent (the sync pool), as ``(state, worker_id)``; None if ``timeout``
        seconds pass first. ``worker_id=i`` waits for worker ``i``'s state only; the
        others' states stay in the pool for later calls.

        Fair first-ready: no worker is served twice while another's state waits in the
        pool. A sync worker's state is in the pool as soon as its action is sent; in a pool
        that mixes it with other kinds, the states ready go to the worker served longest
        ago first, and a sync worker's state waits (at most 1 ms) for the answers on their
        way from workers served before it, so it never crowds them out.

        :raises WorkerRemoved: worker ``worker_id`` was given up on; or, with no
            ``worker_id``, every worker was.
        """
        self._inbox.check_open()
        if worker_id is not None:
            if self._owes_loop_a_turn:  # that worker's state, whoever else has one
                await self._give_loop_a_turn()
            worker = self._roster.members[self._roster.live_index(worker_id)]
            outcome = await self._wait_for(worker, timeout)
        elif self._in_line is not None:  # in-line workers mixed with others: see _in_line
            deadline = self._check_loop(timeout)
            await self._let_the_others_in(deadline, whole_batch=False)
            outcome = self._inbox.pop_next()
            if outcome is None:
                outcome = await self._wait_next(deadline)
        else:
            if self._roster.all_in_line and self._roster.owes_a_turn():  # asyncio's or trio's
                await anyio.lowlevel.checkpoint()
            outcome = self._inbox.pop_next()
            if outcome is None:
                outcome = await self._wait_next(self._check_loop(timeout))
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
        if outcome.borrowed and self.copy:
            state = state.owned()
        self._episodes.record(worker_id, state)
        return state, worker_id

    async def get_batch(
        self, min_size: int = 1, max_size: int | None = None, timeout: float | None = None
    ) -> Batch[S]:
        """Wait until ``min_size`` states are ready (or ``timeout`` passes) and return up
        to ``max_size`` of them. After a timeout the batch holds whatever was ready, which
        may be nothing. An env error is raised when it is next in line; states ready
        before it are returned first, so nothing is lost. Fair first-ready, as
        :meth:`get_state`: a sync worker's state waits its turn behind the others'."""
        self._inbox.check_open()
        min_size = checked_count(min_size, "min_size")
        if max_size is not None:
            max_size = checked_count(max_size, "max_size", min_size, or_none=True)
        inbox = self._inbox
        # With no loop, seen or running, the states ready are taken without one; else the
        # loop is checked (at once where it still runs in this thread: _check_loop's test).
        if self._loop is not None or running_loop() is not None:
            self._check_loop()
        deadline = self._deadline(timeout)
        if self._in_line is not None:
            await self._let_the_others_in(deadline, whole_batch=True)
        elif self._roster.all_in_line:  # a batch: states enough to give the loop a turn each
            await anyio.lowlevel.checkpoint()
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
            await inbox.wait(deadline)  # raises once the pool is closed
        # Every state ready, or max_size of them: take stops where none is next in line.
        outcomes = inbox.take(len(inbox.owed) if max_size is None else max_size)
        if outcomes and outcomes[0].error is not None:
            self._handed_out(outcomes[0])  # raises its error
        record = self._episodes.record
        for outcome in outcomes:
            record(outcome.worker_id, outcome.state)  # type: ignore[arg-type]
        if self._in_line is not None:
            in_line = self._in_line
            self._owes_loop_a_turn = any(in_line[o.worker_id] for o in outcomes)  # type: ignore[index]
        space = self._roster.members[outcomes[0].worker_id].observation_space if outcomes else None  # type: ignore[index]
        return Batch.of_outcomes(outcomes, space, self._reused_rows)

    async def __aiter__(self) -> AsyncIterator[tuple[S, int]]:
        """``async for state, worker_id in pool``: states as they arrive, until no worker
        has an action in flight (fair first-ready, as :meth:`get_state`)."""
        inbox = self._inbox
        inbox.check_open()
        if not inbox.num_owed:
            self._roster.check_some_left("async for")
        try:
            while inbox.num_owed if inbox.paused else inbox.owed:  # num_owed, short cut
                if self._in_line is not None or self._roster.all_in_line or inbox.closed:
                    item = await self.get_state()  # raises once closed
                    assert item is not None
                    yield item
                    continue
                # get_state()'s branch for a pool that takes states first ready first,
                # inlined: this is the per-state path of every `async for` loop.
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
        except NoActionInFlight:  # raised only where none is owed: as this loop waited, another
            return  # task took the last state in flight (or paused its worker): the loop ends

    async def _let_the_others_in(self, deadline: float | None, *, whole_batch: bool) -> None:
        """Before taking states in a pool that mixes in-line workers with others (see
        ``_in_line``): wait for the others as :meth:`Inbox.let_the_others_in` says. With
        no wait, the event loop still gets a turn after an in-line state, so its ready
        I/O and timers run."""
        assert self._in_line is not None
        if await self._inbox.let_the_others_in(self._in_line, deadline, whole_batch=whole_batch):
            self._owes_loop_a_turn = False  # the wait was the loop's turn
        if self._owes_loop_a_turn:
            await self._give_loop_a_turn()

    async def _give_loop_a_turn(self) -> None:
        """Let the event loop run once (its ready I/O and timers) before taking a state:
        after an in-line state, whose taker never waited (see ``_in_line``)."""
        self._owes_loop_a_turn = False
        await asyncio.sleep(0)
        self._inbox.check_open()

    def _check_loop(self, timeout: float | None = None) -> float | None:
        """Before waiting on a new event loop: a worker whose reply was due on an old one
        raises at once (its reply is lost with that loop) rather than hang. Returns the
        deadline of ``timeout`` seconds on the loop (None for None: no call to
        :meth:`_deadline`, which checks it)."""
        loop = self._loop  # still_here(loop, self._loop_thread), inlined: every wait's path
        if not (self._loop_thread == thread_id() and loop is not None and loop.is_running()):
            loop = running_loop()
            if loop is None:
                raise not_on_asyncio("a pool's get_state()/get_batch()")
            if loop is not self._loop:
                for worker in self._roster.members:
                    if worker.worker_id in self._inbox.owed:
                        worker.enter_loop()
                self._loop = loop
            self._loop_thread = thread_id()
        return None if timeout is None else self._deadline(timeout)

    async def _wait_next(self, deadline: float | None) -> Outcome | None:
        """Wait for the next outcome (after ``_check_loop``), until ``deadline``."""
        inbox = self._inbox
        while True:
            if not (inbox.num_owed if inbox.paused else inbox.owed):  # num_owed, short cut
                self._roster.check_some_left("get_state()")
                raise NoActionInFlight(
                    "get_state() would wait forever: no unpaused worker has an action in "
                    "flight; call pool.send_action(action, worker_id) or pool.reset() first"
                    f"{self._roster.removed_note()}"
                )
            await inbox.wait(deadline)  # raises once the pool is closed
            outcome = inbox.pop_next()
            if outcome is not None:
                return outcome
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                return None

    async def _wait_for(self, worker: Member, timeout: float | None) -> Outcome | None:
        inbox = self._inbox
        deadline = self._check_loop(timeout)
        while worker.worker_id not in inbox.paused:  # also paused while this call waits
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
            await inbox.wait(deadline)  # raises once the pool is closed
        raise WorkerPaused(f"{worker.name} is paused; pool.resume({worker.worker_id}) first")

    @staticmethod
    def _deadline(timeout: float | None) -> float | None:
        if timeout is None:
            return None
        if not isinstance(timeout, (int, float)) or not timeout >= 0:  # NaN too
            raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")
        if (loop := running_loop()) is None:  # get_batch takes ready states without a loop
            raise not_on_asyncio("a pool's get_state()/get_batch()")
        return loop.time() + timeout

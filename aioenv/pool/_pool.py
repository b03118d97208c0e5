"""Pools: many workers behind one ``get_state``.

The pool does not know which kind its workers are: it talks to them only through the
pool↔worker seam (:class:`~aioenv.workers._seam.Member`). It shares one :class:`Inbox` with
them; the only difference between the async pool and the forced-sync twin is the order in
which that inbox hands outcomes out (first finished vs first sent). Its helpers
(:class:`Roster`, and :class:`SpaceCheck` below: the pool's check that its workers share
their spaces) do the work; its methods hand over to them. It inherits the rest: ``reset``
and ``set_seeds`` from :class:`PoolSending` (whose checks ``send_action`` asks only where
an action is not the common case: a call per action saved), the states (``get_state``,
``get_batch``, ``async for``) from :class:`PoolReceiving`, the envs' calls (``call``,
``apply``, ``get_attr``, ``set_attr``, ``render``) from :class:`RemoteControl`, and the
rollouts (``set_policy``, ``rollout``) from :class:`PoolRollouts`.

Primitives: waiting for states uses the inbox (asyncio futures, the loop's clock);
structured concurrency (the shielded close, its task group, its "closed" event) uses anyio.
"""

from __future__ import annotations

import abc
import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import anyio
from gymnasium.vector.utils import batch_space

from ..core._commands import RESET, Reset
from ..core._docs import documented_with
from ..core._errors import SpaceMismatch, WorkerError
from ..core._messages import Autoreset
from ..core._supervision import report_failure
from ..loops._inline import for_this_loop
from ..workers._base import Worker
from ..workers._inbox import Inbox
from ..workers._seam import Member
from ._batch import Batch
from ._options import POOL_DEFAULTS, POOL_OPTIONS, PoolOptions
from ._receiving import EpisodeCounter, EpisodeStats, PoolReceiving
from ._remote_control import PoolSending, RemoteControl
from ._rollout import PoolRollouts
from ._roster import Roster, checked_workers

__all__ = ["AsyncWorkerPool", "SyncWorkerPool", "WorkerPool", "in_send_order"]

S = TypeVar("S")
P = TypeVar("P", bound="WorkerPool[Any]")


@documented_with(PoolOptions)
class WorkerPool(PoolSending, PoolReceiving[S], RemoteControl, PoolRollouts, abc.ABC):
    """The methods both pools share. Use :class:`AsyncWorkerPool` or :class:`SyncWorkerPool`.

    A pool is an async context manager that owns its workers: leaving the ``async with``
    block closes every worker (timed: close, wait ``cleanup_time``, terminate, kill), even
    when the body raised or was cancelled. Worker ids are the positions in ``workers``.

    The options below are the pool options: ``make_pool``, ``get_worker_pool`` and
    :class:`~aioenv.AioVectorEnv` take them too.

    A worker that fails for good (its env died or hung, or could not be restarted, with
    restarts off or their budget spent) is given up on: its last error is raised once, in
    place of its state, and from then on the worker is out of ``active_ids`` and in
    :attr:`removed`. Calls naming it raise :class:`~aioenv.WorkerRemoved`; pool-wide calls
    (``reset``, ``get_batch``, ``async for``, ``drain``, ``rollout``, ``call``) go on with
    the rest, and say so (:class:`~aioenv.WorkerRemoved`) once no worker is left. Ids never
    shift.
    """

    # An ABC so that the trio bridge can register its stand-in as a virtual subclass.
    _ordered: ClassVar[bool]
    #: The collector :func:`aioenv.collect` drives this pool with, made on its first use:
    #: kept on the pool, so that it goes with the pool (kept beside it, in a weak mapping
    #: by pool, it would hold the pool for ever).
    _collector: Any = None

    def __init__(
        self,
        workers: Sequence[Worker[S]],
        *,
        cleanup_time: float = POOL_DEFAULTS.cleanup_time,
        step_timeout: float | None = POOL_DEFAULTS.step_timeout,
        start_timeout: float | None = POOL_DEFAULTS.start_timeout,
        reset_timeout: float | None = POOL_DEFAULTS.reset_timeout,
        restart: Literal["never", "on_failure"] = POOL_DEFAULTS.restart,
        max_restarts: int = POOL_DEFAULTS.max_restarts,
        restart_window: float | None = POOL_DEFAULTS.restart_window,
        restart_backoff: float = POOL_DEFAULTS.restart_backoff,
        on_failure: Callable[[WorkerError], None] | None = POOL_DEFAULTS.on_failure,
        episode_timeout: float | None = POOL_DEFAULTS.episode_timeout,
        autoreset: Autoreset = POOL_DEFAULTS.autoreset,
        max_episode_steps: int | None = POOL_DEFAULTS.max_episode_steps,
        check_actions: bool = POOL_DEFAULTS.check_actions,
        copy: bool = POOL_DEFAULTS.copy,
    ) -> None:
        if not hasattr(self, "_ordered"):
            raise TypeError(
                "WorkerPool is the base class of the pools; use AsyncWorkerPool (states in the "
                "order they finish), SyncWorkerPool (in the order sent) or make_pool()"
            )
        # Every keyword above is a pool option, under the name PoolOptions takes it by.
        given = locals()
        workers = checked_workers(workers)
        # Take the options, join the workers to this pool's inbox and make the helpers
        # that work on them.
        #: The options this pool was made with.
        self.options = options = PoolOptions(**{name: given[name] for name in POOL_OPTIONS})
        episode = options.episode()
        self.cleanup_time = float(options.cleanup_time)
        self.autoreset = episode.autoreset  # aioenv's name, whichever form was given
        self.max_episode_steps = options.max_episode_steps
        self.check_actions = options.check_actions
        self.copy = options.copy
        #: Failures seen (env exceptions, deaths, timeouts), restarted or raised.
        self.failures = 0
        self._close_done: anyio.Event | None = None
        self._inbox = inbox = Inbox(ordered=self._ordered)
        self._episodes = EpisodeCounter(len(workers), episode.autoreset)
        self._space_check = SpaceCheck()
        self._workers = workers
        self._roster = roster = Roster(workers, inbox)
        supervision = options.supervision(self._on_worker_failure)
        for worker_id, member in enumerate(roster.members):
            member.join_pool(inbox, worker_id, supervision, episode, self._space_check.check)
        self._start_receiving()
        self._start_rollouts()

    @property
    def restarts(self) -> int:
        """Restarts done so far, over all workers."""
        return sum(worker.restarts for worker in self._roster.members)

    def _on_worker_failure(self, error: WorkerError) -> None:
        self.failures += 1
        report_failure(self.options.on_failure, error)

    @property
    def workers(self) -> tuple[Worker[S], ...]:
        return tuple(self._workers)

    def __len__(self) -> int:
        return len(self._roster)

    def __repr__(self) -> str:
        kinds = ", ".join(sorted({worker.kind for worker in self._roster.members}))
        state = "closed" if self._inbox.closed else "open"
        return f"<{type(self).__name__} of {len(self)} workers ({kinds}), {state}>"

    # Sending ---------------------------------------------------------------------------
    def send_action(self, action: Any, worker_id: int) -> None:
        """Send ``action`` (or ``RESET``, ``Reset(...)``, ``CLOSE``) to one worker. Returns
        at once.

        :raises WorkerRemoved: the worker was given up on (see :attr:`removed`).
        """
        accepting = self._roster.accepting
        common = type(worker_id) is int and 0 <= worker_id < len(accepting) and accepting[worker_id]
        if common and not self.check_actions:  # the common case, checked first
            worker = self._roster.members[worker_id]
        else:
            worker = self._addressee(action, worker_id)
        try:
            worker.send_action(action)
        except WorkerError as error:
            self._on_send_error(worker, error)
            raise
        if action is RESET or isinstance(action, Reset):
            self._episodes.expect_reset(worker_id)

    def send_order(self, worker_ids: Sequence[int]) -> list[int]:
        """``worker_ids`` in the order to send each of them an action when they step
        together (a lockstep step): sync workers last. A sync worker steps its env inside
        ``send_action``, so a worker sent an action after it waits for that step before
        starting its own; sent last, sync workers step while the others do. Pools that
        have no sync workers, or only sync workers, keep the order given. ``reset()``,
        ``rollout()``, ``collect()`` and ``collect_groups()`` send in this order."""
        roster = self._roster
        return roster.send_order([roster.index(worker_id) for worker_id in worker_ids])

    async def reset_all(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Batch[S]:
        """Reset every open, unpaused worker and return their reset states, in worker-id
        order. Without ``seed`` each env's RNG continues (see :meth:`reset`)."""
        self.reset(seed=seed, options=options)
        batch = await self.get_batch(min_size=len(self._roster.active()))
        return batch.sorted()

    # Receiving (the states as they come are PoolReceiving's): the states left, the
    # episodes they end, the spaces they come in -----------------------------------------
    async def drain(self) -> list[tuple[S | WorkerError, int]]:
        """Wait for every action in flight and take every state not yet taken, so the pool
        is idle (``reset()`` works again). Returns ``(state, worker_id)`` in worker-id
        order; where a worker's action failed, the error it raised takes the state's place
        (it is returned, not raised, so no other state is lost; a worker's error for good
        returned here hands it out: the worker leaves the pool). Paused workers are left
        alone: they keep their pending state until resumed. Cancel-safe: states are taken
        only once all of them are ready, so a cancelled ``drain()`` takes nothing."""
        inbox = self._inbox
        inbox.check_open()
        while inbox.num_ready() < inbox.num_owed:  # cancel-safe: nothing taken until then
            await inbox.wait(None)  # (raises ClosedError once the pool is closed)
        taken: list[tuple[Any, int]] = []
        while (outcome := inbox.pop_next()) is not None:
            if outcome.error is None:
                taken.append(self._handed_out(outcome))
            else:  # returned, not raised: its worker leaves the pool where that is its end
                self._roster.hand_out(outcome.worker_id, outcome.error)
                taken.append((outcome.error, outcome.worker_id))  # type: ignore[arg-type]
        return sorted(taken, key=operator.itemgetter(1))

    def episode_stats(self) -> list[EpisodeStats]:
        """Per worker (by id): finished episodes, their mean return and mean length, counted
        from the rewards and steps of the states the pool has handed out (nothing is added
        to the envs' infos). Needs gymnasium envs (:class:`~aioenv.Step` states): the pool
        cannot see where a custom :class:`~aioenv.Environment`'s episodes end, and looks
        into no worker of several envs' batches env by env (only :meth:`rollout` counts
        their episodes)."""
        if (uncounted := self._episodes.uncounted) is not None:
            worker = self._roster.members[uncounted]
            raise TypeError(
                f"episode_stats() counts workers of one env: {worker.name} steps "
                f"{worker.num_envs} envs together (envs_per_worker={worker.num_envs}), whose "
                "episodes the pool counts only where rollout() plays them; count them in "
                "your own loop"
                if worker.num_envs > 1
                else "episode_stats() needs gymnasium envs (aioenv.Step states); this pool "
                "handed out custom states, whose episode ends only the env's terminated() "
                "knows: count episodes in your own loop"
            )
        return [dataclasses.replace(stats) for stats in self._episodes.stats]

    def allow_differing_observations(self) -> None:
        """Let workers' observation spaces differ (in bounds, say): for a caller that checks
        them itself, as ``AioVectorEnv(observation_mode="different")`` does."""
        self._space_check.observations_may_differ = True

    # Pausing ---------------------------------------------------------------------------
    def pause(self, worker_id: int) -> None:
        """Skip this worker in ``get_state``, ``get_batch`` and ``reset()`` until resumed.
        It keeps its env and any state in flight or not yet taken; ids never shift.

        :raises WorkerRemoved: the worker was given up on.
        """
        self._inbox.check_open()
        index = self._roster.live_index(worker_id)
        self._inbox.pause(index)  # its states are held back until it is resumed
        self._roster.accepting[index] = False

    def resume(self, worker_id: int | None = None) -> None:
        """Resume one worker, or every paused worker."""
        self._inbox.check_open()
        roster = self._roster
        targets = range(len(roster)) if worker_id is None else [roster.live_index(worker_id)]
        for index in targets:
            self._inbox.resume(index)
            roster.accepting[index] = index not in roster.removed

    @property
    def active_ids(self) -> list[int]:
        """Ids of the workers that are open, not paused and not given up on."""
        return [worker.worker_id for worker in self._roster.active()]  # type: ignore[misc]

    @property
    def removed(self) -> dict[int, WorkerError]:
        """The workers given up on, by id: each one's last error (the one raised once
        when it failed for good). A copy; ids are in the order the errors were handed
        out."""
        return dict(self._roster.removed)

    def has_pending(self, worker_id: int) -> bool:
        """The worker has an action in flight or a state not yet taken."""
        return self._roster.index(worker_id) in self._inbox.owed

    @property
    def num_pending(self) -> int:
        """Unpaused workers with an action in flight or a state not yet taken."""
        return self._inbox.num_owed

    @property
    def paused(self) -> tuple[int, ...]:
        """The ids of the paused workers, in increasing order."""
        return tuple(i for i in range(len(self._roster)) if i in self._inbox.paused)

    @property
    def num_active(self) -> int:
        """Workers that are open, not paused and not given up on."""
        return len(self._roster.active())

    # Lifecycle -------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close every worker concurrently, each bounded by ``cleanup_time`` (then
        terminate, then kill). Idempotent; runs to the end even if cancelled."""
        if (stand_in := for_this_loop(self)) is not self:  # closed from another library's run
            await stand_in.aclose()
            return
        if self._close_done is not None:
            with anyio.CancelScope(shield=True):
                await self._close_done.wait()
            return
        self._close_done = anyio.Event()
        self._inbox.close()  # every call raises ClosedError from now on
        self._roster.accepting = [False] * len(self._roster)  # no worker takes another action
        with anyio.CancelScope(shield=True):
            try:
                async with anyio.create_task_group() as group:
                    for worker in self._roster.members:
                        group.start_soon(worker.aclose, self.cleanup_time)
            finally:
                self._close_done.set()

    async def __aenter__(self: P) -> P:
        self._check_open()
        return for_this_loop(self)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        self._inbox.check_open()


@documented_with(PoolOptions)
class AsyncWorkerPool(WorkerPool[S]):
    """Hands out states in the order they finish: a fast env never waits for a slow one."""

    _ordered = False


@documented_with(PoolOptions)
class SyncWorkerPool(WorkerPool[S]):
    """The forced-sync twin: the same methods and rules, but states come back in the order
    their actions were sent, so a program gives the same result on every run. With
    :class:`~aioenv.SyncWorker` workers (``make_pool(..., force_sync=True)``) nothing runs
    concurrently at all."""

    _ordered = True


class SpaceCheck:
    """Checks each worker's spaces, when its env first answers, against the first
    reported by a worker of its size (envs it steps)."""

    def __init__(self) -> None:
        #: The spaces of the first worker of each size that reported them.
        self._spaces: dict[int, tuple[Any, Any]] = {}
        #: The spaces each worker last passed with: a restarted env that reports the same
        #: objects (a process worker keeps them when its new child's are the same bytes)
        #: passes without comparing them again (Box compares its bounds with allclose).
        self._passed: dict[int | None, tuple[Any, Any]] = {}
        #: Compare action spaces only (set by a pool whose caller checks observations
        #: itself: ``WorkerPool.allow_differing_observations``).
        self.observations_may_differ = False

    def check(self, worker: Member) -> WorkerError | None:
        """The error to raise in place of the worker's first reply, or None."""
        spaces = (worker.observation_space, worker.action_space)
        if spaces == (None, None):
            return None
        passed = self._passed.get(worker.worker_id)
        if passed is not None and passed[0] is spaces[0] and passed[1] is spaces[1]:
            return None
        # The spaces a worker stepping `size` envs must report: those of the first worker
        # of that size, else a one-env worker's batched to `size` (a worker of several envs
        # reports its envs' spaces batched); none for the first of its size where no
        # one-env worker has reported yet.
        size = worker.num_envs
        reference: tuple[Any, ...] | None = self._spaces.get(size)
        if reference is None and 1 in self._spaces:
            reference = tuple(
                None if space is None else batch_space(space, size) for space in self._spaces[1]
            )
        if reference is None:
            self._spaces[size] = self._passed[worker.worker_id] = spaces
            return None
        for what, mine, theirs in zip(("observation", "action"), spaces, reference, strict=True):
            if what == "observation" and self.observations_may_differ:
                continue
            if mine != theirs:
                return SpaceMismatch(
                    f"{worker.name}: its {what} space {mine} differs from the pool's {theirs}; "
                    "every worker of a pool must share its spaces",
                    worker_id=worker.worker_id,
                )
        self._passed[worker.worker_id] = spaces
        return None


T = TypeVar("T")


def in_send_order(
    pool: WorkerPool[Any], worker_ids: Sequence[int], items: Sequence[T]
) -> list[tuple[int, T]]:
    """Each worker of ``worker_ids`` with its item (``items[k]`` is ``worker_ids[k]``'s), in
    the pool's send order (:meth:`WorkerPool.send_order`: sync workers last)."""
    by_worker = dict(zip(worker_ids, items, strict=True))
    return [(worker_id, by_worker[worker_id]) for worker_id in pool.send_order(worker_ids)]

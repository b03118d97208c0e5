"""Pools: many workers behind one ``get_state``.

The pool does not know which kind its workers are: it talks to them only through the
worker's pool interface (``join_pool``, ``failure``, ``seed_next_reset``, ``control``,
``send_action``, ``aclose``). It shares one :class:`Inbox` with them; the only difference
between the async pool and the forced-sync twin is the order in which that inbox hands
outcomes out (first finished vs first sent).

Primitives: waiting for states uses the inbox (asyncio futures, the loop's clock);
structured concurrency (the shielded close, its task group, its "closed" event) uses anyio.
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import anyio
from gymnasium.vector.utils import batch_space

from ._actions import explain_invalid_action
from ._batch import Batch, ReusedRows
from ._episodes import EpisodeCounter, EpisodeStats
from ._errors import (
    ClosedError,
    InvalidAction,
    SpaceMismatch,
    StateNotTaken,
    UnknownWorker,
    WorkerError,
    WorkerPaused,
)
from ._inbox import Inbox
from ._messages import Autoreset
from ._options import PoolOptions
from ._receiving import Receiving
from ._remote_control import RemoteControl
from ._rollout import Rollouts
from ._sentinels import RESET, Command, Reset
from .loops._here import for_this_loop
from .workers._base import Worker

__all__ = ["AsyncWorkerPool", "SyncWorkerPool", "WorkerPool"]

S = TypeVar("S")


class WorkerPool(Receiving[S], RemoteControl[S], Rollouts[S]):
    """The methods both pools share. Use :class:`AsyncWorkerPool` or :class:`SyncWorkerPool`.

    A pool is an async context manager that owns its workers: leaving the ``async with``
    block closes every worker (timed: close, wait ``cleanup_time``, terminate, kill), even
    when the body raised or was cancelled. Worker ids are the positions in ``workers``.

    The options (units, defaults, meaning) are the pool options of :func:`aioenv.make_pool`.
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
        autoreset: Autoreset = "disabled",
        max_episode_steps: int | None = None,
        check_actions: bool = False,
        copy: bool = True,
    ) -> None:
        if not hasattr(self, "_ordered"):
            raise TypeError(
                "WorkerPool is the base class of the pools; use AsyncWorkerPool (states in the "
                "order they finish), SyncWorkerPool (in the order sent) or make_pool()"
            )
        workers = _checked_workers(workers)
        options = PoolOptions(
            cleanup_time=cleanup_time,
            step_timeout=step_timeout,
            start_timeout=start_timeout,
            restart=restart,
            max_restarts=max_restarts,
            restart_backoff=restart_backoff,
            on_failure=on_failure,
            autoreset=autoreset,
            max_episode_steps=max_episode_steps,
            check_actions=bool(check_actions),
            copy=bool(copy),
        )
        supervision = options.supervision(self._on_worker_failure)
        episode = options.episode()
        #: The options this pool was made with.
        self.options = options
        self.cleanup_time = float(options.cleanup_time)
        self.autoreset = episode.autoreset  # aioenv's name, whichever form was given
        self.max_episode_steps = max_episode_steps
        self.check_actions = options.check_actions
        self.copy = options.copy
        self._reused_rows = ReusedRows(len(workers))  # with copy=False
        #: Failures seen (env exceptions, deaths, timeouts), restarted or raised.
        self.failures = 0
        self._on_failure = on_failure
        self._inbox = Inbox(ordered=self._ordered)
        #: The spaces of the first worker of each size (envs it steps) that reported them.
        self._spaces: dict[int, tuple[Any, Any]] = {}
        self._observation_spaces_may_differ = False  # see allow_differing_observations()
        self._episodes = EpisodeCounter(len(workers), episode.autoreset)
        for worker_id, worker in enumerate(workers):
            worker.join_pool(self._inbox, worker_id, supervision, episode, self._check_spaces)
        self._workers = workers
        #: Per worker, the index of its first env (workers may step several together).
        self._first_env = [sum(w.num_envs for w in workers[:i]) for i in range(len(workers))]
        self._closed = False
        self._close_done: anyio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # where states were last awaited

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
        """Send ``action`` (or ``RESET``, ``Reset(...)``, ``CLOSE``) to one worker. Returns
        at once."""
        if self._closed:
            self._check_open()
        workers = self._workers
        if type(worker_id) is int and 0 <= worker_id < len(workers):
            worker = workers[worker_id]  # the common case, checked first
        else:
            worker = workers[self._index(worker_id)]
        if self._inbox.is_paused(worker.worker_id):
            raise WorkerPaused(f"{worker.name} is paused; pool.resume({worker_id}) first")
        if self.check_actions and not isinstance(action, (Command, Reset)):
            space = worker.action_space
            if space is not None and not space.contains(action):
                raise InvalidAction(f"{worker.name}: {explain_invalid_action(action, space)}")
        worker.send_action(action)
        if action is RESET or isinstance(action, Reset):
            self._episodes.expect_reset(worker_id)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Send ``RESET`` to every open, unpaused worker; the replies come back through
        ``get_state``/``get_batch`` like any other state. ``seed=s`` seeds env ``i`` with
        ``s + i`` (gymnasium's vector convention; envs counted across workers, in worker
        order) for this reset only."""
        self._check_open()
        targets = self._active_workers()
        for worker in targets:
            if worker.failure is not None:
                raise worker.failure
            if self._inbox.is_owed(worker.worker_id):
                raise StateNotTaken(
                    f"reset(): {worker.name} has an action in flight or a state not taken; "
                    "take every pending state before resetting (nothing was sent)"
                )
        for worker in targets:
            assert worker.worker_id is not None
            if seed is None and options is None:
                worker.send_action(RESET)
            else:
                worker_seed = None if seed is None else seed + self._first_env[worker.worker_id]
                worker.send_action(Reset(seed=worker_seed, options=options))
            self._episodes.expect_reset(worker.worker_id)

    async def reset_all(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Batch[S]:
        """Reset every open, unpaused worker and return their reset states, in worker-id
        order. Without ``seed`` each env's RNG continues (see :meth:`reset`)."""
        self.reset(seed=seed, options=options)
        batch = await self.get_batch(min_size=len(self._active_workers()))
        return batch.sorted()

    async def set_seeds(self, seeds: Sequence[int | None]) -> None:
        """Seed each worker's next reset (``seeds[i]`` for worker ``i``; None leaves that
        worker alone). Later resets continue the env's RNG."""
        if len(seeds) != len(self._workers):
            raise ValueError(f"set_seeds() needs {len(self._workers)} seeds, got {len(seeds)}")
        for worker, seed in zip(self._workers, seeds, strict=True):
            if seed is not None:
                worker.seed_next_reset(operator.index(seed))

    # Pausing ---------------------------------------------------------------------------
    def pause(self, worker_id: int) -> None:
        """Skip this worker in ``get_state``, ``get_batch`` and ``reset()`` until resumed.
        It keeps its env and any state in flight or not yet taken; ids never shift."""
        self._check_open()
        self._inbox.pause(self._worker(worker_id).worker_id)

    def resume(self, worker_id: int | None = None) -> None:
        """Resume one worker, or every paused worker."""
        self._check_open()
        targets = self._workers if worker_id is None else [self._worker(worker_id)]
        for worker in targets:
            self._inbox.resume(worker.worker_id)

    @property
    def active_ids(self) -> list[int]:
        """Ids of the workers that are open and not paused."""
        return [worker.worker_id for worker in self._active_workers()]  # type: ignore[misc]

    def has_pending(self, worker_id: int) -> bool:
        """The worker has an action in flight or a state not yet taken."""
        return self._inbox.is_owed(self._worker(worker_id).worker_id)

    @property
    def num_pending(self) -> int:
        """Unpaused workers with an action in flight or a state not yet taken."""
        return self._inbox.num_owed

    @property
    def paused(self) -> tuple[int, ...]:
        """The ids of the paused workers, in increasing order."""
        return tuple(i for i in range(len(self._workers)) if self._inbox.is_paused(i))

    @property
    def num_active(self) -> int:
        """Workers that are open and not paused."""
        return len(self._active_workers())

    def _active_workers(self) -> list[Worker[S]]:
        return [
            worker
            for worker in self._workers
            if not worker.closed and not self._inbox.is_paused(worker.worker_id)
        ]

    def _ids(self, worker_ids: Sequence[int] | None) -> list[int]:
        self._check_open()
        if worker_ids is None:
            return [i for i, worker in enumerate(self._workers) if not worker.closed]
        return [self._index(worker_id) for worker_id in worker_ids]

    # Statistics and checks -------------------------------------------------------------
    def episode_stats(self) -> list[EpisodeStats]:
        """Per worker (by id): finished episodes, their mean return and mean length, counted
        from the rewards and steps of the states the pool has handed out (nothing is added
        to the envs' infos). Needs gymnasium envs (:class:`~aioenv.Step` states): the pool
        cannot see where a custom :class:`~aioenv.Environment`'s episodes end."""
        if self._episodes.saw_custom_state:
            raise TypeError(
                "episode_stats() needs gymnasium envs (aioenv.Step states); this pool handed "
                "out custom states, whose episode ends only the env's terminated() knows: "
                "count episodes in your own loop"
            )
        return [dataclasses.replace(stats) for stats in self._episodes.stats]

    def _reference_spaces(self, size: int) -> tuple[Any, Any] | None:
        """The spaces a worker stepping ``size`` envs must report: those of the first
        worker of that size, else a one-env worker's batched to ``size`` (a worker of
        several envs reports its envs' spaces batched); None for the first of its size
        where no one-env worker has reported yet."""
        if size in self._spaces:
            return self._spaces[size]
        if 1 not in self._spaces:
            return None
        single = self._spaces[1]
        return (
            None if single[0] is None else batch_space(single[0], size),
            None if single[1] is None else batch_space(single[1], size),
        )

    def allow_differing_observations(self) -> None:
        """Let workers' observation spaces differ (in bounds, say): for a caller that checks
        them itself, as ``AioVectorEnv(observation_mode="different")`` does."""
        self._observation_spaces_may_differ = True

    def _check_spaces(self, worker: Worker[S]) -> WorkerError | None:
        spaces = (worker.observation_space, worker.action_space)
        if spaces == (None, None):
            return None
        reference = self._reference_spaces(worker.num_envs)
        if reference is None:
            self._spaces[worker.num_envs] = spaces
            return None
        for what, mine, theirs in zip(("observation", "action"), spaces, reference, strict=True):
            if what == "observation" and self._observation_spaces_may_differ:
                continue
            if mine != theirs:
                return SpaceMismatch(
                    f"{worker.name}: its {what} space {mine} differs from the pool's {theirs}; "
                    "every worker of a pool must share its spaces",
                    worker_id=worker.worker_id,
                )
        return None

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
        return for_this_loop(self)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # Helpers ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the pool is closed; create a new pool to keep going")

    def _worker(self, worker_id: int) -> Worker[S]:
        return self._workers[self._index(worker_id)]

    def _index(self, worker_id: int) -> int:
        if type(worker_id) is int and 0 <= worker_id < len(self._workers):
            return worker_id  # the common case, checked first
        try:
            index = operator.index(worker_id)
        except TypeError:
            raise UnknownWorker(f"worker ids are ints, got {worker_id!r}") from None
        if not 0 <= index < len(self._workers) or isinstance(worker_id, bool):
            raise UnknownWorker(
                f"no worker {worker_id!r}: this pool has workers 0..{len(self._workers) - 1}"
            )
        return index


def _checked_workers(workers: Sequence[Worker[S]]) -> list[Worker[S]]:
    workers = list(workers)
    if not workers:
        raise ValueError("a pool needs at least one worker")
    seen: set[int] = set()  # ids of the workers checked so far: a worker listed twice
    for position, worker in enumerate(workers):
        if not isinstance(worker, Worker):
            raise TypeError(
                f"workers[{position}] is a {type(worker).__name__}, not an aioenv worker "
                "(SyncWorker, ThreadWorker, ProcessWorker or AsyncEnvWorker); use make_pool() "
                "to build workers from envs"
            )
        if worker.in_pool or id(worker) in seen:
            raise ValueError(f"workers[{position}] ({worker.name}) already belongs to a pool")
        seen.add(id(worker))
    return workers


class AsyncWorkerPool(WorkerPool[S]):
    """Hands out states in the order they finish: a fast env never waits for a slow one."""

    _ordered = False

    async def __aenter__(self) -> AsyncWorkerPool[S]:
        self._check_open()
        return for_this_loop(self)


class SyncWorkerPool(WorkerPool[S]):
    """The forced-sync twin: the same methods and rules, but states come back in the order
    their actions were sent, so a program gives the same result on every run. With
    :class:`~aioenv.SyncWorker` workers (``make_pool(..., force_sync=True)``) nothing runs
    concurrently at all."""

    _ordered = True

    async def __aenter__(self) -> SyncWorkerPool[S]:
        self._check_open()
        return for_this_loop(self)

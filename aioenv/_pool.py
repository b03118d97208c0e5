"""Pools: many workers behind one ``get_state``.

The pool does not know which kind its workers are. It shares one :class:`Inbox` with
them; the only difference between the async pool and the forced-sync twin is the order
in which that inbox hands outcomes out (first finished vs first sent).
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar

import anyio
import gymnasium
import numpy as np
from gymnasium.vector.utils import create_empty_array

from ._actions import explain_invalid_action
from ._batch import Batch
from ._episodes import EpisodeCounter, EpisodeStats
from ._errors import (
    ClosedError,
    InvalidAction,
    NoActionInFlight,
    SpaceMismatch,
    StateNotTaken,
    UnknownWorker,
    WorkerError,
    WorkerPaused,
)
from ._inbox import Inbox, Outcome
from ._render import tile_images
from ._runner import Autoreset, ControlRequest, EpisodeOptions
from ._sentinels import RESET, Command, Reset
from ._shared_memory import owned_step
from ._supervision import Supervision
from .workers._base import Worker

if TYPE_CHECKING:
    from ._vector import AioVectorEnv

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
        autoreset: Autoreset = "disabled",
        max_episode_steps: int | None = None,
        check_actions: bool = False,
        copy: bool = True,
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
        episode = EpisodeOptions(autoreset=autoreset, max_episode_steps=max_episode_steps)
        self.cleanup_time = float(cleanup_time)
        #: What happens when an episode ends: "disabled", "same_step" or "next_step".
        self.autoreset = episode.autoreset
        self.max_episode_steps = max_episode_steps
        self.check_actions = bool(check_actions)
        #: False: observations in shared memory are handed out as views, valid until the
        #: next action sent to their worker, and ``get_batch`` reuses its stacked arrays.
        self.copy = bool(copy)
        self._batch_buffer: Any = None  # with copy=False: rows for stacked Box observations
        #: Failures seen (env exceptions, deaths, timeouts), restarted or raised.
        self.failures = 0
        self._on_failure = on_failure
        self._inbox = Inbox(ordered=self._ordered)
        self._spaces: tuple[Any, Any] | None = None
        # Set by AioVectorEnv(observation_mode="different"): its envs' observation spaces
        # may differ in bounds (it checks their shapes and dtypes itself).
        self._observation_spaces_may_differ = False
        self._episodes = EpisodeCounter(len(workers), episode.autoreset)
        for worker_id, worker in enumerate(workers):
            worker._attach(self._inbox, worker_id, supervision, episode)
            worker._on_first_reply = self._check_spaces
        self._workers = workers
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
        ``get_state``/``get_batch`` like any other state. ``seed=s`` seeds worker ``i``
        with ``s + i`` (gymnasium's vector convention) for this reset only."""
        self._check_open()
        targets = self._active_workers()
        for worker in targets:
            if worker._failure is not None:
                raise worker._failure
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
                worker_seed = None if seed is None else seed + worker.worker_id
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
                worker._next_reset_seed = operator.index(seed)

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

    # Remote control --------------------------------------------------------------------
    async def call(
        self, name: str, *args: Any, worker_ids: Sequence[int] | None = None, **kwargs: Any
    ) -> list[Any]:
        """Call method ``name`` of each env (or read it, if it is not callable) and return
        the results in ``worker_ids`` order. A worker with a step in flight finishes that
        step first; its state is delivered as usual."""
        request = ControlRequest("call", name, args, kwargs)
        return await self._control(request, worker_ids)

    async def get_attr(self, name: str, worker_ids: Sequence[int] | None = None) -> list[Any]:
        """Attribute ``name`` of each env, in ``worker_ids`` order."""
        return await self._control(ControlRequest("get", name), worker_ids)

    async def set_attr(
        self, name: str, values: Any, worker_ids: Sequence[int] | None = None
    ) -> None:
        """Set attribute ``name`` of each env: ``values`` is a list with one value per
        worker, or a single value for all."""
        ids = self._ids(worker_ids)
        if isinstance(values, (list, tuple)):
            if len(values) != len(ids):
                raise ValueError(f"set_attr() got {len(values)} values for {len(ids)} workers")
        else:
            values = [values] * len(ids)
        futures = [
            self._workers[i]._control(ControlRequest("set", name, (value,)))
            for i, value in zip(ids, values, strict=True)
        ]
        await self._gather(futures)

    async def render(self, mode: str = "rgb_array", tiled: bool = True) -> Any:
        """Frames of every open, unpaused env: one tiled image, or a list of frames. The
        envs must have been made with ``render_mode="rgb_array"``."""
        if mode != "rgb_array":
            raise ValueError(f"render() supports mode='rgb_array', got {mode!r}")
        ids = [worker.worker_id for worker in self._active_workers()]
        frames = await self.call("render", worker_ids=ids)  # type: ignore[arg-type]
        for worker_id, frame in zip(ids, frames, strict=True):
            if not isinstance(frame, np.ndarray) or frame.ndim not in (2, 3):
                raise TypeError(
                    f"{self._workers[worker_id].name}: render() returned "  # type: ignore[index]
                    f"{type(frame).__name__}; make the env with render_mode='rgb_array'"
                )
        return tile_images(frames) if tiled else frames

    async def _control(
        self, request: ControlRequest, worker_ids: Sequence[int] | None
    ) -> list[Any]:
        ids = self._ids(worker_ids)
        return await self._gather([self._workers[i]._control(request) for i in ids])

    @staticmethod
    async def _gather(futures: list[asyncio.Future[Any]]) -> list[Any]:
        # Wait for all, then raise the first error: no reply is left dangling.
        results = await asyncio.gather(*futures, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results

    def _ids(self, worker_ids: Sequence[int] | None) -> list[int]:
        self._check_open()
        if worker_ids is None:
            return [i for i, worker in enumerate(self._workers) if not worker.closed]
        return [self._index(worker_id) for worker_id in worker_ids]

    def as_vector_env(self) -> AioVectorEnv:
        """This pool as a ``gymnasium.vector.VectorEnv`` for synchronous code; the pool must
        not have been used from an event loop yet."""
        from ._vector import AioVectorEnv

        return AioVectorEnv.from_pool(self)

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

    def _check_spaces(self, worker: Worker[S]) -> WorkerError | None:
        spaces = (worker.observation_space, worker.action_space)
        if spaces == (None, None):
            return None
        if self._spaces is None:
            self._spaces = spaces
            return None
        for what, mine, theirs in zip(("observation", "action"), spaces, self._spaces, strict=True):
            if what == "observation" and self._observation_spaces_may_differ:
                continue
            if mine != theirs:
                return SpaceMismatch(
                    f"{worker.name}: its {what} space {mine} differs from the pool's {theirs}; "
                    "every worker of a pool must share its spaces",
                    worker_id=worker.worker_id,
                )
        return None

    # Receiving -------------------------------------------------------------------------
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
            state = owned_step(state)
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
        deadline = self._deadline(timeout)
        if self._loop is not asyncio._get_running_loop():
            self._check_loop()
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
        ids: list[int] = [outcome.worker_id for outcome in outcomes]  # type: ignore[misc]
        states = [outcome.state for outcome in outcomes]
        space = self._workers[ids[0]].observation_space if ids else None
        out = None if self.copy else self._reusable_rows(space, len(ids))
        batch = Batch(ids, states, space, out)
        if any(outcome.borrowed for outcome in outcomes):
            # Views of shared memory: stack them now, before a next action overwrites them.
            observations = batch.observations
            if self.copy:
                for row, outcome in enumerate(outcomes):
                    if outcome.borrowed:
                        states[row] = _with_row(outcome.state, space, observations, row)
        return batch

    def _reusable_rows(self, space: Any, rows: int) -> Any:
        """Stacked Box observations reuse one array (``copy=False``); None otherwise."""
        if not isinstance(space, gymnasium.spaces.Box):
            return None
        buffer = self._batch_buffer
        if buffer is None or buffer.shape[1:] != space.shape or buffer.dtype != space.dtype:
            buffer = self._batch_buffer = create_empty_array(space, len(self._workers))
        return buffer[:rows]

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

    def _check_loop(self) -> None:
        """Before waiting on a new event loop: a worker whose reply was due on an old one
        raises at once (its reply is lost with that loop) rather than hang."""
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        for worker in self._workers:
            if self._inbox.is_owed(worker.worker_id):
                worker._ensure_loop()
        self._loop = loop

    async def _wait_next(self, timeout: float | None) -> Outcome | None:
        inbox = self._inbox
        deadline = self._deadline(timeout)
        self._check_loop()
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
        deadline = self._deadline(timeout)
        self._check_loop()
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


def _with_row(step: Any, space: Any, observations: Any, row: int) -> Any:
    """``step`` whose observation (a view of shared memory) is replaced by its row of the
    freshly stacked batch: the batch's copy is the state's copy."""
    if isinstance(space, gymnasium.spaces.Box):
        return step.with_observation(observations[row])
    return owned_step(step)

"""What AioVectorEnv runs on its background loop: the pool's lifetime, one call's
exchange of actions for states, and turning a worker's failure into what gymnasium's
vector envs raise."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium

from ..core._environment import Stepped, describe_source
from ..core._errors import EnvError, VectorEnvClosed, WorkerError, WorkerRemoved, env_given_up
from ..loops._inline import LoopHost, host_for_sync_calls
from ..pool._pool import WorkerPool, in_send_order
from ..pool._remote_control import PerWorker
from ..workers.process._worker import ProcessWorker

__all__ = [
    "Envs",
    "Runtime",
    "collect",
    "dispatch",
    "exchange",
    "raised",
    "receive",
    "start",
]


class Envs(Protocol):
    """What an :class:`~aioenv.AioVectorEnv` asks of its envs, by worker id: a pool on an
    event loop (:class:`Runtime`), envs stepped in line
    (:class:`~aioenv.vector._inline.InlineEnvs`) or in the engine's children
    (:class:`~aioenv.engine._children.EngineChildren`); the vector env asks nothing else of
    them. States come back with the errors that replaced some (each a worker's); nothing
    is raised for an env's failure but by the lockstep :meth:`step`."""

    closed: bool
    #: The envs answer in batches, even a group of one env (envs in line, the engine's
    #: children); a pool's workers of one env answer as that env.
    batched: bool
    #: The envs are one group stepped in line: the pipelined calls send to them and take
    #: them back env by env (the units of ``dispatch``, ``receive`` and ``has_pending``
    #: are envs, not workers), and there is no worker to name in messages.
    by_env: bool

    @property
    def pool(self) -> WorkerPool[Any]:
        """The pool behind the envs; AttributeError, saying how they step, where there is
        none."""

    @property
    def autoreset(self) -> str:
        """The autoreset mode the envs run under (aioenv's name)."""

    @property
    def idle_spin(self) -> float | None:
        """Seconds the children poll for their next request before they sleep (None
        without children)."""

    def set_idle_spin(self, seconds: float) -> None:
        """Make every child poll ``seconds`` for its next request."""

    def step(self, actions: Any) -> Stepped | None:
        """A lockstep step of every env in one call, with a batch of the vector env's
        actions (in line, the engine's children): see
        :data:`~aioenv.core._environment.Stepped`; None where there is no such step (a
        pool's) or these actions do not fit it (then the requests are made one by one)."""

    @property
    def observations(self) -> Callable[[], Any] | None:
        """What gives every env's latest observation as the vector env hands them out,
        where the envs keep them in one batch themselves (the engine's buffer: its
        ``observations()``); else None, and the vector env keeps them itself."""

    def start(self) -> tuple[list[Any], list[Any]]:
        """Start the envs: their observation and action spaces, an answer per worker."""

    def exchange(self, ids: list[int], requests: list[Any]) -> tuple[list[Any], list[WorkerError]]:
        """Send ``requests[k]`` to worker ``ids[k]`` and take every answer."""

    def dispatch(self, ids: list[int], requests: list[Any], drop: bool) -> None:
        """Send without waiting; with ``drop``, what was in flight is dropped first."""

    def collect(self, ids: list[int]) -> tuple[list[Any], list[WorkerError]]:
        """Take the answers of workers ``ids``, which were all sent a request."""

    def receive(self, count: int, held: dict[int, Any]) -> WorkerError | None:
        """Take answers into ``held`` (by worker id) until it has ``count``. Envs stepped
        ``by_env`` answer ``count`` envs in one BatchStep of their rows (in the order of
        their ids), held under each of them."""

    def call_envs(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """Call method ``name`` of every env: one answer per worker."""

    def apply_envs(
        self, functions: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[Any]:
        """Run ``functions[w]`` (a function, a :class:`PerEnv` of them, or None: not
        asked) on worker ``w``'s envs: one answer per worker (None where not asked)."""

    def get_attr(self, name: str) -> list[Any]: ...

    def set_attr(self, name: str, values: Any) -> None: ...

    def has_pending(self, worker_id: int) -> bool: ...

    @property
    def num_pending(self) -> int: ...

    def close(self) -> None: ...


class Runtime:
    """The pool and the event loop it runs on; closed exactly once, by ``close()``, the
    vector env's finalizer or the interpreter's exit. ``alike``: every env has the
    vector env's observation space (``observation_mode="same"``); else the pool lets
    them differ, and the vector env checks each env's itself, as gymnasium does.

    Made outside any event loop (a training script), the loop runs in the calling thread
    during each call: a step costs no hand-off to another thread and back. Made inside a
    running loop (a notebook, async code), it runs in a daemon thread of its own (see
    :func:`~aioenv.loops._inline.host_for_sync_calls`)."""

    batched = False
    by_env = False
    #: The vector env keeps the workers' latest observations itself.
    observations = None

    def __init__(self, pool: WorkerPool[Any], alike: bool) -> None:
        self.pool = pool
        if not alike:  # observation_mode="different": the vector env checks each env's
            pool.allow_differing_observations()
        self.closed = False
        name = describe_source(pool.workers[0].source)
        self.loop: LoopHost = host_for_sync_calls(f"aioenv-vector-loop ({name})")

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        if self.closed:
            raise VectorEnvClosed("this AioVectorEnv is closed; make a new one to go on")
        if self.pool.removed:
            raise cannot_go_on(self.pool)
        return self.loop.call(function, *args)

    @property
    def autoreset(self) -> str:
        return self.pool.autoreset

    @property
    def idle_spin(self) -> float | None:
        """What the process workers' children poll (None without process workers)."""
        spins = [w.idle_spin for w in self.pool.workers if isinstance(w, ProcessWorker)]
        return spins[0] if spins else None

    def set_idle_spin(self, seconds: float) -> None:
        """Make every process worker's child poll ``seconds`` for its next request."""
        self.call(_set_idle_spin, self.pool, seconds)

    def step(self, actions: Any) -> None:
        """A pool has no step of every env in one call: its workers are sent theirs."""
        return None

    # The calls of :class:`Envs`, each run on the loop ----------------------------------
    def start(self) -> tuple[list[Any], list[Any]]:
        return self.call(start, self.pool)  # type: ignore[no-any-return]

    def exchange(self, ids: list[int], requests: list[Any]) -> tuple[list[Any], list[WorkerError]]:
        return self.call(exchange, self.pool, ids, requests)  # type: ignore[no-any-return]

    def dispatch(self, ids: list[int], requests: list[Any], drop: bool) -> None:
        self.call(dispatch, self.pool, ids, requests, drop)

    def collect(self, ids: list[int]) -> tuple[list[Any], list[WorkerError]]:
        return self.call(collect, self.pool, ids)  # type: ignore[no-any-return]

    def receive(self, count: int, held: dict[int, Any]) -> WorkerError | None:
        return self.call(receive, self.pool, count, held)  # type: ignore[no-any-return]

    def call_envs(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        return self.call(functools.partial(self.pool.call, name, *args, **kwargs))  # type: ignore[no-any-return]

    def apply_envs(
        self, functions: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[Any]:
        asked = [worker for worker, function in enumerate(functions) if function is not None]
        if not asked:
            return [None] * len(functions)
        per_worker = PerWorker([functions[worker] for worker in asked])
        apply = functools.partial(self.pool.apply, per_worker, *args, worker_ids=asked, **kwargs)
        answers = self.call(apply).by_id()
        return [answers.get(worker) for worker in range(len(functions))]

    def get_attr(self, name: str) -> list[Any]:
        return self.call(self.pool.get_attr, name)  # type: ignore[no-any-return]

    def set_attr(self, name: str, values: Any) -> None:
        self.call(self.pool.set_attr, name, values)

    def has_pending(self, worker_id: int) -> bool:
        return self.pool.has_pending(worker_id)

    @property
    def num_pending(self) -> int:
        return self.pool.num_pending

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.loop.running and not self.loop.in_loop_thread:
                # aclose is bounded by cleanup_time plus the SIGTERM/SIGKILL graces.
                self.loop.call(self.pool.aclose, timeout=self.pool.cleanup_time + 10.0)
        finally:
            self.loop.stop()


def cannot_go_on(pool: WorkerPool[Any]) -> WorkerRemoved:
    """The error of every call on a vector env whose pool gave up on a worker: the vector
    env has a fixed number of envs, so it cannot go on without that worker's."""
    removed = pool.removed
    worker_id = min(removed)
    first = sum(worker.num_envs for worker in pool.workers[:worker_id])
    size = pool.workers[worker_id].num_envs
    envs = f"env {first}" if size == 1 else f"envs {first}-{first + size - 1}"
    return env_given_up(envs, pool.workers[worker_id].name, removed[worker_id], worker_id)


async def _set_idle_spin(pool: WorkerPool[Any], seconds: float) -> None:
    for worker in pool.workers:
        if isinstance(worker, ProcessWorker):
            worker.set_idle_spin(seconds)


async def start(pool: WorkerPool[Any]) -> tuple[list[Any], list[Any]]:
    """Enter the pool and read every env's spaces."""
    await pool.__aenter__()
    return await pool.get_attr("observation_space"), await pool.get_attr("action_space")


async def exchange(
    pool: WorkerPool[Any], ids: list[int], actions: list[Any]
) -> tuple[list[Any], list[WorkerError]]:
    """Send ``actions[k]`` to worker ``ids[k]`` (in the pool's send order: sync workers
    last) and take every reply: the states in ``ids`` order, or every worker error. Every
    state sent for is taken, whatever fails, so the next call starts clean."""
    if pool.num_pending:  # left by a call that was interrupted (Ctrl-C): drop them
        await _take(pool, pool.num_pending)
    sent = 0
    try:
        for worker_id, action in in_send_order(pool, ids, actions):
            pool.send_action(action, worker_id)
            sent += 1
    finally:
        if sent < len(ids):  # a send failed: take what was sent, then let its error go on
            await _take(pool, sent)
    return await collect(pool, ids)


async def collect(pool: WorkerPool[Any], ids: list[int]) -> tuple[list[Any], list[WorkerError]]:
    """Take the states of the workers ``ids``, which have all been sent an action: the
    states in ``ids`` order, or every worker error (every state is taken all the same)."""
    states, errors = await _take(pool, len(ids))
    if errors:
        return [], errors
    return [states[worker_id] for worker_id in ids], []


async def _take(pool: WorkerPool[Any], count: int) -> tuple[dict[int, Any], list[WorkerError]]:
    states: dict[int, Any] = {}
    errors: list[WorkerError] = []
    while len(states) + len(errors) < count:
        try:
            batch = await pool.get_batch(min_size=count - len(states) - len(errors))
        except WorkerError as error:
            errors.append(error)
            continue
        states.update(zip(batch.worker_ids.tolist(), batch.states, strict=True))
    return states, errors


async def dispatch(
    pool: WorkerPool[Any], worker_ids: list[int], requests: list[Any], drop: bool
) -> None:
    """Send ``requests[k]`` to worker ``worker_ids[k]``; with ``drop``, first wait for every
    state in flight and drop it (an env error among them too), so the sends start clean."""
    if drop and pool.num_pending:
        await pool.drain()
    for worker_id, request in in_send_order(pool, worker_ids, requests):
        pool.send_action(request, worker_id)


async def receive(pool: WorkerPool[Any], count: int, held: dict[int, Any]) -> WorkerError | None:
    """Take states into ``held`` until it has ``count``, in the order they finish; the
    error of an env that failed instead (the states taken before it stay in ``held``)."""
    while len(held) < count:
        missing = count - len(held)
        try:
            batch = await pool.get_batch(min_size=missing, max_size=missing)
        except WorkerError as error:
            return error
        held.update(zip(batch.worker_ids.tolist(), batch.states, strict=True))
    return None


def raised(
    errors: list[WorkerError], env_of: Callable[[int | None, int | None], tuple[int | None, str]]
) -> BaseException:
    """What a vector step or reset whose workers failed raises, reported as gymnasium's
    ``AsyncVectorEnv`` reports its sub-envs' errors: each env's error and traceback on
    gymnasium's logger, then the last env's own exception where it came back (gymnasium's
    vector envs re-raise the env's type), with aioenv's account of where it happened
    (which env of the vector env) attached as a note (Python 3.11+) or as its cause; else
    that env's EnvError. An error that is not the env's (a worker that died or timed out)
    is raised as it is. ``env_of(worker_id, env_in_batch)`` is the env of the vector env
    and its account."""
    failed: list[tuple[int | None, str, EnvError]] = []
    for error in errors:
        if not isinstance(error, EnvError):
            return error
        for each in (error, *error.more):
            failed.append((*env_of(each.worker_id, each.env), each))
    for env, _, error in failed:
        gymnasium.logger.error(f"Received the following error from Worker-{env} - Shutting it down")
        gymnasium.logger.error(error.remote_traceback)
    gymnasium.logger.error("Raising the last exception back to the main process.")
    _, where, error = failed[-1]
    if not isinstance(error.__cause__, Exception):
        return error
    original = error.__cause__
    note = f"[aioenv] raised by {where} of the AioVectorEnv during {error.during}"
    if sys.version_info >= (3, 11):
        original.add_note(f"{note}; traceback in the worker:\n{error.remote_traceback}")
    elif original.__cause__ is None:
        original.__cause__ = EnvError(
            f"{note} ({error.args[0]})",
            worker_id=error.worker_id,
            remote_traceback=error.remote_traceback,
            exception_type=error.exception_type,
            during=error.during,
        )
    return original

"""A reference, not a pool: the leanest batch-per-hand-off process design we could write.

Each child process steps ``envs_per_process`` envs on one fixed-size binary message of
actions and answers with one message: every observation (raw bytes), reward and done
flag of its envs. Episodes reset inside the step. The parent, on uvloop, acts on whichever
child answers first, with the same policy as every other row.

It has none of a pool's duties: no per-env worker ids, no sequence numbers, no errors,
deadlines, restarts, pausing or episode statistics, no Python object per state. Set next
to aioenv's batch rows, it shows how much of the gap to ``SyncVectorEnv`` is the pool's
per-state work and how much is the process design itself. (With a single child it is
lockstep, parent and child taking turns, so it is no bound for small N.)

:class:`BareLockstep` is the same child behind a lockstep vector env's ``step``, for the
lockstep workloads: a child per core, the parent blocking on each child's socket in turn,
with no event loop. :class:`BarePipelined` is the same children behind the pipelined
loop's ``recv``/``send``: W13's reference.

:class:`BareEngine` is the lockstep design through aioenv's engine parts and nothing else
of aioenv: the actions, observations, rewards and flags of every env in one memory file
all the processes map (:class:`aioenv.engine._buffer.StepBuffer`), each child woken by a
kernel counter of its own and every child's answer counted on one the parent sleeps on
(:class:`aioenv.engine._wake.Wake`), the children spinning first while it pays (or
never). It bounds what a vector step carried by the engine can reach on this machine.
:func:`run_bare` with ``engine=True`` is the per-state loop over the same parts: a child
per env, its row of one shared buffer, a request wake and an answer wake of its own, the
answer wake watched by the event loop (``add_reader``); the parent acts on whichever env
answers first. It bounds what a pool's process workers carried by the engine can reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import select
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from envs import EnvFactory, Policy
from machine import CpuAccount
from runners import Meter, Sample, Timing, run_coroutine

import aioenv
from aioenv.core._environment import copy_arrays
from aioenv.engine._buffer import StepBuffer
from aioenv.engine._wake import Gone, Wake
from aioenv.env_side._idle_spin import IdleSpin
from aioenv.workers import default_context

__all__ = ["BareEngine", "BareLockstep", "BarePipelined", "run_bare"]

#: How long a bare engine's children spin before they sleep (aioenv's lockstep default).
ENGINE_SPIN = 0.002

_JOIN_TIMEOUT = 5.0


def _spaces(env: EnvFactory) -> tuple[Any, Any]:
    """The observation and action spaces of one env built for the purpose."""
    probe = env()
    spaces = probe.observation_space, probe.action_space
    probe.close()
    return spaces


def _layout(space: Any, k: int) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """Observation shape and dtype, and the size of one answer for ``k`` envs."""
    shape = tuple(space.shape or ())
    dtype = np.dtype(space.dtype)
    observation_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return shape, dtype, k * (observation_bytes + 8 + 1)


def _action_layout(space: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """One action's shape and dtype (a Discrete action travels as an int64)."""
    return tuple(space.shape or ()), np.dtype(space.dtype or np.int64)


def _child(
    sock: socket.socket, env: EnvFactory, seeds: list[int | None], next_step: bool = False
) -> None:
    """Step ``seeds``' envs on each message of actions and answer with one message.
    Episodes reset inside the step, or, with ``next_step`` (gymnasium's default autoreset,
    as the vector envs measured beside this reference run), on the env's next action,
    which is ignored: an answer whose done flag is set is then followed by its env's
    reset."""
    sock.setblocking(True)
    envs = [env() for _ in seeds]
    k = len(envs)
    shape, dtype, _ = _layout(envs[0].observation_space, k)
    observations = np.empty((k, *shape), dtype)
    rewards = np.zeros(k, np.float64)
    dones = np.zeros(k, np.bool_)
    for row, (instance, seed) in enumerate(zip(envs, seeds, strict=True)):
        observations[row] = instance.reset(seed=seed)[0]
    action_shape, action_dtype = _action_layout(envs[0].action_space)
    actions = bytearray(k * action_dtype.itemsize * int(np.prod(action_shape, dtype=np.int64)))
    with sock, contextlib.suppress(ConnectionError):  # the parent closed its end
        while True:
            sock.sendall(observations.tobytes() + rewards.tobytes() + dones.tobytes())
            if sock.recv_into(actions, len(actions), socket.MSG_WAITALL) < len(actions):
                return
            rows = np.frombuffer(actions, action_dtype).reshape(k, *action_shape)
            for row, action in enumerate(rows.tolist() if not action_shape else rows):
                instance = envs[row]
                if next_step and dones[row]:  # the ended episode's env resets instead
                    observations[row], _ = instance.reset()
                    rewards[row], dones[row] = 0.0, False
                    continue
                observation, reward, terminated, truncated, _ = instance.step(action)
                if (terminated or truncated) and not next_step:
                    observation, _ = instance.reset()
                observations[row] = observation
                rewards[row] = reward
                dones[row] = terminated or truncated


def _start_child(
    context: Any, env: EnvFactory, seeds: list[int | None], next_step: bool = False
) -> tuple[socket.socket, Any]:
    """Start a child (:func:`_child`) for ``seeds``' envs: the parent's end of its socket,
    and its process."""
    parent_end, child_end = socket.socketpair()
    with child_end:
        try:
            process = context.Process(
                target=_child, args=(child_end, env, seeds, next_step), daemon=True
            )
            process.start()
        except BaseException:
            parent_end.close()
            raise
    return parent_end, process


def _stop(sockets: list[socket.socket], processes: list[Any]) -> None:
    """Close the parent's ends (each child reads end-of-file and exits), then wait for the
    children, killing any that do not exit in time."""
    for sock in sockets:
        sock.close()
    for process in processes:
        process.join(_JOIN_TIMEOUT)
        if process.exitcode is None:
            process.kill()
            process.join()


def _receive(
    sock: socket.socket, buffer: bytearray, shape: tuple[int, ...], dtype: np.dtype[Any], k: int
) -> tuple[Any, Any, Any]:
    """A child's whole answer for its ``k`` envs, read into ``buffer``: views of its
    observations, rewards and done flags."""
    if sock.recv_into(buffer, len(buffer), socket.MSG_WAITALL) < len(buffer):
        raise ConnectionError("a bare child closed its socket")
    count = k * int(np.prod(shape, dtype=np.int64))
    observations = np.frombuffer(buffer, dtype, count).reshape(k, *shape)
    size = observations.nbytes
    rewards = np.frombuffer(buffer, np.float64, k, size)
    dones = np.frombuffer(buffer, np.bool_, k, size + 8 * k)
    return observations, rewards, dones


Answer = Callable[["_Child", "np.ndarray[Any, Any]"], None]


class _Child:
    """The parent's side of one child: a reader callback that hands on each whole answer."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        k: int,
        size: int,
        failed: asyncio.Future[None],
    ) -> None:
        self.loop, self.sock, self.shape, self.dtype, self.k = loop, sock, shape, dtype, k
        self.buffer = bytearray(size)
        self.view = memoryview(self.buffer)
        self.received = 0
        self.failed = failed
        self.on_answer: Answer | None = None
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self.on_readable)

    def on_readable(self) -> None:
        try:
            count = self.sock.recv_into(self.view[self.received :])
        except (BlockingIOError, InterruptedError):
            return
        if count == 0:
            self.close()
            if not self.failed.done():
                self.failed.set_exception(ConnectionError("a bare child closed its socket"))
            return
        self.received += count
        if self.received < len(self.buffer):
            return
        self.received = 0
        rows = np.frombuffer(self.buffer, self.dtype, self.k * int(np.prod(self.shape)))
        observations = rows.reshape(self.k, *self.shape).copy()  # a pool hands out copies
        assert self.on_answer is not None
        self.on_answer(self, observations)

    def act(self, actions: np.ndarray[Any, Any]) -> None:
        self.sock.sendall(actions.astype(np.int64, copy=False).tobytes())

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())


def run_bare(
    env: EnvFactory,
    n: int,
    *,
    policy: Policy,
    seed: int,
    timing: Timing,
    account: CpuAccount,
    envs_per_process: int = 8,
    engine: bool = False,
) -> Sample:
    """Measure the bare design with ``n`` envs, ``envs_per_process`` per child; with
    ``engine``, the per-state design over the engine's parts (a child per env)."""
    if engine:
        if envs_per_process != 1:
            raise ValueError("the bare engine's per-state design has a child per env")
        return run_coroutine(_measure_engine(env, n, policy, seed, timing, account))
    return run_coroutine(_measure(env, n, policy, seed, timing, account, envs_per_process))


async def _measure(
    env: EnvFactory,
    n: int,
    policy: Policy,
    seed: int,
    timing: Timing,
    account: CpuAccount,
    per_process: int,
) -> Sample:
    loop = asyncio.get_running_loop()
    context: Any = default_context()  # typeshed lacks Process on BaseContext
    seeds = aioenv.worker_seeds(seed, n)
    started = time.perf_counter()
    processes: list[Any] = []
    children: list[_Child] = []
    finished: asyncio.Future[None] = loop.create_future()  # the window closed, or a failure
    resets: list[tuple[_Child, np.ndarray[Any, Any]]] = []  # each child's first answer
    all_reset = asyncio.Event()
    meter: Meter | None = None

    def on_reset(child: _Child, observations: np.ndarray[Any, Any]) -> None:
        resets.append((child, observations))
        if len(resets) == len(children):
            all_reset.set()

    def on_step(child: _Child, observations: np.ndarray[Any, Any]) -> None:
        assert meter is not None
        if finished.done():
            return
        if not meter.running():
            finished.set_result(None)
            return
        meter.count += child.k
        child.act(policy.many(observations))

    try:
        observation_space, _ = _spaces(env)
        for first in range(0, n, per_process):
            group = seeds[first : first + per_process]
            shape, dtype, size = _layout(observation_space, len(group))
            parent_end, process = _start_child(context, env, group)
            processes.append(process)
            children.append(_Child(loop, parent_end, shape, dtype, len(group), size, finished))
            children[-1].on_answer = on_reset
        build_s = await _all_reset(all_reset, finished, started)
        meter = Meter(timing, account)
        for child in children:
            child.on_answer = on_step
        for child, observations in resets:
            child.act(policy.many(observations))
        await finished
    finally:
        for child in children:
            child.close()
        _stop([child.sock for child in children], processes)
    return meter.sample(build_s)


async def _all_reset(
    all_reset: asyncio.Event, finished: asyncio.Future[None], started: float
) -> float:
    """Wait until every child has reset, or one failed first (raised); the seconds since
    ``started``, the build's."""
    waiting = asyncio.ensure_future(all_reset.wait())
    await asyncio.wait([waiting, finished], return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if finished.done():
        finished.result()  # a child failed before its reset: raise why
    return time.perf_counter() - started


class BareLockstep:
    """The leanest lockstep vector env over child processes: the envs split evenly over a
    child per core (fewer where ``n`` is smaller), each child the one above, the parent
    sending every child its actions and then blocking on each child's socket in turn.
    Episodes reset inside the step; ``reset`` hands out the observations of the children's
    first reset (their seeds are the workers' seeds of ``seed``), once. It owes nothing
    else a vector env does (infos, terminated apart from truncated, errors, deadlines), so
    beside AioVectorEnv it shows how much of a lockstep step the process design itself
    costs on this machine and how much is aioenv's own work."""

    def __init__(self, env: EnvFactory, n: int, seed: int) -> None:
        children = min(n, len(os.sched_getaffinity(0)))
        bounds = [n * index // children for index in range(children + 1)]
        seeds = aioenv.worker_seeds(seed, n)
        observation_space, action_space = _spaces(env)
        self._shape, self._dtype, _ = _layout(observation_space, 1)
        _, self._action_dtype = _action_layout(action_space)
        self._rows = list(itertools.pairwise(bounds))
        self._sockets: list[socket.socket] = []
        self._processes: list[Any] = []
        context: Any = default_context()  # typeshed lacks Process on BaseContext
        try:
            for first, last in self._rows:
                parent_end, process = _start_child(context, env, seeds[first:last])
                self._sockets.append(parent_end)
                self._processes.append(process)
            self._buffers = [
                bytearray(_layout(observation_space, last - first)[2]) for first, last in self._rows
            ]
            self._first = self._answers()
        except BaseException:
            self.close()
            raise

    def _answers(self) -> tuple[Any, Any, Any]:
        """Every child's answer: the observations, rewards and done flags of all envs."""
        n = self._rows[-1][1]
        observations = np.empty((n, *self._shape), self._dtype)
        rewards = np.empty(n, np.float64)
        dones = np.empty(n, np.bool_)
        for sock, buffer, (first, last) in zip(
            self._sockets, self._buffers, self._rows, strict=True
        ):
            answer = _receive(sock, buffer, self._shape, self._dtype, last - first)
            observations[first:last], rewards[first:last], dones[first:last] = answer
        return observations, rewards, dones

    def reset(self, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        observations, _, _ = self._first
        return observations, {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        actions = np.asarray(actions, self._action_dtype)
        for sock, (first, last) in zip(self._sockets, self._rows, strict=True):
            sock.sendall(actions[first:last].tobytes())
        observations, rewards, dones = self._answers()
        return observations, rewards, dones, np.zeros_like(dones), {}

    def close(self) -> None:
        _stop(self._sockets, self._processes)


class BarePipelined:
    """The leanest pipelined vector env over child processes: a child per ``batch_size``
    envs (the child above), ``recv`` blocking in ``select`` until a child has answered and
    returning its envs' whole answer, ``send`` writing that child its actions. No event
    loop, no shared memory, no infos, errors or deadlines: beside AioVectorEnv's
    pipelined row it shows what the process design itself reaches when the script acts
    on whichever envs are ready. Its envs reset as the rows beside it do (autoreset
    "next_step": an ended env's next action brings its reset, which the pipelined loop
    does not count as a transition); ``recv`` reports an episode's end as terminated."""

    def __init__(self, env: EnvFactory, n: int, batch_size: int) -> None:
        if n % batch_size:
            raise ValueError(f"{n} envs do not split into children of {batch_size}")
        self._env, self._n, self._k = env, n, batch_size
        observation_space, action_space = _spaces(env)
        self._shape, self._dtype, size = _layout(observation_space, batch_size)
        _, self._action_dtype = _action_layout(action_space)
        self._buffer = bytearray(size)
        self._sockets: list[socket.socket] = []
        self._processes: list[Any] = []
        self._ready: list[socket.socket] = []  # answered, in the order select saw them
        self._first_env: dict[socket.socket, int] = {}  # each child's first env
        self._never_cut = np.zeros(batch_size, np.bool_)  # an end is reported as terminated

    def async_reset(self, *, seed: int) -> None:
        """Start the children: each answers its envs' first reset unasked."""
        seeds = aioenv.worker_seeds(seed, self._n)
        context: Any = default_context()  # typeshed lacks Process on BaseContext
        try:
            for first in range(0, self._n, self._k):
                group = seeds[first : first + self._k]
                parent_end, process = _start_child(context, self._env, group, next_step=True)
                self._sockets.append(parent_end)
                self._first_env[parent_end] = first
                self._processes.append(process)
        except BaseException:
            self.close()
            raise

    def recv(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """The whole answer of the first child ready."""
        if not self._ready:
            self._ready, _, _ = select.select(self._sockets, [], [])
        sock = self._ready.pop(0)
        k = self._k
        observations, rewards, dones = _receive(sock, self._buffer, self._shape, self._dtype, k)
        first = self._first_env[sock]
        env_ids = np.arange(first, first + k)
        return (
            observations.copy(),
            rewards.copy(),
            dones.copy(),
            self._never_cut,
            {"env_id": env_ids},
        )

    def send(self, actions: Any, env_ids: Any) -> None:
        """Write the child of ``env_ids`` (one child's envs, in order) their actions."""
        sock = self._sockets[int(env_ids[0]) // self._k]
        sock.sendall(np.asarray(actions, self._action_dtype).tobytes())

    def close(self) -> None:
        _stop(self._sockets, self._processes)


def _engine_child(
    sock: socket.socket, env: EnvFactory, seeds: list[int | None], first: int, n: int, spin: float
) -> None:
    """Step envs ``first`` to ``first + len(seeds)`` of the bare engine's ``n`` in the
    shared buffer on each post of its request wake, and post the answer wake. The
    descriptors (the buffer's, the request's, the answer's) come over ``sock``; the parent
    closing it is the signal to exit. Episodes reset inside the step."""
    envs = [env() for _ in seeds]
    _, fds, _, _ = socket.recv_fds(sock, 1, 5)
    buffer = StepBuffer(envs[0].observation_space, envs[0].action_space, n, fds[0])
    width = (len(fds) - 1) // 2  # each wake's descriptors: an eventfd, or a pipe's ends
    request = Wake.from_descriptors(fds[1 : 1 + width])
    answer = Wake.from_descriptors(fds[1 + width :])
    observations, actions = buffer.observations, buffer.actions
    rewards, terminated, truncated = buffer.rewards, buffer.terminated, buffer.truncated
    rows = range(first, first + len(envs))
    for row, instance, seed in zip(rows, envs, seeds, strict=True):
        observations[row] = instance.reset(seed=seed)[0]
    answer.post()
    waiting = IdleSpin(spin, 0)
    with sock:
        while True:
            try:
                request.wait(watch=[sock.fileno()], spin=waiting)
            except Gone:
                return
            for row, instance in zip(rows, envs, strict=True):
                action = actions[row]
                observation, reward, ended, cut, _ = instance.step(
                    action.item() if action.ndim == 0 else action
                )
                if ended or cut:
                    observation, _ = instance.reset()
                observations[row] = observation
                rewards[row], terminated[row], truncated[row] = reward, ended, cut
            answer.post()


class BareEngine:
    """The lockstep design over the engine's buffer and wakes (see the module's docstring):
    a child per core (fewer where ``n`` is smaller), as :class:`BareLockstep`'s, each
    stepping its rows of one shared buffer, spinning for ``spin`` seconds before it sleeps
    while the idle-spin rule says spinning pays. A step writes the actions into the
    buffer, posts each child's request wake, sleeps on the answer wake until every child
    has posted, and returns a copy of the results. It owes nothing else a vector env
    does."""

    def __init__(self, env: EnvFactory, n: int, seed: int, spin: float = ENGINE_SPIN) -> None:
        children = min(n, len(os.sched_getaffinity(0)))
        bounds = [n * index // children for index in range(children + 1)]
        seeds = aioenv.worker_seeds(seed, n)
        observation_space, action_space = _spaces(env)
        self._buffer = StepBuffer(observation_space, action_space, n)
        self._answer = Wake.new()
        self._requests: list[Wake] = []
        self._sockets: list[socket.socket] = []
        self._processes: list[Any] = []
        context: Any = default_context()  # typeshed lacks Process on BaseContext
        try:
            for first, last in itertools.pairwise(bounds):
                ours, theirs = socket.socketpair()
                self._sockets.append(ours)
                with theirs:
                    process = context.Process(
                        target=_engine_child,
                        args=(theirs, env, seeds[first:last], first, n, spin),
                        daemon=True,
                    )
                    process.start()
                self._processes.append(process)
                request = Wake.new()
                self._requests.append(request)
                fds = [self._buffer.fd, *request.descriptors(), *self._answer.descriptors()]
                socket.send_fds(ours, [b"\0"], fds)
            self._watch = [process.sentinel for process in self._processes]
            self._wait_answers()
        except BaseException:
            self.close()
            raise

    def _wait_answers(self) -> None:
        answered = 0
        while answered < len(self._requests):
            answered += self._answer.wait(watch=self._watch)

    def reset(self, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        return copy_arrays(self._buffer.observations), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        buffer = self._buffer
        buffer.actions[...] = actions
        for request in self._requests:
            request.post()
        self._wait_answers()
        return (
            copy_arrays(buffer.observations),
            buffer.rewards.copy(),
            buffer.terminated.copy(),
            buffer.truncated.copy(),
            {},
        )

    def close(self) -> None:
        _stop(self._sockets, self._processes)
        for wake in (*self._requests, self._answer):
            wake.close()
        self._buffer.close()


async def _measure_engine(
    env: EnvFactory, n: int, policy: Policy, seed: int, timing: Timing, account: CpuAccount
) -> Sample:
    loop = asyncio.get_running_loop()
    observation_space, action_space = _spaces(env)
    buffer = StepBuffer(observation_space, action_space, n)
    observations, actions = buffer.observations, buffer.actions
    seeds = aioenv.worker_seeds(seed, n)
    context: Any = default_context()  # typeshed lacks Process on BaseContext
    started = time.perf_counter()
    requests: list[Wake] = []
    answers: list[Wake] = []
    sockets: list[socket.socket] = []
    processes: list[Any] = []
    finished: asyncio.Future[None] = loop.create_future()  # the window closed, or a failure
    unanswered = set(range(n))  # the children whose first reset has not come yet
    all_reset = asyncio.Event()
    meter: Meter | None = None

    def on_answer(row: int) -> None:
        try:
            answers[row].take()
        except BlockingIOError:
            return
        except Gone:
            if not finished.done():
                finished.set_exception(ConnectionError("a bare engine child exited"))
            return
        if meter is None:
            unanswered.discard(row)
            if not unanswered:
                all_reset.set()
            return
        if finished.done():
            return
        if not meter.running():
            finished.set_result(None)
            return
        meter.count += 1
        act(row)

    def act(row: int) -> None:
        observation = observations[row].copy()  # a pool hands out copies
        actions[row] = policy.one(observation)
        requests[row].post()

    try:
        for row in range(n):
            ours, theirs = socket.socketpair()
            sockets.append(ours)
            request, answer = Wake.new(), Wake.new()
            requests.append(request)
            answers.append(answer)
            with theirs:
                process = context.Process(
                    target=_engine_child,
                    args=(theirs, env, seeds[row : row + 1], row, n, 0.0),
                    daemon=True,
                )
                process.start()
            processes.append(process)
            socket.send_fds(
                ours, [b"\0"], [buffer.fd, *request.descriptors(), *answer.descriptors()]
            )
            loop.add_reader(answer.descriptors()[0], on_answer, row)
        build_s = await _all_reset(all_reset, finished, started)
        meter = Meter(timing, account)
        for row in range(n):
            act(row)
        await finished
    finally:
        for answer in answers:
            loop.remove_reader(answer.descriptors()[0])
        _stop(sockets, processes)
        for wake in (*requests, *answers):
            wake.close()
        buffer.close()
    return meter.sample(build_s)

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
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from envs import EnvFactory, Policy
from machine import CpuAccount
from runners import Meter, Sample, Timing, run_coroutine

import aioenv
from aioenv.workers import default_context

__all__ = ["run_bare"]

_JOIN_TIMEOUT = 5.0


def _layout(env: EnvFactory, k: int) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """Observation shape and dtype, and the size of one answer for ``k`` envs."""
    probe = env()
    space = probe.observation_space
    probe.close()
    shape = tuple(space.shape or ())
    dtype = np.dtype(space.dtype)
    observation_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return shape, dtype, k * (observation_bytes + 8 + 1)


def _child(sock: socket.socket, env: EnvFactory, seeds: list[int]) -> None:
    sock.setblocking(True)
    envs = [env() for _ in seeds]
    k = len(envs)
    shape, dtype, _ = _layout(env, k)
    observations = np.empty((k, *shape), dtype)
    rewards = np.zeros(k, np.float64)
    dones = np.zeros(k, np.bool_)
    for row, (instance, seed) in enumerate(zip(envs, seeds, strict=True)):
        observations[row] = instance.reset(seed=seed)[0]
    actions = bytearray(8 * k)
    with sock, contextlib.suppress(ConnectionError):  # the parent closed its end
        while True:
            sock.sendall(observations.tobytes() + rewards.tobytes() + dones.tobytes())
            if sock.recv_into(actions, len(actions), socket.MSG_WAITALL) < len(actions):
                return
            for row, action in enumerate(np.frombuffer(actions, np.int64).tolist()):
                instance = envs[row]
                observation, reward, terminated, truncated, _ = instance.step(action)
                if terminated or truncated:
                    observation, _ = instance.reset()
                observations[row] = observation
                rewards[row] = reward
                dones[row] = terminated or truncated


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
) -> Sample:
    """Measure the bare design with ``n`` envs, ``envs_per_process`` per child."""
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
        for first in range(0, n, per_process):
            group = seeds[first : first + per_process]
            shape, dtype, size = _layout(env, len(group))
            parent_end, child_end = socket.socketpair()
            process = context.Process(target=_child, args=(child_end, env, group), daemon=True)
            process.start()
            child_end.close()
            processes.append(process)
            children.append(_Child(loop, parent_end, shape, dtype, len(group), size, finished))
            children[-1].on_answer = on_reset
        waiting = asyncio.ensure_future(all_reset.wait())
        await asyncio.wait([waiting, finished], return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if finished.done():
            finished.result()  # a child failed before its reset: raise why
        build_s = time.perf_counter() - started
        meter = Meter(timing, account)
        for child in children:
            child.on_answer = on_step
        for child, observations in resets:
            child.act(policy.many(observations))
        await finished
    finally:
        for child in children:
            child.close()
            child.sock.close()  # the child reads end-of-file and exits
        for process in processes:
            process.join(_JOIN_TIMEOUT)
            if process.exitcode is None:
                process.kill()
                process.join()
    return meter.sample(build_s)

"""Where a step's time goes, from the CPU times in ``/proc`` (Linux).

Two measurements behind the README's account of the lockstep loop:

- ``lockstep``: the W6 loop (a numpy MLP between ``envs.step`` calls) over
  ``SyncVectorEnv`` and ``AioVectorEnv`` (default, and ``idle_spin=0``): wall time per
  vector step, and the CPU the script and its children (all descendants) spent per step.
- ``parent``: a ``pool.get_state()`` loop over process workers stepping ``k`` CartPoles
  each (the batch path): the parent's CPU per env step, user and user + kernel, with and
  without ``idle_spin``; and the same for the bare reference's parent (bare.py).
- ``child``: in one process, no IPC: 8 and 16 CartPoles stepped through aioenv's env side
  (the runner a child runs, plus encoding its reply), through the bare reference's child
  loop, and by ``SyncVectorEnv.step``.
- ``stages``: which side bounds W1's batch row (2 process workers of 8 CartPoles, the
  benchmark's policy, ``pool.get_state()`` first-ready): its rate as is, with 20 µs of
  busy work added per message in the parent, and with the same added in each child
  (2.5 µs per env step), interleaved over rounds. The side whose extra work costs the
  most throughput is the serial stage.

- ``loop``: what the parent's event loop costs a lockstep step: ``AioVectorEnv`` over 8
  envs in 2 children of 4 (``mode="process"``), stepped as usual, and the same vector
  env with its exchange replaced by a blocking one that writes each child its actions and
  reads the replies straight from the children's sockets (no event loop, and none of the
  pool's supervision: no deadlines, deaths or sequence checks). The children and the
  batching are aioenv's own in both, so the difference is the most a lockstep path
  without the event loop could save. ``SyncVectorEnv`` runs in the same rounds; random
  actions, or with ``--policy mlp`` W11's and W12's MLP between steps; ``--env`` picks the
  env (``pong`` needs the ``bench`` extra).

Run::

    python benchmarks/cpu_split.py [lockstep|parent|child|stages|loop] [--seconds 3]
        [--env pong|half_cheetah|cartpole] [--policy random|mlp]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import select
import socket
import statistics
import time
from typing import Any

import gymnasium
import numpy as np
from envs import cartpole_policy
from policies import Mlp
from threadpoolctl import threadpool_limits

import aioenv

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> tuple[float, float]:
    """(user, user + kernel) CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICK, (int(fields[11]) + int(fields[12])) / _TICK


def _descendants() -> list[int]:
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    parents[int(name)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    found: list[int] = []
    frontier = [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def lockstep(n: int, seconds: float, **options: Any) -> None:
    if options.pop("sync", False):
        vector: Any = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * n)
        label = "SyncVectorEnv"
    else:
        vector = aioenv.AioVectorEnv("CartPole-v1", n, **options)
        label = f"AioVectorEnv {options or '(default)'}"
    policy = Mlp(0)
    observations, _ = vector.reset(seed=0)
    for _ in range(100):
        observations, *_ = vector.step(policy(observations))
    children = _descendants()
    parent_before = _cpu(os.getpid())[1]
    children_before = sum(_cpu(pid)[1] for pid in children)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        observations, *_ = vector.step(policy(observations))
        steps += 1
    wall = time.perf_counter() - started
    parent = _cpu(os.getpid())[1] - parent_before
    child = sum(_cpu(pid)[1] for pid in children) - children_before
    vector.close()
    print(
        f"N={n:2d} {label}: {steps * n / wall:8,.0f} steps/s; per vector step "
        f"{1e6 * wall / steps:5.0f} µs, script CPU {1e6 * parent / steps:4.0f} µs, "
        f"children CPU {1e6 * child / steps:4.0f} µs"
    )


async def parent(k: int, workers: int, seconds: float, idle_spin: float) -> None:
    async with aioenv.make_pool(
        "CartPole-v1",
        workers,
        mode="process",
        autoreset="next_step",
        seed=1,
        envs_per_worker=k,
        idle_spin=idle_spin,
    ) as pool:
        act = cartpole_policy.many
        for batch, worker_id in await pool.reset_all():
            pool.send_action(act(batch.observations), worker_id)
        steps = 0
        user_before, total_before = _cpu(os.getpid())
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            batch, worker_id = await pool.get_state()
            pool.send_action(act(batch.observations), worker_id)
            steps += k
        wall = time.perf_counter() - started
        user, total = (
            after - before
            for after, before in zip(_cpu(os.getpid()), (user_before, total_before), strict=True)
        )
        await pool.drain()
    print(
        f"{workers} worker(s) x {k} envs, idle_spin={idle_spin}: {steps / wall:8,.0f} steps/s; "
        f"parent CPU per env step {1e6 * user / steps:4.1f} µs user, "
        f"{1e6 * total / steps:4.1f} µs user + kernel"
    )


def child(n: int, seconds: float) -> None:
    """A child's work for one step of ``n`` CartPoles, no IPC: aioenv's env side (the
    runner, plus encoding the reply), the bare reference's child loop (bare.py: step,
    reset on done, write the rows, one buffer), and ``SyncVectorEnv.step``; the same
    policy, interleaved in short rounds (the machine's noise drifts over seconds)."""
    from aioenv.core._environment import VectorSource
    from aioenv.core._messages import EpisodeOptions
    from aioenv.env_side._vector_runner import VectorRunner
    from aioenv.wire._frames import encode_batch_step

    act = cartpole_policy.many
    runner = VectorRunner(
        VectorSource(("CartPole-v1",) * n), 0, EpisodeOptions(autoreset="next_step")
    )
    sync = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * n)
    envs = [gymnasium.make("CartPole-v1") for _ in range(n)]
    last = {"aioenv": runner.reset().observations, "sync": sync.reset(seed=0)[0]}
    rows = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    rewards, dones = np.zeros(n), np.zeros(n, np.bool_)

    def env_side() -> None:
        batch = runner.handle(act(last["aioenv"]))
        encode_batch_step(1, batch, 0, None)
        last["aioenv"] = batch.observations

    def bare() -> None:
        for row, action in enumerate(act(rows).tolist()):
            env = envs[row]
            observation, reward, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                observation, _ = env.reset()
            rows[row], rewards[row], dones[row] = observation, reward, terminated or truncated
        rows.tobytes() + rewards.tobytes() + dones.tobytes()

    def in_process() -> None:
        last["sync"] = sync.step(act(last["sync"]))[0]

    variants = {
        "aioenv env side + encode": env_side,
        "bare reference's child loop": bare,
        "SyncVectorEnv.step": in_process,
    }
    per_env: dict[str, list[float]] = {label: [] for label in variants}
    calls = 200
    deadline = time.perf_counter() + seconds * len(variants)
    while time.perf_counter() < deadline:
        for label, step in variants.items():
            started = time.perf_counter()
            for _ in range(calls):
                step()
            per_env[label].append(1e6 * (time.perf_counter() - started) / calls / n)
    for label, values in per_env.items():
        values.sort()
        print(
            f"N={n} {label}: {values[0]:5.2f} µs per env step (fastest of {len(values)} "
            f"rounds), median {values[len(values) // 2]:5.2f}"
        )
    runner.close()
    sync.close()


async def bare_parent(k: int, workers: int, seconds: float) -> None:
    """The bare reference's parent (bare.py) in the same loop as :func:`parent`: one
    answer awaited at a time (a queue fed by the reader callbacks), the same policy."""
    from bare import _Child, _child, _layout

    loop = asyncio.get_running_loop()
    answers: asyncio.Queue[tuple[_Child, np.ndarray[Any, Any]]] = asyncio.Queue()
    failed: asyncio.Future[None] = loop.create_future()
    context: Any = aioenv.workers.default_context()
    seeds = aioenv.worker_seeds(1, k * workers)
    factory = functools.partial(gymnasium.make, "CartPole-v1")
    processes, children = [], []
    try:
        for first in range(0, k * workers, k):
            shape, dtype, size = _layout(factory, k)
            ours, theirs = socket.socketpair()
            seeds_here = seeds[first : first + k]
            process = context.Process(target=_child, args=(theirs, factory, seeds_here))
            process.start()
            theirs.close()
            processes.append(process)
            children.append(_Child(loop, ours, shape, dtype, k, size, failed))
            children[-1].on_answer = lambda child, rows: answers.put_nowait((child, rows))
        act = cartpole_policy.many
        steps, started = 0, 0.0
        while True:
            child, rows = await answers.get()
            child.act(act(rows))
            if not started:
                started, user_before, total_before = time.perf_counter(), *_cpu(os.getpid())
            elif time.perf_counter() - started > seconds:
                break
            steps += k
        wall = time.perf_counter() - started
        user, total = (
            after - before
            for after, before in zip(_cpu(os.getpid()), (user_before, total_before), strict=True)
        )
    finally:
        for child in children:
            child.close()
            child.sock.close()
        for process in processes:
            process.join(5)
    print(
        f"{workers} bare child(ren) x {k} envs: {steps / wall:8,.0f} steps/s; "
        f"parent CPU per env step {1e6 * user / steps:4.1f} µs user, "
        f"{1e6 * total / steps:4.1f} µs user + kernel"
    )


def _spin(seconds: float) -> None:
    """Busy work: the CPU for ``seconds``, like Python code that takes that long."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class _BusyCartPole:
    """CartPole-v1 whose every step first spins ``seconds`` (work added to the child)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self) -> gymnasium.Env[Any, Any]:
        seconds = self.seconds

        class Busy(gymnasium.Wrapper[Any, Any, Any, Any]):
            def step(self, action: Any) -> Any:
                _spin(seconds)
                return self.env.step(action)

        return Busy(gymnasium.make("CartPole-v1"))


async def _stage_rate(seconds: float, parent_extra: float, child_extra: float) -> float:
    k = 8
    async with aioenv.make_pool(
        _BusyCartPole(child_extra / k),
        2,
        mode="process",
        autoreset="next_step",
        seed=1,
        envs_per_worker=k,
    ) as pool:
        act = cartpole_policy.many
        for batch, worker_id in await pool.reset_all():
            pool.send_action(act(batch.observations), worker_id)
        warm_until = time.perf_counter() + 0.5
        while time.perf_counter() < warm_until:
            batch, worker_id = await pool.get_state()
            pool.send_action(act(batch.observations), worker_id)
        messages, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            batch, worker_id = await pool.get_state()
            if parent_extra:
                _spin(parent_extra)
            pool.send_action(act(batch.observations), worker_id)
            messages += 1
        rate = messages * k / (time.perf_counter() - started)
        await pool.drain()
    return rate


def stages(seconds: float, extra: float = 20e-6, rounds: int = 3) -> None:
    cases = {
        "as is": (0.0, 0.0),
        "parent +20 µs/msg": (extra, 0.0),
        "child +20 µs/msg": (0.0, extra),
    }
    rates: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(rounds):
        for label, (parent_extra, child_extra) in cases.items():
            rates[label].append(aioenv.run(_stage_rate(seconds, parent_extra, child_extra)))
    base = sorted(rates["as is"])[rounds // 2]
    for label, values in rates.items():
        median = sorted(values)[rounds // 2]
        print(
            f"W1 batch row, 2 workers x 8 CartPoles, {label}: {median:8,.0f} steps/s "
            f"(median of {rounds}; {median / base:.2f}x as is)"
        )


class _LoopFree:
    """The exchange of a vector env's ``Runtime`` (a process pool), done without its event
    loop: each worker's action frame written to its child, then every reply read from the
    children's sockets with a blocking ``poll`` and decoded as the worker would. For
    measurement only: the pool sees none of these steps, so ``restore`` must run before
    the vector env is used as usual again (or closed)."""

    def __init__(self, vector: aioenv.AioVectorEnv) -> None:
        from aioenv.wire._frames import FrameDecoder

        runtime: Any = vector._envs
        self._runtime = runtime
        self._loop = runtime.loop._loop
        self._workers = runtime.pool.workers
        self._hosts = [worker._host for worker in self._workers]
        self._poll = select.poll()
        self._by_fd: dict[int, int] = {}
        for index, host in enumerate(self._hosts):
            fd = host._socket.fileno()
            self._loop.remove_reader(fd)
            self._poll.register(fd, select.POLLIN)
            self._by_fd[fd] = index
        self._decoders = [FrameDecoder() for _ in self._hosts]
        self._buffer = bytearray(1 << 20)
        self._seq = 1 << 30  # above any the workers use: their replies, if late, are stale
        runtime.exchange = self.exchange

    def exchange(self, ids: list[int], actions: list[Any]) -> tuple[list[Any], list[Any]]:
        from aioenv.wire._frames import decode_reply, encode_array_action

        self._seq += 1
        for worker_id, action in zip(ids, actions, strict=True):
            frame = encode_array_action(
                self._seq, np.asarray(action), self._workers[worker_id]._slot
            )
            self._hosts[worker_id]._socket.send(frame)
        view = memoryview(self._buffer)
        states: dict[int, Any] = {}
        while len(states) < len(ids):
            for fd, _ in self._poll.poll():
                index = self._by_fd[fd]
                count = self._hosts[index]._socket.recv_into(self._buffer)
                for kind, _, _, payload in self._decoders[index].feed(view[:count]):
                    states[index] = decode_reply(kind, payload, self._workers[index]._shared)[0]
        return [states[worker_id] for worker_id in ids], []

    def restore(self) -> None:
        del self._runtime.exchange  # the class's own again
        for host in self._hosts:
            self._loop.add_reader(host._socket.fileno(), host._on_readable)


def _step_time(vector: Any, seconds: float, policy: Any = None) -> float:
    """Seconds per vector step after 100 steps of warm-up: seeded random actions, or
    ``policy(observations)`` (W11's and W12's MLP) computed between steps."""
    vector.action_space.seed(0)
    actions = [vector.action_space.sample() for _ in range(64)]
    observations = vector.step(actions[0])[0]  # reset by the caller
    for step in range(100):
        action = actions[step % 64] if policy is None else policy(observations)
        observations = vector.step(action)[0]
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        action = actions[steps % 64] if policy is None else policy(observations)
        observations = vector.step(action)[0]
        steps += 1
    return (time.perf_counter() - started) / steps


@threadpool_limits.wrap(limits=1, user_api="blas")  # as W11 and W12 run their policy
def loop(env_name: str, seconds: float, policy_name: str, rounds: int = 4) -> None:
    import envs
    from workloads import CHEETAH_POLICY, PONG_POLICY

    env = {"pong": envs.pong, "half_cheetah": envs.half_cheetah, "cartpole": envs.cartpole}[
        env_name
    ]()
    policy = None
    if policy_name == "mlp":
        policy = {
            "pong": PONG_POLICY(0),
            "half_cheetah": CHEETAH_POLICY(0),
            "cartpole": Mlp(0),
        }[env_name]
    n = 8
    labels = ("the engine (default)", "a pool, as is", "a pool, without the loop")
    times: dict[str, list[float]] = {"SyncVectorEnv": [], **{label: [] for label in labels}}
    for _ in range(rounds):
        sync = gymnasium.vector.SyncVectorEnv([env] * n)
        sync.reset(seed=0)
        times["SyncVectorEnv"].append(_step_time(sync, seconds, policy))
        sync.close()
        for label in labels:
            # A deadline far away keeps the envs on a pool of process workers.
            pooled = {} if label == labels[0] else {"step_timeout": 3600.0}
            vector = aioenv.AioVectorEnv(env, n, mode="process", envs_per_worker=n // 2, **pooled)
            vector.reset(seed=0)
            direct = _LoopFree(vector) if label == labels[2] else None
            try:
                times[label].append(_step_time(vector, seconds, policy))
            finally:
                if direct is not None:
                    direct.restore()
                vector.close()
    sync_s = statistics.median(times["SyncVectorEnv"])
    for label, values in times.items():
        median = statistics.median(values)
        spread = ", ".join(f"{sync_s / value:.2f}x" for value in values)
        print(
            f"{env_name} N={n}, {policy_name} actions, 2 children of 4 unless Sync, {label}: "
            f"{1e6 * median:6,.0f} µs a step (median of {rounds}), {sync_s / median:.2f}x "
            f"SyncVectorEnv (rounds: {spread})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "what",
        nargs="?",
        default="lockstep",
        choices=("lockstep", "parent", "child", "stages", "loop"),
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--env", default="pong", choices=("pong", "half_cheetah", "cartpole"))
    parser.add_argument(
        "--policy",
        default="random",
        choices=("random", "mlp"),
        help="loop: random actions, or W11's and W12's MLP between steps",
    )
    args = parser.parse_args()
    if args.what == "loop":
        loop(args.env, args.seconds, args.policy)
        return
    if args.what == "lockstep":
        for n in (4, 16):
            lockstep(n, args.seconds, sync=True)
            lockstep(n, args.seconds)
            lockstep(n, args.seconds, idle_spin=0.0)
    elif args.what == "child":
        for n in (8, 16):
            child(n, args.seconds)
    elif args.what == "stages":
        stages(args.seconds)
    else:
        for k, workers in ((8, 2), (16, 1)):
            for spin in (0.0, 0.0005):
                aioenv.run(parent(k, workers, args.seconds, spin))
            aioenv.run(bare_parent(k, workers, args.seconds))


if __name__ == "__main__":
    main()

"""Where a step's time goes, from the CPU times in ``/proc`` (Linux).

Two measurements behind the README's account of the lockstep loop:

- ``lockstep``: the W6 loop (a numpy MLP between ``envs.step`` calls) over
  ``SyncVectorEnv`` and ``AioVectorEnv`` (default, and ``idle_spin=0``): wall time per
  vector step, and the CPU the script and its children (all descendants) spent per step.
- ``parent``: a ``pool.get_state()`` loop over process workers stepping ``k`` CartPoles
  each (the batch path): the parent's CPU per env step, user and user + kernel, with and
  without ``idle_spin``.
- ``child``: in one process, no IPC: 16 CartPoles stepped through aioenv's env side (the
  runner a child runs, plus encoding its reply) against ``SyncVectorEnv.step``.

Run::

    python benchmarks/cpu_split.py [lockstep|parent|child] [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import gymnasium
import numpy as np
from lockstep import Mlp

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
        actions = np.zeros(k, np.int64)
        for _, worker_id in await pool.reset_all():
            pool.send_action(actions, worker_id)
        steps = 0
        user_before, total_before = _cpu(os.getpid())
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            _, worker_id = await pool.get_state()
            pool.send_action(actions, worker_id)
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
    from aioenv._environment import VectorSource
    from aioenv._messages import EpisodeOptions
    from aioenv._protocol import encode_batch_step
    from aioenv._vector_runner import VectorRunner

    runner = VectorRunner(
        VectorSource(("CartPole-v1",) * n), 0, EpisodeOptions(autoreset="next_step")
    )
    runner.reset()
    sync = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * n)
    sync.reset(seed=0)
    actions = np.zeros(n, np.int64)

    def env_side() -> None:
        encode_batch_step(1, runner.handle(actions), 0, None)

    def in_process() -> None:
        sync.step(actions)

    for label, step in (("aioenv env side + encode", env_side), ("SyncVectorEnv", in_process)):
        steps, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            step()
            steps += 1
        print(f"N={n} {label}: {1e6 * (time.perf_counter() - started) / steps:.0f} µs per step")
    runner.close()
    sync.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "what", nargs="?", default="lockstep", choices=("lockstep", "parent", "child")
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if args.what == "lockstep":
        for n in (4, 16):
            lockstep(n, args.seconds, sync=True)
            lockstep(n, args.seconds)
            lockstep(n, args.seconds, idle_spin=0.0)
    elif args.what == "child":
        child(16, args.seconds)
    else:
        for k, workers in ((8, 2), (16, 1)):
            for spin in (0.0, 0.0005):
                aioenv.run(parent(k, workers, args.seconds, spin))


if __name__ == "__main__":
    main()

"""How far this machine's cores scale env steps, with nothing between the processes.

``k`` processes (k = 1, 2, 4, ... up to the cores this process may use) each step their
own ``--per-child`` copies of an env with seeded random actions, for the same window after
a common start, and count their steps. No process talks to another while it steps, so for
each ``k`` the rate of all of them together bounds any vector env over ``k`` processes on
this machine, whatever its transport (a lockstep one also waits for the slowest process
at every step). Its ratio to one process's rate shows what the cores give together
(shared caches, memory bandwidth, cores that share a physical one, clock limits), against
the ``cores`` that the computed machine limit of ``run.py`` assumes.

Run::

    python benchmarks/cores.py [--env pong|half_cheetah|cartpole] [--per-child 2] [--seconds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

import envs
from machine import git_state, host_info

from aioenv.workers import default_context

WARMUP_S = 0.5


def _count_steps(
    env_name: str,
    per_child: int,
    seconds: float,
    seed: int,
    start: Barrier,
    out: Queue[tuple[int, float]],
) -> None:
    """One process: step one of each of its envs at a time, from ``start`` for a warm-up
    and ``seconds`` more; puts the env steps of the rounds begun after the warm-up, and
    the time those rounds took (s)."""
    factory = getattr(envs, env_name)()
    batch = [factory() for _ in range(per_child)]
    for index, env in enumerate(batch):
        env.reset(seed=seed * 1_000 + index)
        env.action_space.seed(seed * 1_000 + index)
    start.wait()
    counting = time.perf_counter() + WARMUP_S
    steps, counted_s, now = 0, 0.0, time.perf_counter()
    while now < counting + seconds:
        begun = now
        for env in batch:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        now = time.perf_counter()
        if begun >= counting:
            steps += per_child
            counted_s += now - begun
    for env in batch:
        env.close()
    out.put((steps, counted_s))


def measure(env_name: str, k: int, per_child: int, seconds: float) -> float:
    """The env steps per second of ``k`` processes together."""
    context = default_context()
    start = context.Barrier(k)
    out: Queue[tuple[int, float]] = context.Queue()
    children = [
        context.Process(target=_count_steps, args=(env_name, per_child, seconds, seed, start, out))
        for seed in range(k)
    ]
    for child in children:
        child.start()
    try:
        counted = [out.get(timeout=120 + 4 * seconds) for _ in children]
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
                child.join()
    return sum(steps / elapsed for steps, elapsed in counted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="pong", choices=("pong", "half_cheetah", "cartpole"))
    parser.add_argument("--per-child", type=int, default=2, help="envs each process steps")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument(
        "--counts", help="comma-separated k (default 1, 2, 4, ... cores; 1 is always measured)"
    )
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    if args.counts:
        counts = sorted({1, *(int(part) for part in args.counts.split(","))})
    else:
        counts = [1 << power for power in range(cores.bit_length()) if 1 << power <= cores]
        counts += [] if counts[-1] == cores else [cores]
    info = host_info()
    print(
        f"{info['cpus_usable']} cores ({info['cpu_model']}), {info['platform']}, Python "
        f"{info['python']}; aioenv at {git_state(os.path.dirname(__file__) + '/..')['commit']}; "
        f"env {args.env}, {args.per_child} per process, {args.seconds:g} s windows"
    )
    one: float | None = None
    print(f"{'k':>3} {'N':>4}  {'env steps/s':>12} {'x one':>6}")
    for k in counts:
        rate = measure(args.env, k, args.per_child, args.seconds)
        one = one or rate
        print(f"{k:>3} {k * args.per_child:>4}  {rate:>12,.0f} {rate / one:>6.2f}")


if __name__ == "__main__":
    multiprocessing.freeze_support()
    main()

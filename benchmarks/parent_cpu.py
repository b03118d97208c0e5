"""The parent's CPU time per step, the figure beside the Python-call counts of
``step_trace.py``: ``time.thread_time`` of the calling thread over a fixed number of steps
after a warm-up, for the configurations the counts are taken in, the median over
repetitions. CPU time, not a rate: a busy machine moves it far less, so two versions of
aioenv can be compared on one (run the script against each in turn, ``PYTHONPATH``
pointing at each version's tree). Threads aioenv starts are counted too where the
configuration has any (thread workers; the process workers' start-up threads are idle in
the window). Run::

    python benchmarks/parent_cpu.py [--steps 4000] [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable

import numpy as np

import aioenv

ENV = "CartPole-v1"


def vector(mode: str, steps: int, **options: int) -> float:
    """Seconds of the calling thread's CPU per lockstep step of 8 envs."""
    with aioenv.AioVectorEnv(ENV, 8, mode=mode, **options) as envs:
        envs.reset(seed=0)
        actions = np.zeros(8, np.int64)
        for _ in range(200):
            envs.step(actions)
        started = time.thread_time()
        for _ in range(steps):
            envs.step(actions)
        return (time.thread_time() - started) / steps


def pool(kind: str, steps: int) -> float:
    """Seconds of the event loop thread's CPU per state of a pool of 8 workers."""

    async def run() -> float:
        async with aioenv.make_pool(ENV, 8, mode=kind, seed=0) as workers:
            workers.reset()
            seen = 0
            started = 0.0
            async for step, worker_id in workers:
                seen += 1
                if seen == 400:
                    started = time.thread_time()
                if seen == 400 + steps:
                    return (time.thread_time() - started) / steps
                workers.send_action(aioenv.RESET if step.done else 0, worker_id)
        raise AssertionError("the pool stopped handing out states")

    return asyncio.run(run())


CONFIGURATIONS: dict[str, Callable[[int], float]] = {
    "vector lockstep, process, 2 children of 4": lambda steps: vector(
        "process", steps, envs_per_worker=4
    ),
    "vector inline, N=8": lambda steps: vector("inline", steps),
    "pool state, 8 process workers": lambda steps: pool("process", steps),
    "pool state, 8 coroutine workers": lambda steps: pool("coroutine", steps),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    for label, measure in CONFIGURATIONS.items():
        samples = [measure(args.steps) for _ in range(args.reps)]
        low, high = min(samples) * 1e6, max(samples) * 1e6
        median = statistics.median(samples) * 1e6
        print(f"{label}: {median:.1f} us per step (range {low:.1f}-{high:.1f})")


if __name__ == "__main__":
    main()

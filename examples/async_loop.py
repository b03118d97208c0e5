"""A real async training-style loop over CartPole-v1 with a mixed thread + process pool.

Acts on whichever env is ready first, resets finished episodes, and prints episodes
finished and steps per second. Run with ``make demo`` or ``python examples/async_loop.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

import aioenv


def policy(observation: np.ndarray[Any, Any]) -> int:
    """Push the cart the way the pole is falling (keeps CartPole up for a while)."""
    angle, angular_velocity = observation[2], observation[3]
    return int(angle + 0.5 * angular_velocity > 0)


async def main(num_threads: int, num_processes: int, seconds: float, seed: int) -> None:
    modes = ["thread"] * num_threads + ["process"] * num_processes
    started = time.perf_counter()
    async with aioenv.make_pool("CartPole-v1", len(modes), mode=modes, seed=seed) as pool:
        print(
            f"{len(pool)} workers ({num_threads} thread, {num_processes} process) "
            f"started in {time.perf_counter() - started:.2f} s"
        )
        steps = episodes = 0
        returns: list[float] = []
        episode_return = np.zeros(len(pool))
        pool.reset()
        started = time.perf_counter()
        deadline = started + seconds
        async for step, worker_id in pool:
            steps += 1
            episode_return[worker_id] += step.reward
            if step.done:
                episodes += 1
                returns.append(float(episode_return[worker_id]))
                episode_return[worker_id] = 0.0
            if time.perf_counter() >= deadline:
                continue  # stop sending: the loop ends once every in-flight state is taken
            pool.send_action(aioenv.RESET if step.done else policy(step.observation), worker_id)
        elapsed = time.perf_counter() - started
    mean_return = float(np.mean(returns)) if returns else float("nan")
    print(
        f"{steps} steps, {episodes} episodes finished (mean return {mean_return:.1f}) "
        f"in {elapsed:.2f} s: {steps / elapsed:,.0f} steps/s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2, help="thread workers (default 2)")
    parser.add_argument("--processes", type=int, default=4, help="process workers (default 4)")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to run (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        import uvloop

        run = uvloop.run
    except ImportError:  # uvloop is not available on Windows
        run = asyncio.run
    run(main(args.threads, args.processes, args.seconds, args.seed))

"""CartPole on Ray actors next to local workers, in one pool.

Four envs run in two Ray actors (two envs each, one actor call carries both envs' actions)
and two in a local process worker and a thread worker; the pool hands out whichever state
is ready first, whatever runs it. New weights go to every env with one ``set_attr``: Ray
workers share one copy in the object store.

    python examples/ray_pool.py                      # starts a local Ray instance
    RAY_ADDRESS=auto python examples/ray_pool.py     # or joins a running cluster

Needs ``pip install 'aioenv[ray]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

import aioenv


def act(weights: np.ndarray, observation: np.ndarray) -> int:
    return int(observation @ weights > 0)


async def main(steps: int) -> None:
    # The first Ray worker joins the cluster RAY_ADDRESS names, or else starts a small
    # local Ray instance (call ray.init(...) first to choose its settings yourself).
    ray_workers = aioenv.RayWorker.hosted(
        "CartPole-v1", aioenv.worker_seeds(1, 4), envs_per_actor=2, num_cpus=0.5
    )
    local_workers: list[aioenv.Worker[aioenv.Step]] = [
        aioenv.ProcessWorker("CartPole-v1", seed=5),
        aioenv.ThreadWorker("CartPole-v1", seed=6),
    ]
    weights = np.random.default_rng(0).normal(size=4)
    async with aioenv.get_worker_pool(
        [*ray_workers, *local_workers], autoreset="next_step", step_timeout=30
    ) as pool:
        await pool.set_attr("policy_weights", weights)  # one copy for all Ray workers
        pool.reset()
        taken = dict.fromkeys(range(len(pool)), 0)
        started = time.perf_counter()
        for _ in range(steps):
            step, worker_id = await pool.get_state()
            taken[worker_id] += 1
            pool.send_action(act(weights, step.observation), worker_id)
        elapsed = time.perf_counter() - started
        episodes = sum(stats.episodes for stats in pool.episode_stats())
    kinds = {worker_id: pool.workers[worker_id].kind for worker_id in taken}
    print(f"{steps} states in {elapsed:.2f} s ({steps / elapsed:,.0f} states/s)")
    for worker_id, count in taken.items():
        print(f"  worker {worker_id} ({kinds[worker_id]}): {count} states")
    print(f"episodes finished: {episodes}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    asyncio.run(main(parser.parse_args().steps))

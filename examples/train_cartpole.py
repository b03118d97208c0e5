"""Learn CartPole-v1 with aioenv.collect(): the cross-entropy method on a linear policy.

An async loop over a mixed pool (thread and process workers) alternates acting and
learning. Each round gives every worker one candidate parameter vector and collects exactly
one episode per worker (``num_episodes=1, per_worker=True``); a generation is several
rounds. The learner refits a Gaussian to the best candidates and bumps the policy version.
Once a generation's mean return reaches the threshold, 100 consecutive evaluation episodes
with the mean parameters decide whether CartPole is solved (mean return >= 475, gymnasium's
threshold). Everything is seeded, so a run is the same whatever order workers answer in.

    python examples/train_cartpole.py                      # until solved, at most 180 s
    python examples/train_cartpole.py --max-iterations 4   # a short run (what CI does)
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import aioenv

SOLVED = 475.0  # gymnasium's reward threshold for CartPole-v1, over 100 consecutive episodes


class LinearPolicy:
    """Push right when ``observation . weights + bias > 0``; one parameter row per worker."""

    def __init__(self, num_workers: int) -> None:
        self.parameters = np.zeros((num_workers, 5))

    def __call__(self, batch: aioenv.Batch[Any]) -> np.ndarray:
        observations, rows = batch.observations, self.parameters[batch.worker_ids]
        # Element-wise terms in a fixed order: a row's action never depends on its batch.
        score = rows[:, 4].copy()
        for column in range(4):
            score += observations[:, column] * rows[:, column]
        return (score > 0).astype(np.int64)


async def evaluate(
    collector: aioenv.Collector, policy: LinearPolicy, mean: np.ndarray
) -> aioenv.Trajectories:
    """Every worker plays the same number of consecutive episodes with the mean parameters,
    100 or more in all."""
    policy.parameters[:] = mean
    per_worker = -(-100 // len(collector.pool))
    return await collector.collect(num_episodes=per_worker, per_worker=True)


async def train(args: argparse.Namespace) -> float:
    modes = ["thread"] * args.threads + ["process"] * args.processes
    rng = np.random.default_rng(args.seed)
    mean, std = np.zeros(5), np.ones(5)
    started = time.perf_counter()
    steps = 0
    recent: list[float] = []  # every training episode's return, in collection order
    async with aioenv.make_pool("CartPole-v1", len(modes), mode=modes, seed=args.seed) as pool:
        policy = LinearPolicy(len(pool))
        collector = aioenv.Collector(pool, policy)
        rounds = -(-args.population // len(pool))
        for generation in range(args.max_iterations):
            candidates, returns = [], []
            for _ in range(rounds):  # acting: one episode per worker and candidate
                policy.parameters[:] = rng.normal(mean, std, size=(len(pool), 5))
                trajectories = await collector.collect(
                    num_episodes=1, per_worker=True, progress=args.progress
                )
                candidates.append(policy.parameters.copy())
                returns.append(trajectories.episode_returns())
                steps += len(trajectories)
            # learning: refit the sampling distribution to the best candidates
            population, scores = np.concatenate(candidates), np.concatenate(returns)
            recent.extend(scores.tolist())
            elite = population[np.argsort(scores)[-args.elite :]]
            noise = max(0.5 * (1 - generation / 10), 0.01)
            mean, std = elite.mean(axis=0), elite.std(axis=0) + noise
            collector.policy_version = generation + 1
            elapsed = time.perf_counter() - started
            last_100 = float(np.mean(recent[-100:]))
            print(
                f"generation {generation + 1:3d}: mean return {scores.mean():6.1f} "
                f"(best {scores.max():5.1f}), last 100 episodes {last_100:6.1f}, "
                f"{steps:,} steps in {elapsed:5.1f} s ({steps / elapsed:,.0f} steps/s)",
                flush=True,
            )
            if scores.mean() >= SOLVED:
                evaluation = await evaluate(collector, policy, mean)
                steps += len(evaluation)
                scores = evaluation.episode_returns()
                print(
                    f"evaluation: mean return {scores.mean():.1f} over {len(scores)} episodes "
                    f"({len(scores) // len(pool)} consecutive ones per worker), mean parameters",
                    flush=True,
                )
                if scores.mean() >= SOLVED:
                    print(f"solved in {time.perf_counter() - started:.1f} s, {steps:,} steps")
                    return float(scores.mean())
            if time.perf_counter() - started > args.max_seconds:
                print(f"stopped: --max-seconds {args.max_seconds:g} reached")
                break
    print(f"not solved; mean return of the last 100 episodes {last_100:.1f}")
    return last_100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=4, help="thread workers (default 4)")
    parser.add_argument("--processes", type=int, default=4, help="process workers (default 4)")
    parser.add_argument("--population", type=int, default=32, help="candidates (default 32)")
    parser.add_argument("--elite", type=int, default=6, help="candidates kept (default 6)")
    parser.add_argument("--max-iterations", type=int, default=100, help="generations (100)")
    parser.add_argument("--max-seconds", type=float, default=180.0, help="budget (180 s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true", help="a tqdm bar per round")
    aioenv.run(train(parser.parse_args()))


if __name__ == "__main__":  # process workers re-import the main module: guard the start
    main()

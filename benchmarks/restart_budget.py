"""How the restart budget treats flaky envs and crash loops.

Flaky envs: ``--workers`` coroutine envs whose steps take ``--step-ms`` and hang (until
cancelled) on ``--hang-rate`` of them, independently, under ``--step-timeout`` (0.5 s) and
``restart="on_failure"``: how long the run keeps every worker, under the default budget
(the crash-loop rule: ``max_restarts`` failures in a row with no progress between) and
under the rate rule that was the default until this release (``max_restarts=10,
restart_window=10``). Crash loops: one env that raises at every start (in its reset),
for each worker kind: how long after the first failure the worker is given up, under the
default. Run::

    python benchmarks/restart_budget.py [--seconds 300] [--workers 200]
    python benchmarks/restart_budget.py --workers 60 --step-ms 5 --hang-rate 0.01 \
        --step-timeout 0.1 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from typing import Any

import gymnasium
import numpy as np

import aioenv


class RarelyHangs(gymnasium.Env[np.ndarray, int]):
    """A coroutine env: each step takes ``step_s`` and hangs with probability ``rate``."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, step_s: float, rate: float) -> None:
        self.step_s, self.rate = step_s, rate

    async def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self.rng = random.Random(seed)
        return np.zeros(1, np.float32), {}

    async def step(  # type: ignore[override]
        self, action: int
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        await asyncio.sleep(3600.0 if self.rng.random() < self.rate else self.step_s)
        return np.zeros(1, np.float32), 0.0, False, False, {}


class FailsAtStart(gymnasium.Env[np.ndarray, int]):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        raise RuntimeError("the simulator cannot start")


class AsyncFailsAtStart(FailsAtStart):
    async def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        raise RuntimeError("the simulator cannot start")

    async def step(  # type: ignore[override]
        self, action: int
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        raise AssertionError("never stepped")


async def rare_hangs(args: argparse.Namespace, **budget: Any) -> dict[str, Any]:
    """Step every worker as soon as its state comes, for ``args.seconds`` or until a worker
    is given up on (its error is raised)."""
    hangs = 0

    def counted(error: aioenv.WorkerError) -> None:
        nonlocal hangs
        hangs += isinstance(error, aioenv.WorkerTimeout)

    env = lambda: RarelyHangs(args.step_ms / 1000, args.hang_rate)  # noqa: E731
    steps, given_up = 0, None
    async with aioenv.make_pool(
        env,
        args.workers,
        mode="coroutine",
        seed=args.seed,
        step_timeout=args.step_timeout,
        restart="on_failure",
        on_failure=counted,
        **budget,
    ) as pool:
        pool.reset()
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < args.seconds:
            try:
                batch = await pool.get_batch(timeout=1.0)
            except aioenv.WorkerError as error:
                given_up = f"worker {error.worker_id} after {elapsed:.1f} s"
                break
            steps += len(batch)
            for worker_id in batch.worker_ids:
                pool.send_action(0, worker_id)
        elapsed = time.monotonic() - started
        return {
            "budget": budget or "default",
            "ran_s": round(elapsed, 1),
            "kept_every_worker": given_up is None,
            "given_up": given_up,
            "steps": steps,
            "hangs": hangs,
            "restarts": pool.restarts,
            "hangs_per_worker_s": round(hangs / args.workers / elapsed, 3),
            "hang_rate": round(hangs / max(steps, 1), 5),
        }


async def crash_loop(mode: str) -> dict[str, Any]:
    """How long after the first failure a worker that fails at every start is given up
    (its error is raised, and it leaves the pool)."""
    first: float | None = None

    def seen(error: aioenv.WorkerError) -> None:
        nonlocal first
        first = time.monotonic() if first is None else first

    env = AsyncFailsAtStart if mode == "coroutine" else FailsAtStart
    async with aioenv.make_pool(env, 1, mode=mode, restart="on_failure", on_failure=seen) as pool:
        pool.reset()
        try:
            await pool.get_state()
        except aioenv.WorkerError:
            given_up = time.monotonic()
        else:
            raise AssertionError(f"{mode}: a crash loop was not given up")
        if 0 not in pool.removed:
            raise AssertionError(f"{mode}: a crash loop's error was raised, its worker kept")
        assert first is not None
        return {
            "mode": mode,
            "given_up_after_s": round(given_up - first, 3),
            "restarts": pool.restarts,
        }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--hang-rate", type=float, default=0.003)
    parser.add_argument("--step-timeout", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for mode in ("coroutine", "thread", "process"):
        print(await crash_loop(mode), flush=True)
    print(await rare_hangs(args, max_restarts=10, restart_window=10.0), flush=True)
    print(await rare_hangs(args), flush=True)


if __name__ == "__main__":
    asyncio.run(main())

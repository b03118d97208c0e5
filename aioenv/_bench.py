"""What ``aioenv bench`` measures: steps per second of one gymnasium env under each worker
mode, and under gymnasium's own vector envs on the same env, so a user sees which mode
suits their env. Each measurement builds its pool (or vector env), resets every env, then
counts env steps for a fixed wall-clock window with random actions drawn ahead of time
from a seeded action space."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import gymnasium
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

from ._factory import make_pool
from ._loop import run

__all__ = ["GYMNASIUM_ROWS", "Measurement", "measure_gymnasium", "measure_pool"]

#: The gymnasium rows every bench runs after aioenv's modes.
GYMNASIUM_ROWS = ("gymnasium SyncVectorEnv", "gymnasium AsyncVectorEnv")

_ACTIONS = 64  # actions drawn ahead of time, cycled: the policy costs the same everywhere


@dataclasses.dataclass(frozen=True)
class Measurement:
    """``steps`` env transitions counted in ``seconds`` of wall-clock time."""

    label: str
    steps: int
    seconds: float

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0


def measure_pool(
    env_id: str, workers: int, mode: str, seconds: float, envs_per_process: int, seed: int
) -> Measurement:
    """``make_pool(env_id, workers, mode=mode)`` driven with ``get_batch`` for ``seconds``."""
    steps, elapsed = run(_drive_pool(env_id, workers, mode, seconds, envs_per_process, seed))
    return Measurement(mode, steps, elapsed)


async def _drive_pool(
    env_id: str, workers: int, mode: str, seconds: float, envs_per_process: int, seed: int
) -> tuple[int, float]:
    options: dict[str, Any] = {}
    if mode == "process":
        options["envs_per_process"] = envs_per_process
    async with make_pool(
        env_id, workers, mode=mode, seed=seed, autoreset="next_step", **options
    ) as pool:
        pool.reset()
        await pool.get_batch(min_size=workers)
        actions = _sampled(pool.workers[0].action_space, seed)
        for worker_id in range(workers):
            pool.send_action(actions[worker_id % _ACTIONS], worker_id)
        steps, turn = 0, 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            batch = await pool.get_batch()
            steps += len(batch.states)
            for worker_id in batch.worker_ids.tolist():
                turn += 1
                pool.send_action(actions[turn % _ACTIONS], worker_id)
        return steps, time.perf_counter() - started


def measure_gymnasium(
    label: str, env_id: str, workers: int, seconds: float, seed: int
) -> Measurement:
    """gymnasium's ``SyncVectorEnv`` or ``AsyncVectorEnv(shared_memory=True)`` (by
    ``label``, one of :data:`GYMNASIUM_ROWS`) stepped for ``seconds``."""
    factories: list[Callable[[], gymnasium.Env[Any, Any]]] = [
        functools.partial(gymnasium.make, env_id)
    ] * workers
    vector: gymnasium.vector.VectorEnv[Any, Any, Any]
    if label == GYMNASIUM_ROWS[0]:
        vector = SyncVectorEnv(factories)
    else:
        vector = AsyncVectorEnv(factories, shared_memory=True)
    try:
        vector.reset(seed=seed)
        actions = _sampled(vector.action_space, seed)
        steps, turn = 0, 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            vector.step(actions[turn % _ACTIONS])
            turn += 1
            steps += workers
        return Measurement(label, steps, time.perf_counter() - started)
    finally:
        vector.close()


def _sampled(space: gymnasium.Space[Any], seed: int) -> list[Any]:
    space.seed(seed)
    return [space.sample() for _ in range(_ACTIONS)]

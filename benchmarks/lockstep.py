"""W6: a synchronous training script over a gymnasium vector env.

Where most RL users meet aioenv: ``envs.step(actions)`` in a plain loop, with the policy
computed between steps (here a small numpy MLP, 4-64-64-2, so the envs sit idle while it
runs, as they do in training). One figure is env steps per second over the window; the
vector env is built by the row's ``vector`` factory, so gymnasium's SyncVectorEnv and
AsyncVectorEnv and aioenv's AioVectorEnv run the identical loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
from envs import EnvFactory
from machine import CpuAccount
from runners import Meter, Sample, Timing

import aioenv

__all__ = ["VECTORS", "Mlp", "run_lockstep"]


class Mlp:
    """A 4-64-64-2 tanh network with fixed random weights: about 20 µs per batch of 16."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.w1 = rng.normal(0, 0.5, (4, 64)).astype(np.float32)
        self.w2 = rng.normal(0, 0.2, (64, 64)).astype(np.float32)
        self.w3 = rng.normal(0, 0.2, (64, 2)).astype(np.float32)

    def __call__(self, observations: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        hidden = np.tanh(np.tanh(observations @ self.w1) @ self.w2)
        result: np.ndarray[Any, Any] = np.argmax(hidden @ self.w3, axis=1)
        return result


VectorFactory = Callable[[EnvFactory, int], gymnasium.vector.VectorEnv[Any, Any, Any]]

#: The rows: label -> how to build the vector env for (env factory, n).
VECTORS: dict[str, VectorFactory] = {
    "gym SyncVectorEnv": lambda env, n: gymnasium.vector.SyncVectorEnv([env] * n),
    "gym AsyncVectorEnv": lambda env, n: gymnasium.vector.AsyncVectorEnv(
        [env] * n, shared_memory=True
    ),
    "AioVectorEnv process (default: grouped)": lambda env, n: aioenv.AioVectorEnv(env, n),
    "AioVectorEnv process (default), idle_spin=0": lambda env, n: aioenv.AioVectorEnv(
        env, n, idle_spin=0.0
    ),
    "AioVectorEnv process, 1 env/worker": lambda env, n: aioenv.AioVectorEnv(
        env, n, mode="process", envs_per_worker=1
    ),
    "AioVectorEnv thread": lambda env, n: aioenv.AioVectorEnv(env, n, mode="thread"),
}


def run_lockstep(
    label: str, env: EnvFactory, n: int, *, seed: int, timing: Timing, account: CpuAccount
) -> Sample:
    """Measure the lockstep loop over the vector env of row ``label``."""
    policy = Mlp(seed)
    started = time.perf_counter()
    vector = VECTORS[label](env, n)
    try:
        observations, _ = vector.reset(seed=seed)
        build_s = time.perf_counter() - started
        resetting = np.zeros(n, np.bool_)
        meter = Meter(timing, account)
        while meter.running():
            observations, _, terminated, truncated, _ = vector.step(policy(observations))
            meter.count += n - int(resetting.sum())
            resetting = terminated | truncated
    finally:
        vector.close()
    return meter.sample(build_s)

"""Batched policies for the training-script workloads (W6, W11 to W13).

A policy maps a batch of observations (one row per env) to a batch of actions and runs in
the script, between steps, as it does in training: its cost is time the envs wait for in a
lockstep loop. Each is built from a seed, so every row of a repetition plays with the same
weights or the same random actions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import numpy.typing as npt
from envs import EnvFactory

__all__ = [
    "BatchPolicy",
    "CalibratedCartpolePolicy",
    "Mlp",
    "OnParts",
    "PolicyMaker",
    "RandomBox",
    "RandomDiscrete",
    "Repeated",
]

Batch = npt.NDArray[Any]
BatchPolicy = Callable[[Batch], Batch]
PolicyMaker = Callable[[int], BatchPolicy]  # seed -> policy


class Mlp:
    """A tanh network with fixed random weights over the flattened observations: ``argmax``
    of its outputs (a discrete action) or their ``tanh`` (a continuous one in [-1, 1]).

    The default sizes, 4-64-64-2, are W6's CartPole policy: about 20 µs per batch of 16.
    ``input_scale`` is folded into the first layer (1/255 for uint8 frames), so scaling
    costs no extra pass over the observations.
    """

    def __init__(
        self,
        seed: int,
        sizes: tuple[int, ...] = (4, 64, 64, 2),
        *,
        continuous: bool = False,
        input_scale: float = 1.0,
    ) -> None:
        rng = np.random.default_rng(seed)
        stds = [0.5 * input_scale] + [0.2] * (len(sizes) - 2)
        self.weights = [
            rng.normal(0, std, (fan_in, fan_out)).astype(np.float32)
            for std, fan_in, fan_out in zip(stds, sizes[:-1], sizes[1:], strict=True)
        ]
        self.continuous = continuous

    def __call__(self, observations: Batch) -> Batch:
        hidden = observations.reshape(len(observations), -1).astype(np.float32, copy=False)
        for weight in self.weights[:-1]:
            hidden = np.tanh(hidden @ weight)
        outputs = hidden @ self.weights[-1]
        result: Batch = np.tanh(outputs) if self.continuous else np.argmax(outputs, axis=1)
        return result


class RandomDiscrete:
    """Uniform random actions in ``range(n)`` from a seeded generator: a policy that costs
    almost nothing, so the loop measures the envs."""

    def __init__(self, seed: int, n: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.n = n

    def __call__(self, observations: Batch) -> Batch:
        return self.rng.integers(0, self.n, len(observations))


class RandomBox:
    """Uniform random actions in [-1, 1]^dims from a seeded generator (float32)."""

    def __init__(self, seed: int, dims: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.dims = dims

    def __call__(self, observations: Batch) -> Batch:
        return self.rng.uniform(-1.0, 1.0, (len(observations), self.dims)).astype(np.float32)


class Repeated:
    """``policy`` run ``times`` times on the same batch: a policy of a chosen cost."""

    def __init__(self, policy: BatchPolicy, times: int) -> None:
        self.policy = policy
        self.times = times

    def __call__(self, observations: Batch) -> Batch:
        for _ in range(self.times - 1):
            self.policy(observations)
        return self.policy(observations)


class OnParts:
    """``policy`` run on ``parts`` equal slices of the batch: a lockstep loop over N envs
    paying what a pipelined loop pays for N / parts envs at a time, ``parts`` times."""

    def __init__(self, policy: BatchPolicy, parts: int) -> None:
        self.policy = policy
        self.parts = parts

    def __call__(self, observations: Batch) -> Batch:
        return np.concatenate([self.policy(part) for part in np.split(observations, self.parts)])


class CalibratedCartpolePolicy:
    """W13's CartPole policy: the 4-64-64-2 :class:`Mlp` repeated until one call on a batch
    of ``batch`` observations costs about what ``batch`` CartPole steps cost, so a pipelined
    loop has as much policy work to hide as there is env work.

    :meth:`calibrate` times both once, on this machine, before the first repetition, and
    returns what it found (the report prints it); until then the MLP runs once.
    """

    def __init__(self, env: EnvFactory, batch: int) -> None:
        self.env = env
        self.batch = batch
        self.times = 1

    def __call__(self, seed: int) -> BatchPolicy:
        return Repeated(Mlp(seed), self.times)

    def calibrate(self, seconds: float = 0.3) -> str:
        env_s = _env_steps_s(self.env(), self.batch, seconds)
        mlp = Mlp(0)
        observations = np.zeros((self.batch, 4), np.float32)
        policy_s = _mean_call_s(lambda: mlp(observations), seconds)
        self.times = max(1, round(env_s / policy_s))
        return (
            f"policy calibration: {self.batch} CartPole steps take {env_s * 1e6:.0f} µs, the "
            f"4-64-64-2 MLP on {self.batch} observations {policy_s * 1e6:.1f} µs: the policy "
            f"runs it {self.times} times ({self.times * policy_s * 1e6:.0f} µs per batch of "
            f"{self.batch})"
        )


def _env_steps_s(env: gymnasium.Env[Any, Any], steps: int, seconds: float) -> float:
    """Wall time of ``steps`` consecutive steps of a two-action ``env`` (the mean over
    ``seconds``; alternate actions, so that sampling one costs nothing)."""
    try:
        env.reset(seed=0)
        count = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds or count < 100:
            _, _, terminated, truncated, _ = env.step(count & 1)
            if terminated or truncated:
                env.reset()
            count += 1
        return steps * (time.perf_counter() - started) / count
    finally:
        env.close()


def _mean_call_s(call: Callable[[], object], seconds: float) -> float:
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or count < 100:
        call()
        count += 1
    return (time.perf_counter() - started) / count

"""The environments and policies the benchmarks drive.

Every env here is a plain ``gymnasium.Env`` passed as a zero-argument factory (a
module-level function, or a ``functools.partial`` of one or of a class), so the same
factory feeds ``aioenv.make_pool``, ``SyncVectorEnv`` and ``AsyncVectorEnv``, and process
workers unpickle it by reference (this module is importable from every child).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import time
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

__all__ = [
    "AsyncSleepyEnv",
    "EnvFactory",
    "LargeObsEnv",
    "NoopEnv",
    "Policy",
    "SleepyEnv",
    "cartpole",
    "cartpole_policy",
    "first_wait",
    "half_cheetah",
    "large_obs",
    "noop",
    "pong",
    "pong_env",
    "sleepy",
    "sleepy_coroutine",
    "zero_policy",
]

Observation = npt.NDArray[Any]
EnvFactory = Callable[[], gymnasium.Env[Any, Any]]
Action = int | np.int64  # the per-state API sends ints, vector envs numpy ints


class SleepyEnv(gymnasium.Env[npt.NDArray[np.float32], np.int64]):
    """A cheap env whose step sleeps: a lognormal time with mean ``mean_s`` and shape
    ``sigma`` drawn from the env's own seeded RNG (``sigma=0`` sleeps exactly ``mean_s``).

    The sleep releases the GIL, so thread workers overlap. The episode never ends, so a
    measurement sees no resets. ``last_sleep`` is the duration requested by the last step
    (used to calibrate how much longer ``time.sleep`` really takes).
    """

    def __init__(self, mean_s: float = 1e-3, sigma: float = 1.0) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.mean_s = mean_s
        self.sigma = sigma
        # E[lognormal(mu, sigma)] = exp(mu + sigma^2 / 2), so this mu gives mean mean_s.
        self._mu = math.log(mean_s) - sigma * sigma / 2
        self._observation = np.zeros(4, np.float32)
        self.last_sleep = 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        return self._observation, {}

    def step(
        self, action: Action
    ) -> tuple[npt.NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        if self.sigma > 0:
            duration = float(self.np_random.lognormal(self._mu, self.sigma))
        else:
            duration = self.mean_s
        self.last_sleep = duration
        time.sleep(duration)
        return self._observation, 0.0, False, False, {}


class AsyncSleepyEnv:
    """:class:`SleepyEnv`'s coroutine twin for ``mode="async"`` (an async gymnasium env):
    its step awaits ``asyncio.sleep(mean_s)`` instead of blocking in ``time.sleep``.

    ``spread``: the first step after a reset awaits a uniform fraction of ``mean_s`` drawn
    from the reset's seed (:func:`first_wait`), so envs reset together step out of phase,
    as a population started at different times does: states then arrive at a steady rate
    rather than in one burst per step time, which a window a few step times long would
    count whole or not at all."""

    def __init__(self, mean_s: float = 1e-2, spread: bool = False) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.mean_s = mean_s
        self.spread = spread
        self._observation = np.zeros(4, np.float32)
        self._next_wait = mean_s

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        if self.spread:
            self._next_wait = first_wait(self.mean_s, seed)
        return self._observation, {}

    async def step(
        self, action: Action
    ) -> tuple[npt.NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        await asyncio.sleep(self._next_wait)
        self._next_wait = self.mean_s
        return self._observation, 0.0, False, False, {}


def first_wait(mean_s: float, seed: int | None) -> float:
    """A spread env's first wait after its reset with ``seed``: uniform in (0, mean_s]."""
    return mean_s * (1.0 - float(np.random.default_rng(seed).random()))


class LargeObsEnv(gymnasium.Env[npt.NDArray[np.uint8], np.int64]):
    """An env with large ``uint8`` image observations and no other cost: each step
    returns a freshly allocated frame (as emulators do), filled with the step counter."""

    def __init__(self, shape: tuple[int, ...] = (84, 84, 4)) -> None:
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.action_space = spaces.Discrete(2)
        self.shape = shape
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.uint8], dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(self.shape, np.uint8), {}

    def step(
        self, action: Action
    ) -> tuple[npt.NDArray[np.uint8], float, bool, bool, dict[str, Any]]:
        self._t += 1
        return np.full(self.shape, self._t & 0xFF, np.uint8), 0.0, False, False, {}


class NoopEnv(gymnasium.Env[npt.NDArray[np.float32], np.int64]):
    """An env that does nothing: a round trip through a worker costs only the transport."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._observation = np.zeros(1, np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        return self._observation, {}

    def step(
        self, action: Action
    ) -> tuple[npt.NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        return self._observation, 0.0, False, False, {}


# Factories: zero-argument callables, picklable by reference.
def cartpole() -> EnvFactory:
    return functools.partial(gymnasium.make, "CartPole-v1")


def sleepy(mean_s: float, sigma: float) -> EnvFactory:
    return functools.partial(SleepyEnv, mean_s, sigma)


def sleepy_coroutine(mean_s: float, spread: bool = False) -> Callable[[], AsyncSleepyEnv]:
    return functools.partial(AsyncSleepyEnv, mean_s, spread)


def large_obs(shape: tuple[int, ...]) -> EnvFactory:
    return functools.partial(LargeObsEnv, shape)


def noop() -> EnvFactory:
    return NoopEnv


def pong_env() -> gymnasium.Env[Any, Any]:
    """Atari Pong as DQN-style training sees it: 4 emulator frames per step (max-pooled
    over the last two), 84x84 grey, the last 4 such frames stacked (4x84x84 uint8)."""
    # Registering here rather than at import: a process worker unpickles this function by
    # reference and calls it, and ALE's ids must be known in that process too.
    import ale_py

    gymnasium.register_envs(ale_py)
    env = gymnasium.make("ALE/Pong-v5", frameskip=1)
    env = gymnasium.wrappers.AtariPreprocessing(env, frame_skip=4)
    return gymnasium.wrappers.FrameStackObservation(env, 4)


def pong() -> EnvFactory:
    return pong_env


def half_cheetah() -> EnvFactory:
    return functools.partial(gymnasium.make, "HalfCheetah-v5")


# Policies --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Policy:
    """The same decision rule for one observation (the per-state API) and for a stacked
    batch (the batch API and gymnasium's vector envs), so every runner plays the same
    episodes and pays for the same work."""

    one: Callable[[Observation], int]
    many: Callable[[Observation], npt.NDArray[np.int64]]


def _cartpole_one(observation: Observation) -> int:
    # Push the cart the way the pole is falling: long episodes, as in examples/.
    return int(observation[2] + 0.5 * observation[3] > 0)


def _cartpole_many(observations: Observation) -> npt.NDArray[np.int64]:
    return (observations[:, 2] + 0.5 * observations[:, 3] > 0).astype(np.int64)


def _zero_one(observation: Observation) -> int:
    return 0


def _zero_many(observations: Observation) -> npt.NDArray[np.int64]:
    return np.zeros(len(observations), np.int64)


cartpole_policy = Policy(_cartpole_one, _cartpole_many)
zero_policy = Policy(_zero_one, _zero_many)

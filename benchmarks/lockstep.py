"""W6, W11, W12 (and W13's lockstep rows): a synchronous training script over a vector env.

Where most RL users meet aioenv: ``envs.step(actions)`` in a plain loop, with the policy
computed between steps (W6: a small numpy MLP, 4-64-64-2, so the envs sit idle while it
runs, as they do in training). One figure is env steps per second over the window; the
vector env is built by the row's ``vector`` factory, so gymnasium's SyncVectorEnv and
AsyncVectorEnv, aioenv's AioVectorEnv, EnvPool and the peers of peers.py (SB3's
SubprocVecEnv, PufferLib's Multiprocessing, TorchRL's ParallelEnv and AsyncEnvPool) run
the identical loop.

The script's BLAS runs on one thread (threadpoolctl), as the envs need the other cores:
the script is then one serial stream of work, which is what the machine limit assumes.

The machine limit (:func:`run_limit`) is computed, not a vector env: in the same run, a
SyncVectorEnv loop times its ``step`` calls (one core stepping the envs: ``t_env`` per env
step) apart from the rest of the loop (the policy and the loop itself: ``t_script`` per
lockstep step). With ``cores`` cores, one lockstep step of N envs needs N * t_env +
t_script of CPU, and t_script of it in series (the policy needs every observation), so no
design exceeds ``N / max((N * t_env + t_script) / cores, t_script)`` env steps/s.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium
import numpy as np
from bare import BareEngine, BareLockstep
from envs import EnvFactory
from machine import CpuAccount
from peers import (
    PUFFER_LOCKSTEP,
    SB3_SUBPROC,
    TORCHRL_PARALLEL,
    TORCHRL_POOL,
    PufferVector,
    Sb3Vector,
    TorchRLVector,
)
from policies import BatchPolicy
from runners import Meter, Sample, Timing
from threadpoolctl import threadpool_limits

import aioenv

__all__ = [
    "BARE_ENGINE",
    "BARE_ENGINE_ASLEEP",
    "BARE_LOCKSTEP",
    "LIMIT",
    "VECTORS",
    "EnvPoolVector",
    "Vector",
    "cores",
    "limit_rate",
    "run_limit",
    "run_lockstep",
]


class Vector(Protocol):
    """What the loop needs of a vector env (gymnasium's, aioenv's, EnvPool's or a peer's)."""

    def reset(self, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]: ...

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]: ...

    def close(self) -> None: ...


VectorFactory = Callable[[EnvFactory, int, int], Vector]  # (env factory, n, seed)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def _one_worker_per_core(n: int) -> int:
    """``envs_per_worker`` for one child per core: the smallest divisor of ``n`` that
    leaves at most as many workers as cores."""
    return next(k for k in range(math.ceil(n / cores()), n + 1) if n % k == 0)


class EnvPoolVector:
    """An EnvPool env (``envpool.make_gymnasium``) behind the loop's interface. EnvPool
    seeds its envs when it builds them, so ``reset`` ignores its seed."""

    def __init__(self, task_id: str, n: int, seed: int, **config: Any) -> None:
        import envpool

        self.envs = envpool.make_gymnasium(task_id, num_envs=n, seed=seed, **config)

    def reset(self, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        observations, infos = self.envs.reset()
        return observations, infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        observations, rewards, terminated, truncated, infos = self.envs.step(actions)
        return observations, rewards, terminated, truncated, infos

    def close(self) -> None:
        close = getattr(self.envs, "close", None)
        if close is not None:
            close()


#: EnvPool's Pong set up as :func:`envs.pong_env` is: 4 frames a step, 84x84 grey, 4
#: stacked, up to 30 no-ops at reset, sticky actions (0.25, as ALE's v5), no FIRE at reset,
#: no life loss as episode end, rewards unclipped.
ENVPOOL_PONG = {
    "frame_skip": 4,
    "stack_num": 4,
    "img_height": 84,
    "img_width": 84,
    "gray_scale": True,
    "noop_max": 30,
    "repeat_action_probability": 0.25,
    "use_fire_reset": False,
    "episodic_life": False,
    "reward_clip": False,
}


def _gym_sync(env: EnvFactory, n: int, seed: int) -> Vector:
    return gymnasium.vector.SyncVectorEnv([env] * n)


def _gym_async(env: EnvFactory, n: int, seed: int) -> Vector:
    return gymnasium.vector.AsyncVectorEnv([env] * n, shared_memory=True)


#: The reference row (see :class:`bare.BareLockstep`).
BARE_LOCKSTEP = "reference: bare lockstep, a child per core"
#: The same design through the engine's shared buffer and kernel wakes
#: (see :class:`bare.BareEngine`).
BARE_ENGINE = "reference: bare engine (shared buffer, kernel wake), a child per core"
BARE_ENGINE_ASLEEP = "reference: bare engine, a child per core, asleep between steps"

#: The default's row with a long run's pool options.
RESTARTING = "AioVectorEnv default with restart='on_failure' and step_timeout=60"

_ALL = ("W6", "W11", "W12", "W13")
_REAL = ("W11", "W12")

#: The rows: label -> (how to build the vector env, the workloads that run the row).
VECTORS: dict[str, tuple[VectorFactory, tuple[str, ...]]] = {
    "gym SyncVectorEnv": (_gym_sync, _ALL),
    "gym AsyncVectorEnv": (_gym_async, _ALL),
    "AioVectorEnv default (auto)": (lambda env, n, seed: aioenv.AioVectorEnv(env, n), _ALL),
    # A long run's options: they rule out stepping in line, not the default's children.
    RESTARTING: (
        lambda env, n, seed: aioenv.AioVectorEnv(env, n, restart="on_failure", step_timeout=60.0),
        ("W6", *_REAL),
    ),
    "AioVectorEnv inline": (
        lambda env, n, seed: aioenv.AioVectorEnv(env, n, mode="inline"),
        ("W6", *_REAL),
    ),
    "AioVectorEnv process (grouped, a core for the script)": (
        lambda env, n, seed: aioenv.AioVectorEnv(env, n, mode="process"),
        ("W6", *_REAL),
    ),
    "AioVectorEnv process, envs_per_worker=N/cores": (
        lambda env, n, seed: aioenv.AioVectorEnv(
            env, n, mode="process", envs_per_worker=_one_worker_per_core(n)
        ),
        _REAL,
    ),
    # The same children polling between steps, always (asked, so never tried asleep):
    # what the default's trials of the children asleep cost or gain on this machine.
    "AioVectorEnv process, envs_per_worker=N/cores, idle_spin=0.002": (
        lambda env, n, seed: aioenv.AioVectorEnv(
            env, n, mode="process", envs_per_worker=_one_worker_per_core(n), idle_spin=0.002
        ),
        _REAL,
    ),
    # The same children, asleep between steps: what idle_spin (on by default where each
    # child has a core) gains or costs on this machine.
    "AioVectorEnv process, envs_per_worker=N/cores, idle_spin=0": (
        lambda env, n, seed: aioenv.AioVectorEnv(
            env, n, mode="process", envs_per_worker=_one_worker_per_core(n), idle_spin=0.0
        ),
        _REAL,
    ),
    "AioVectorEnv process, 1 env/worker": (
        lambda env, n, seed: aioenv.AioVectorEnv(env, n, mode="process", envs_per_worker=1),
        ("W6", *_REAL),
    ),
    "AioVectorEnv thread": (
        lambda env, n, seed: aioenv.AioVectorEnv(env, n, mode="thread"),
        ("W6", *_REAL),
    ),
    "EnvPool Pong-v5 (EnvPool's own preprocessing)": (
        lambda env, n, seed: EnvPoolVector("Pong-v5", n, seed, **ENVPOOL_PONG),
        ("W11",),
    ),
    # EnvPool's own MuJoCo port, not gymnasium's env: the same model, its own code.
    "EnvPool HalfCheetah-v5 (EnvPool's own env)": (
        lambda env, n, seed: EnvPoolVector("HalfCheetah-v5", n, seed),
        ("W12",),
    ),
    # Peers that run gymnasium's envs in processes of their own design (see peers.py).
    SB3_SUBPROC: (Sb3Vector, ("W6", *_REAL)),
    PUFFER_LOCKSTEP: (PufferVector, ("W6", *_REAL)),
    TORCHRL_PARALLEL: (TorchRLVector, ("W6", "W11")),
    TORCHRL_POOL: (functools.partial(TorchRLVector, pool=True), ("W6", "W11")),
    # Not a vector env: the leanest lockstep design over processes (see bare.py).
    BARE_LOCKSTEP: (BareLockstep, _REAL),
    BARE_ENGINE: (BareEngine, ("W6", *_REAL)),
    BARE_ENGINE_ASLEEP: (functools.partial(BareEngine, spin=0.0), ("W6", *_REAL)),
}

#: The computed row (see :func:`run_limit`).
LIMIT = "machine limit (computed)"


@threadpool_limits.wrap(limits=1, user_api="blas")
def run_lockstep(
    label: str,
    env: EnvFactory,
    n: int,
    policy: BatchPolicy,
    *,
    seed: int,
    timing: Timing,
    account: CpuAccount,
) -> Sample:
    """Measure the lockstep loop over the vector env of row ``label``."""
    started = time.perf_counter()
    vector = VECTORS[label][0](env, n, seed)
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


def limit_rate(n: int, env_s: float, script_s: float, cores: int) -> float:
    """Env steps/s no design exceeds: ``n`` env steps of ``env_s`` each and ``script_s``
    of script per lockstep step, on ``cores`` cores (see the module's docstring)."""
    return n / max((n * env_s + script_s) / cores, script_s)


@threadpool_limits.wrap(limits=1, user_api="blas")
def run_limit(
    env: EnvFactory,
    n: int,
    policy: BatchPolicy,
    *,
    seed: int,
    timing: Timing,
    account: CpuAccount,
) -> Sample:
    """The machine limit: a SyncVectorEnv loop that times its env steps apart from the
    rest of the loop; the sample's rate is :func:`limit_rate` of those times, its
    ``detail`` the times themselves (µs) and the cores counted."""
    started = time.perf_counter()
    vector = gymnasium.vector.SyncVectorEnv([env] * n)
    env_s = loop_s = 0.0
    rounds = 0
    try:
        observations, _ = vector.reset(seed=seed)
        build_s = time.perf_counter() - started
        resetting = np.zeros(n, np.bool_)
        meter = Meter(timing, account)
        previous = time.perf_counter()
        while meter.running():
            actions = policy(observations)
            before_step = time.perf_counter()
            observations, _, terminated, truncated, _ = vector.step(actions)
            after_step = time.perf_counter()
            if meter.counting:
                env_s += after_step - before_step
                loop_s += after_step - previous
                rounds += 1
            previous = after_step
            meter.count += n - int(resetting.sum())
            resetting = terminated | truncated
    finally:
        vector.close()
    sample = meter.sample(build_s)
    usable = cores()
    per_env_s = env_s / max(rounds * n, 1)
    script_s = (loop_s - env_s) / max(rounds, 1)
    rate = limit_rate(n, per_env_s, script_s, usable)
    # The time the counted steps would take at the limit, so that the sample's rate is the
    # limit; the loop's own rate (SyncVectorEnv's, with the timers) stays in the detail.
    return dataclasses.replace(
        sample,
        elapsed=sample.count / rate if rate > 0 else 0.0,
        detail={
            "t_env_us": per_env_s * 1e6,
            "t_script_us": script_s * 1e6,
            "cores": float(usable),
            "sync_rate": sample.rate,
        },
    )

"""Peers' vector envs in the training-script workloads: Stable-Baselines3's
``SubprocVecEnv``, PufferLib's ``Multiprocessing`` backend and TorchRL's ``ParallelEnv`` and
``AsyncEnvPool`` in the lockstep loop (W6, W11 to W13, :mod:`lockstep`), PufferLib's own
send/recv in the pipelined one (W13, :mod:`pipelined`), and TorchRL's pools beside the
per-state rows (W1, W2: :func:`run_torchrl`).

Each is wrapped to the loop's interface and nothing else: same envs (the case's gymnasium
factory), same policy, same window; what differs is how each peer moves the work between
processes. A row whose peer is not installed is skipped, saying so (``REQUIRES``).

- ``SubprocVecEnv``: one process per env (SB3's design), its default start method.
- TorchRL: ``ParallelEnv`` (a process per env, every step waits for all of them) and
  ``AsyncEnvPool`` with its multiprocessing backend (a process per env, shared-memory
  exchange where the env's data allows it), each env a ``GymWrapper`` around the case's
  gymnasium env with integer actions. TorchRL envs do not reset in ``step``: the loop
  calls ``step_and_maybe_reset``, which resets the envs whose episode ended in the same
  call (their next observation is the reset's, as with SB3), so every call is ``n``
  transitions. The per-state rows (W1, W2): ``ParallelEnv`` in lockstep, and
  ``AsyncEnvPool``'s own first-ready loop (``async_step_and_maybe_reset_send`` for the
  envs that were answered, ``..._recv(min_get=1)`` for whichever are ready next).
- PufferLib: one worker process per core (PufferLib's own advice: more is refused unless
  forced), each stepping its share of the envs (``pufferlib.emulation.GymnasiumPufferEnv``
  around the case's env) and writing into one shared buffer; workers and the parent's
  ``recv`` busy-wait on a flag per worker. Written against the vector API of PufferLib 3.0
  (``pufferlib.vector.make``, ``recv`` giving the env ids second to last), which the
  ``pufferlib`` 3.0 release and the ``pufferlib-core`` wheel share.
"""

from __future__ import annotations

import functools
import math
import os
import time
from typing import Any

import numpy as np
from envs import EnvFactory
from machine import CpuAccount
from runners import Meter, Sample, Timing

__all__ = [
    "INSTALL_HINTS",
    "PUFFER_LOCKSTEP",
    "PUFFER_PIPELINED",
    "REQUIRES",
    "SB3_SUBPROC",
    "TORCHRL_PARALLEL",
    "TORCHRL_POOL",
    "PufferPipelined",
    "PufferVector",
    "Sb3Vector",
    "TorchRLVector",
    "run_torchrl",
]

SB3_SUBPROC = "SB3 SubprocVecEnv"
TORCHRL_PARALLEL = "TorchRL ParallelEnv"
TORCHRL_POOL = "TorchRL AsyncEnvPool (processes)"
PUFFER_LOCKSTEP = "PufferLib Multiprocessing (a worker per core)"
PUFFER_PIPELINED = "PufferLib Multiprocessing pipelined: send/recv"

#: The modules each peer's rows need (workloads.py skips the row, saying so, without them).
REQUIRES: dict[str, tuple[str, ...]] = {
    SB3_SUBPROC: ("stable_baselines3",),
    PUFFER_LOCKSTEP: ("pufferlib",),
    PUFFER_PIPELINED: ("pufferlib",),
    TORCHRL_PARALLEL: ("torchrl",),
    TORCHRL_POOL: ("torchrl",),
}

#: How to get a module these rows need, where the ``bench`` extra does not bring it.
INSTALL_HINTS: dict[str, str] = {
    "stable_baselines3": "pip install 'aioenv[sb3]' (make bench installs it, CPU torch first)",
    "torchrl": "pip install torchrl (make bench installs it beside CPU torch)",
    "pufferlib": "in no extra, PufferLib 3.0 requires gymnasium<=0.29.1 "
    "(benchmarks/README.md: Peers)",
}

#: Seconds to wait for each PufferLib worker to exit after its close (which signals them
#: without waiting), so that no spinning worker runs into the next row's window.
_PUFFER_EXIT_S = 5.0


class Sb3Vector:
    """``SubprocVecEnv([env] * n)`` behind the lockstep loop's interface.

    SB3 resets an env in the step that ends its episode (the observation returned is the
    new episode's first; the last one is in the infos), so no step that follows is a reset
    and every step is ``n`` transitions: ``step`` flags no env as about to reset.
    """

    def __init__(self, env: EnvFactory, n: int, seed: int) -> None:
        from stable_baselines3.common.vec_env import SubprocVecEnv

        self.envs = SubprocVecEnv([env] * n)
        self._no_reset = np.zeros(n, np.bool_)

    def reset(self, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.envs.seed(seed)  # env i gets seed + i at this reset
        return self.envs.reset(), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        observations, rewards, _, _ = self.envs.step(actions)
        return observations, rewards, self._no_reset, self._no_reset, {}

    def close(self) -> None:
        self.envs.close()


def _torchrl_env(env: EnvFactory, seed: int | None) -> Any:
    """The case's gymnasium env, seeded, as a TorchRL env taking integer actions (module
    level: TorchRL's worker processes unpickle it). Seeded by a first gymnasium reset, as
    ``AsyncEnvPool`` has no ``set_seed``; TorchRL's resets then go on from that seed."""
    from torchrl.envs import GymWrapper

    gym = env()
    gym.reset(seed=seed)
    return GymWrapper(gym, categorical_action_encoding=True)


def _torchrl_pool(env: EnvFactory, n: int, pool: bool, seed: int) -> Any:
    """``n`` envs seeded as the other rows' envs at the same positions."""
    from torchrl.envs import AsyncEnvPool, ParallelEnv

    import aioenv

    makers = [functools.partial(_torchrl_env, env, s) for s in aioenv.worker_seeds(seed, n)]
    if pool:
        return AsyncEnvPool(makers, backend="multiprocessing", exchange="auto")
    return ParallelEnv(n, makers)


class TorchRLVector:
    """TorchRL's ``ParallelEnv`` or ``AsyncEnvPool`` behind the lockstep loop's interface:
    ``step_and_maybe_reset`` on every env, so no step that follows is a reset (see the
    module's docstring)."""

    def __init__(self, env: EnvFactory, n: int, seed: int, *, pool: bool = False) -> None:
        import torch

        self._torch = torch
        self.envs = _torchrl_pool(env, n, pool, seed)
        self._no_reset = np.zeros(n, np.bool_)
        self._next: Any = None

    def reset(self, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self._next = self.envs.reset()  # seeded when built
        return self._next["observation"].numpy(), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        self._next["action"] = self._torch.as_tensor(np.asarray(actions))
        stepped, self._next = self.envs.step_and_maybe_reset(self._next)
        rewards = stepped["next", "reward"].numpy().reshape(-1)
        return self._next["observation"].numpy(), rewards, self._no_reset, self._no_reset, {}

    def close(self) -> None:
        self.envs.close()


def run_torchrl(
    label: str,
    env: EnvFactory,
    n: int,
    *,
    policy: Any,
    seed: int,
    timing: Timing,
    account: CpuAccount,
) -> Sample:
    """W1, W2: TorchRL's ``ParallelEnv`` stepped in lockstep, or ``AsyncEnvPool``'s
    first-ready loop (see the module's docstring); env steps per second, a reset done in
    the step that ends an episode counted with it (as SB3's rows count theirs)."""
    import torch

    started = time.perf_counter()
    envs = _torchrl_pool(env, n, label == TORCHRL_POOL, seed)
    try:
        state = envs.reset()
        build_s = time.perf_counter() - started
        meter = Meter(timing, account)
        if label != TORCHRL_POOL:
            while meter.running():
                state["action"] = torch.as_tensor(policy.many(state["observation"].numpy()))
                _, state = envs.step_and_maybe_reset(state)
                meter.count += n
            return meter.sample(build_s)
        state["action"] = torch.as_tensor(policy.many(state["observation"].numpy()))
        envs.async_step_and_maybe_reset_send(state)
        while meter.running():
            _, ready = envs.async_step_and_maybe_reset_recv(min_get=1)
            ready["action"] = torch.as_tensor(policy.many(ready["observation"].numpy()))
            envs.async_step_and_maybe_reset_send(ready)
            meter.count += len(ready)
        envs.async_step_and_maybe_reset_recv(min_get=n)  # the steps still in flight
        return meter.sample(build_s)
    finally:
        envs.close()


def _puffer_vector(env: EnvFactory, n: int, batch_size: int) -> Any:
    """PufferLib's ``Multiprocessing`` over ``n`` envs, one worker per core (the CPUs
    this process may use, at most the physical cores), ``recv`` returning ``batch_size``
    envs: whole workers, so the envs per worker divide it."""
    import psutil
    import pufferlib.emulation
    import pufferlib.vector

    usable = len(os.sched_getaffinity(0))
    usable = min(usable, psutil.cpu_count(logical=False) or usable)
    # The fewest envs per worker that leave a worker per core at most; a batch smaller
    # than a core's share takes more workers than cores, which PufferLib must be told.
    per_worker = next(
        (k for k in range(math.ceil(n / usable), batch_size + 1) if batch_size % k == 0),
        batch_size,
    )
    workers = n // per_worker
    return pufferlib.vector.make(
        functools.partial(pufferlib.emulation.GymnasiumPufferEnv, env_creator=env),
        backend=pufferlib.vector.Multiprocessing,
        num_envs=n,
        num_workers=workers,
        batch_size=batch_size,
        overwork=workers > usable,
    )


def _close_puffer(vector: Any) -> None:
    vector.close()
    for process in vector.processes:
        process.join(_PUFFER_EXIT_S)


class PufferVector:
    """PufferLib's ``Multiprocessing`` (lockstep: ``batch_size`` is every env) behind the
    lockstep loop's interface. Like gymnasium's default, an env whose episode ended is
    reset at its next step (the action is ignored, the reply is the reset's)."""

    def __init__(self, env: EnvFactory, n: int, seed: int) -> None:
        self.envs = _puffer_vector(env, n, n)

    def reset(self, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        observations, _ = self.envs.reset(seed if seed is not None else 0)
        return observations, {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        observations, rewards, terminated, truncated, _ = self.envs.step(actions)
        return observations, rewards, terminated, truncated, {}

    def close(self) -> None:
        _close_puffer(self.envs)


class PufferPipelined:
    """PufferLib's ``Multiprocessing`` with ``recv`` returning ``batch_size`` envs (the
    first worker ready) behind the pipelined loop's interface: ``send`` goes to the envs of
    the last ``recv``, as PufferLib's does, so its ``env_ids`` are those."""

    def __init__(self, env: EnvFactory, n: int, batch_size: int) -> None:
        self.envs = _puffer_vector(env, n, batch_size)

    def async_reset(self, *, seed: int) -> None:
        self.envs.async_reset(seed)

    def recv(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        received = self.envs.recv()
        observations, rewards, terminated, truncated = received[:4]
        return observations, rewards, terminated, truncated, {"env_id": received[-2]}

    def send(self, actions: Any, env_ids: Any) -> None:
        self.envs.send(actions)

    def close(self) -> None:
        _close_puffer(self.envs)

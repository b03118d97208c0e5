"""W13: a training script that pipelines, EnvPool's way, against lockstep loops.

``AioVectorEnv(..., batch_size=B)``: ``async_reset()``, then ``recv()`` the first B envs
to finish and ``send(policy(observations), info["env_id"])`` to them, so the policy runs
on one batch while the other envs step. The lockstep rows (lockstep.py) run the same
policy on the same B envs at a time: B-sized slices of each lockstep step's batch
(``policies.OnParts``), so every row pays for the same policy work per env step.

PufferLib's own send/recv runs the same loop (``PIPELINERS``, see peers.py): its ``recv``
returns the first worker ready, whose envs the next ``send`` goes to. So does the bare
reference (``bare.BarePipelined``): a child per B envs, the script blocking in ``select``;
AioVectorEnv in that same layout (process workers of B envs) is a row of its own, since
the default steps cheap envs in line.

Steps are env transitions: the replies to resets (the first of each env, and the reset
observation after an episode ends, ``"next_step"`` autoreset) are not counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from bare import BarePipelined
from envs import EnvFactory
from machine import CpuAccount
from peers import PUFFER_PIPELINED, PufferPipelined
from policies import BatchPolicy
from runners import Meter, Sample, Timing
from threadpoolctl import threadpool_limits

import aioenv

__all__ = [
    "BARE_PIPELINED",
    "PIPELINED",
    "PIPELINED_CHILDREN",
    "PIPELINERS",
    "Pipelined",
    "run_pipelined",
]

#: The pipelined row (the lockstep rows of W13 are lockstep.py's).
PIPELINED = "AioVectorEnv pipelined: send/recv"
#: The same in the reference's layout: process workers of B envs, a child each.
PIPELINED_CHILDREN = "AioVectorEnv pipelined: a child per B envs"
#: The reference row (see :class:`bare.BarePipelined`).
BARE_PIPELINED = "reference: bare pipelined (a child per B envs)"


class Pipelined(Protocol):
    """What the pipelined loop needs of a vector env (aioenv's or PufferLib's)."""

    def async_reset(self, *, seed: int) -> None: ...

    def recv(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]: ...

    def send(self, actions: Any, env_ids: Any) -> None: ...

    def close(self) -> None: ...


#: The pipelined rows: label -> how to build the vector env (env factory, n, batch size).
PIPELINERS: dict[str, Callable[[EnvFactory, int, int], Pipelined]] = {
    # Process workers, grouped by default to fit the batch.
    PIPELINED: lambda env, n, batch_size: aioenv.AioVectorEnv(env, n, batch_size=batch_size),
    PIPELINED_CHILDREN: lambda env, n, batch_size: aioenv.AioVectorEnv(
        env, n, batch_size=batch_size, mode="process", envs_per_worker=batch_size
    ),
    PUFFER_PIPELINED: PufferPipelined,
    BARE_PIPELINED: BarePipelined,
}


@threadpool_limits.wrap(limits=1, user_api="blas")
def run_pipelined(
    label: str,
    env: EnvFactory,
    n: int,
    batch_size: int,
    policy: BatchPolicy,
    *,
    seed: int,
    timing: Timing,
    account: CpuAccount,
) -> Sample:
    """Measure the send/recv loop over the vector env of row ``label`` (``PIPELINERS``)."""
    started = time.perf_counter()
    vector = PIPELINERS[label](env, n, batch_size)
    try:
        vector.async_reset(seed=seed)
        build_s = time.perf_counter() - started
        resetting = np.ones(n, np.bool_)  # every env's first reply is its reset
        meter = Meter(timing, account)
        while meter.running():
            observations, _, terminated, truncated, infos = vector.recv()
            env_ids = infos["env_id"]
            meter.count += len(env_ids) - int(resetting[env_ids].sum())
            resetting[env_ids] = terminated | truncated
            vector.send(policy(observations), env_ids)
    finally:
        vector.close()
    return meter.sample(build_s)

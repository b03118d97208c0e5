"""W13: a training script that pipelines, EnvPool's way, against lockstep loops.

``AioVectorEnv(..., batch_size=B)``: ``async_reset()``, then ``recv()`` the first B envs
to finish and ``send(policy(observations), info["env_id"])`` to them, so the policy runs
on one batch while the other envs step. The lockstep rows (lockstep.py) run the same
policy on the same B envs at a time: B-sized slices of each lockstep step's batch
(``policies.OnParts``), so every row pays for the same policy work per env step.

Steps are env transitions: the replies to resets (the first of each env, and the reset
observation after an episode ends, ``"next_step"`` autoreset) are not counted.
"""

from __future__ import annotations

import time

import numpy as np
from envs import EnvFactory
from machine import CpuAccount
from policies import BatchPolicy
from runners import Meter, Sample, Timing
from threadpoolctl import threadpool_limits

import aioenv

__all__ = ["PIPELINED", "run_pipelined"]

#: The pipelined row (the lockstep rows of W13 are lockstep.py's).
PIPELINED = "AioVectorEnv pipelined: send/recv"


@threadpool_limits.wrap(limits=1, user_api="blas")
def run_pipelined(
    env: EnvFactory,
    n: int,
    batch_size: int,
    policy: BatchPolicy,
    *,
    seed: int,
    timing: Timing,
    account: CpuAccount,
) -> Sample:
    """Measure the send/recv loop over ``AioVectorEnv(env, n, batch_size=batch_size)``
    (process workers, grouped by default to fit the batch)."""
    started = time.perf_counter()
    vector = aioenv.AioVectorEnv(env, n, batch_size=batch_size)
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

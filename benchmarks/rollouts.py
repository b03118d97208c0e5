"""W9 and W10: where the policy runs, and what collect() costs.

W9 plays CartPole-v1 on 8 process workers with a small numpy MLP (4-64-2, tanh): in the
workers (``pool.set_policy`` once, then ``pool.rollout`` segments: one message per
segment) against in the parent (a ``get_batch`` loop that runs the MLP on every batch of
ready states: one round trip per step).

W10 runs the same parent-side policy through ``Collector.collect(num_steps=...,
boundary="step")`` and through a hand-written ``get_batch`` loop that keeps the same
transitions (observation, action, reward, flags, next observation per row, in lists) and
stacks them into arrays at the same points: the difference is collect()'s overhead.

Steps are env transitions in every row (the replies to resets are not counted).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from envs import EnvFactory
from machine import CpuAccount
from runners import Meter, Sample, Timing, run_coroutine

import aioenv

__all__ = ["ROLLOUT_ROWS", "SEGMENT", "SmallMlp", "run_rollout_row"]

#: Transitions per env in one W9 segment, and per collect() call in W10 (per pool).
SEGMENT = 256


class SmallMlp:
    """A 4-64-2 tanh network with fixed random weights; one observation or a batch."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.w1 = rng.normal(0, 0.5, (4, 64)).astype(np.float32)
        self.w2 = rng.normal(0, 0.2, (64, 2)).astype(np.float32)

    def __call__(self, observations: np.ndarray[Any, Any]) -> Any:
        scores = np.tanh(observations @ self.w1) @ self.w2
        if scores.ndim == 1:
            return int(scores.argmax())
        return scores.argmax(axis=1)

    def on_batch(self, batch: aioenv.Batch[Any]) -> Any:
        return self(batch.observations)


async def _in_workers(n: int, seed: int, timing: Timing, account: CpuAccount) -> Sample:
    started = time.perf_counter()
    async with aioenv.make_pool("CartPole-v1", n, mode="process", seed=seed) as pool:
        await pool.set_policy(SmallMlp(seed))
        await pool.rollout(1)  # every env built and reset before the clock starts
        build_s = time.perf_counter() - started
        meter = Meter(timing, account)
        while meter.running():
            meter.count += len(await pool.rollout(SEGMENT))
    return meter.sample(build_s)


async def _parent_policy(n: int, seed: int, timing: Timing, account: CpuAccount) -> Sample:
    started = time.perf_counter()
    policy = SmallMlp(seed)
    async with aioenv.make_pool("CartPole-v1", n, mode="process", seed=seed) as pool:
        first = await pool.reset_all()
        build_s = time.perf_counter() - started
        for action, worker_id in zip(policy.on_batch(first).tolist(), range(n), strict=True):
            pool.send_action(action, worker_id)
        resetting = [False] * n
        meter = Meter(timing, account)
        while meter.running():
            batch = await pool.get_batch()
            actions = policy(batch.observations).tolist()
            dones = batch.dones.tolist()
            for index, worker_id in enumerate(batch.worker_ids.tolist()):
                meter.count += not resetting[worker_id]
                resetting[worker_id] = dones[index]
                pool.send_action(aioenv.RESET if dones[index] else actions[index], worker_id)
    return meter.sample(build_s)


async def _collect(n: int, seed: int, timing: Timing, account: CpuAccount) -> Sample:
    started = time.perf_counter()
    policy = SmallMlp(seed)
    async with aioenv.make_pool("CartPole-v1", n, mode="process", seed=seed) as pool:
        collector = aioenv.Collector(pool, policy.on_batch)
        await collector.collect(num_steps=n, boundary="step")  # builds and resets every env
        build_s = time.perf_counter() - started
        meter = Meter(timing, account)
        while meter.running():
            meter.count += len(await collector.collect(num_steps=SEGMENT, boundary="step"))
    return meter.sample(build_s)


async def _hand_loop(n: int, seed: int, timing: Timing, account: CpuAccount) -> Sample:
    started = time.perf_counter()
    policy = SmallMlp(seed)
    async with aioenv.make_pool("CartPole-v1", n, mode="process", seed=seed) as pool:
        first = await pool.reset_all()
        build_s = time.perf_counter() - started
        seen = list(first.observations)
        sent: list[Any] = [None] * n
        for worker_id, action in enumerate(policy.on_batch(first).tolist()):
            pool.send_action(action, worker_id)
            sent[worker_id] = action
        meter = Meter(timing, account)
        while meter.running():
            meter.count += await _hand_collect(pool, policy, seen, sent, SEGMENT)
    return meter.sample(build_s)


async def _hand_collect(
    pool: aioenv.WorkerPool[Any], policy: SmallMlp, seen: list[Any], sent: list[Any], quota: int
) -> int:
    """Take states until ``quota`` transitions are kept, then stack them into arrays."""
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "act", "rew", "term", "trunc", "next")}
    while len(rows["rew"]) < quota:
        batch = await pool.get_batch()
        actions = policy(batch.observations).tolist()
        for index, worker_id in enumerate(batch.worker_ids.tolist()):
            state = batch.states[index]
            if sent[worker_id] is not aioenv.RESET:
                row = (seen[worker_id], sent[worker_id], state.reward, state.terminated)
                for key, value in zip(
                    rows, (*row, state.truncated, state.observation), strict=True
                ):
                    rows[key].append(value)
            seen[worker_id] = state.observation
            action = aioenv.RESET if state.terminated or state.truncated else actions[index]
            sent[worker_id] = action
            pool.send_action(action, worker_id)
    arrays = {key: np.asarray(values) for key, values in rows.items()}
    return len(arrays["rew"])


Measure = Callable[[int, int, Timing, CpuAccount], Any]

#: The rows: label -> (workload, coroutine function measuring it).
ROLLOUT_ROWS: dict[str, tuple[str, Measure]] = {
    "aioenv process / rollout in workers": ("W9", _in_workers),
    "aioenv process / policy in parent": ("W9", _parent_policy),
    "aioenv process / collect()": ("W10", _collect),
    "aioenv process / hand get_batch loop": ("W10", _hand_loop),
}


def run_rollout_row(
    label: str, env: EnvFactory, n: int, *, seed: int, timing: Timing, account: CpuAccount
) -> Sample:
    """Measure row ``label`` (its env is CartPole-v1 whatever ``env`` is)."""
    _, measure = ROLLOUT_ROWS[label]
    sample: Sample = run_coroutine(measure(n, seed, timing, account))
    return sample

"""How one figure is measured, and the runners for aioenv and gymnasium's vector envs.

Every measurement builds its pool (or vector env), takes the first reset of every env,
runs a warm-up, then counts env steps during a fixed wall-clock window, and closes the
pool. One env step is one transition: the replies to resets (aioenv's ``RESET``, or
gymnasium's next-step autoreset) are not counted, on either side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

import gymnasium
import numpy as np
import uvloop
from envs import EnvFactory, Policy, SleepyEnv, first_wait
from machine import CpuAccount, load_average

import aioenv

__all__ = [
    "Api",
    "GymKind",
    "Loop",
    "Meter",
    "Sample",
    "Timing",
    "calibrate_sleep",
    "run_aioenv",
    "run_bare_tasks",
    "run_gym",
    "run_coroutine",
]

T = TypeVar("T")
Api = Literal["state", "batch", "vector"]
GymKind = Literal["sync", "async"]
Loop = Literal["uvloop", "asyncio"]


@dataclasses.dataclass(frozen=True)
class Timing:
    warmup: float  # seconds run before the window opens
    budget: float  # seconds the window stays open


@dataclasses.dataclass
class Sample:
    """One measurement: ``count`` env steps (or round trips) in ``elapsed`` seconds."""

    count: int
    elapsed: float
    build_s: float  # building the pool / vector env and its first reset (not in the window)
    load1: float  # 1-minute load average just before the measurement
    # Cores used by other programs: since the previous window closed (our close, build and
    # warm-up), during this window, and over both (the span the busy mark is judged on: it
    # holds more clock ticks, so it is less noisy for short windows).
    foreign_before: float | None
    foreign_during: float | None
    foreign: float | None
    # Figures a runner measured besides the rate (the machine limit's step times).
    detail: dict[str, float] | None = None

    @property
    def rate(self) -> float:
        return self.count / self.elapsed if self.elapsed > 0 else 0.0

    def busy(self, threshold: float) -> bool:
        """Was the machine busy with something else around this measurement?"""
        return self.foreign is not None and self.foreign > threshold

    def as_dict(self, threshold: float) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "rate": self.rate,
            "busy": self.busy(threshold),
        }


class Meter:
    """Counts work during a window that opens ``timing.warmup`` seconds after creation.

    A loop calls ``running()`` before each round and adds what the round did to
    ``count``; rounds finished before the window opened are not counted. The window closes
    at the first check past its end, so ``elapsed`` covers exactly the counted rounds.
    """

    def __init__(self, timing: Timing, account: CpuAccount) -> None:
        self.count = 0
        self._timing = timing
        self._account = account
        self._load1 = load_average()[0]
        self._opens_at = time.perf_counter() + timing.warmup
        self._closes_at = 0.0
        self._counted_from = 0
        self._started = 0.0
        self._stopped = 0.0
        self._before: float | None = None
        self._during: float | None = None
        self._around: float | None = None
        self._previous = account.last
        self._window_start = account.last
        self._open = False
        self._done = False

    @property
    def counting(self) -> bool:
        """Is the window open (rounds finished now are counted)?"""
        return self._open and not self._done

    def running(self) -> bool:
        now = time.perf_counter()
        if self._done:
            return False
        if not self._open:
            if now < self._opens_at:
                return True
            self._open_window()
            return True
        if now < self._closes_at:
            return True
        self._stopped = now
        end = self._account.snapshot()
        self._during = self._account.foreign_cores(self._window_start, end)
        self._around = self._account.foreign_cores(self._previous, end)
        self._account.last = end
        self._done = True
        return False

    def _open_window(self) -> None:
        account = self._account
        self._previous = account.last
        self._window_start = account.snapshot()
        self._before = account.foreign_cores(self._previous, self._window_start)
        self._open = True
        self._counted_from = self.count
        self._started = time.perf_counter()
        self._closes_at = self._started + self._timing.budget

    def sample(self, build_s: float) -> Sample:
        assert self._done, "the loop must run until running() returns False"
        return Sample(
            count=self.count - self._counted_from,
            elapsed=self._stopped - self._started,
            build_s=build_s,
            load1=self._load1,
            foreign_before=self._before,
            foreign_during=self._during,
            foreign=self._around,
        )


def run_coroutine(coroutine: Coroutine[Any, Any, T], loop: Loop = "uvloop") -> T:
    """Run ``coroutine`` in a fresh event loop: uvloop, or asyncio's default loop."""
    return uvloop.run(coroutine) if loop == "uvloop" else asyncio.run(coroutine)


# aioenv ------------------------------------------------------------------------------------
def run_aioenv(
    env: EnvFactory,
    n: int,
    *,
    api: Api,
    policy: Policy,
    seed: int,
    timing: Timing,
    account: CpuAccount,
    **pool_options: Any,
) -> Sample:
    """Measure ``aioenv.make_pool(env, n, seed=seed, **pool_options)`` on uvloop.

    Any ``make_pool`` option goes through ``pool_options`` (``mode=...`` today; a future
    ``envs_per_process=k`` the same way). Steps are counted per env transition, so the
    figure stays comparable however many envs a worker hosts.
    """
    return run_coroutine(_measure_aioenv(env, n, api, policy, seed, timing, account, pool_options))


async def _measure_aioenv(
    env: EnvFactory,
    n: int,
    api: Api,
    policy: Policy,
    seed: int,
    timing: Timing,
    account: CpuAccount,
    pool_options: dict[str, Any],
) -> Sample:
    started = time.perf_counter()
    if api == "vector":
        return await _measure_vector_workers(env, n, policy, seed, timing, account, pool_options)
    async with aioenv.make_pool(env, n, seed=seed, **pool_options) as pool:
        pool.reset()
        # Like gymnasium's reset(): every env is built and reset before the clock starts.
        first = await pool.get_batch(min_size=len(pool))
        build_s = time.perf_counter() - started
        for step, worker_id in first:
            pool.send_action(policy.one(step.observation), worker_id)
        meter = Meter(timing, account)
        if api == "state":
            await _drive_states(pool, policy, meter)
        else:
            await _drive_batches(pool, policy, meter)
    return meter.sample(build_s)


async def _measure_vector_workers(
    env: EnvFactory,
    n: int,
    policy: Policy,
    seed: int,
    timing: Timing,
    account: CpuAccount,
    pool_options: dict[str, Any],
) -> Sample:
    """Workers that step ``envs_per_worker`` envs each (BatchStep states, next-step
    autoreset like gymnasium's), driven first-ready per worker."""
    started = time.perf_counter()
    per_worker = pool_options["envs_per_worker"]
    async with aioenv.make_pool(
        env, n // per_worker, seed=seed, autoreset="next_step", **pool_options
    ) as pool:
        first = await pool.reset_all()
        build_s = time.perf_counter() - started
        resetting = {worker_id: np.zeros(per_worker, np.bool_) for worker_id in range(len(pool))}
        act = policy.many
        for batch, worker_id in first:
            pool.send_action(act(batch.observations), worker_id)
        meter = Meter(timing, account)
        while meter.running():
            item = await pool.get_state()
            assert item is not None
            batch, worker_id = item
            meter.count += per_worker - int(resetting[worker_id].sum())
            resetting[worker_id] = batch.terminated | batch.truncated
            pool.send_action(act(batch.observations), worker_id)
        await pool.drain()
    return meter.sample(build_s)


async def _drive_states(pool: aioenv.WorkerPool[Any], policy: Policy, meter: Meter) -> None:
    """The per-state API: act on whichever env is ready first."""
    resetting = [False] * len(pool)
    act = policy.one
    reset = aioenv.RESET
    while meter.running():
        item = await pool.get_state()
        assert item is not None
        step, worker_id = item
        if resetting[worker_id]:
            resetting[worker_id] = False
        else:
            meter.count += 1
        if step.done:
            resetting[worker_id] = True
            pool.send_action(reset, worker_id)
        else:
            pool.send_action(act(step.observation), worker_id)


async def _drive_batches(pool: aioenv.WorkerPool[Any], policy: Policy, meter: Meter) -> None:
    """The batch API: take every ready state, act on the stacked observations."""
    resetting = [False] * len(pool)
    reset = aioenv.RESET
    while meter.running():
        batch = await pool.get_batch()
        actions = policy.many(batch.observations).tolist()
        dones = batch.dones.tolist()
        for index, worker_id in enumerate(batch.worker_ids.tolist()):
            if resetting[worker_id]:
                resetting[worker_id] = False
            else:
                meter.count += 1
            if dones[index]:
                resetting[worker_id] = True
                pool.send_action(reset, worker_id)
            else:
                pool.send_action(actions[index], worker_id)


# The bare asyncio reference ---------------------------------------------------------------
def run_bare_tasks(
    n: int,
    mean_s: float,
    *,
    spread: bool,
    policy: Policy,
    seed: int,
    timing: Timing,
    account: CpuAccount,
) -> Sample:
    """The same waits without aioenv, on uvloop: ``n`` tasks, each waiting for its action
    (an ``asyncio.Event``), awaiting ``asyncio.sleep(mean_s)`` and putting its id in one
    ``asyncio.Queue``, which a loop takes from, acting first-ready as ``get_state`` does.
    What the loop costs with asyncio's own primitives and nothing else: no supervision,
    no episodes, no errors. ``spread``: first waits as :class:`~envs.AsyncSleepyEnv`'s,
    from the seeds aioenv's workers would get."""
    return run_coroutine(_measure_bare_tasks(n, mean_s, spread, policy, seed, timing, account))


async def _measure_bare_tasks(
    n: int,
    mean_s: float,
    spread: bool,
    policy: Policy,
    seed: int,
    timing: Timing,
    account: CpuAccount,
) -> Sample:
    started = time.perf_counter()
    seeds = aioenv.worker_seeds(seed, n)
    observation = np.zeros(4, np.float32)
    ready: asyncio.Queue[int] = asyncio.Queue()
    actions = [asyncio.Event() for _ in range(n)]

    async def env(index: int) -> None:
        wait = first_wait(mean_s, seeds[index]) if spread else mean_s
        go = actions[index]
        while True:
            await go.wait()
            go.clear()
            await asyncio.sleep(wait)
            wait = mean_s
            ready.put_nowait(index)

    tasks = [asyncio.create_task(env(index)) for index in range(n)]
    try:
        build_s = time.perf_counter() - started
        for go in actions:
            go.set()
        act = policy.one
        meter = Meter(timing, account)
        while meter.running():
            index = await ready.get()
            act(observation)
            meter.count += 1
            actions[index].set()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return meter.sample(build_s)


# gymnasium --------------------------------------------------------------------------------
def run_gym(
    kind: GymKind,
    env: EnvFactory,
    n: int,
    *,
    policy: Policy,
    seed: int,
    timing: Timing,
    account: CpuAccount,
    **vector_options: Any,
) -> Sample:
    """Measure gymnasium's ``SyncVectorEnv`` or ``AsyncVectorEnv`` (default autoreset:
    next step, so a step after an episode ends is a reset and is not counted). Every env
    gets the same seed as the aioenv worker at the same position."""
    seeds = aioenv.worker_seeds(seed, n)
    started = time.perf_counter()
    vector: gymnasium.vector.VectorEnv[Any, Any, Any]
    if kind == "sync":
        vector = gymnasium.vector.SyncVectorEnv([env] * n, **vector_options)
    else:
        vector = gymnasium.vector.AsyncVectorEnv([env] * n, **vector_options)
    try:
        observations, _ = vector.reset(seed=seeds)
        build_s = time.perf_counter() - started
        resetting = np.zeros(n, np.bool_)
        act = policy.many
        meter = Meter(timing, account)
        while meter.running():
            observations, _, terminated, truncated, _ = vector.step(act(observations))
            meter.count += n - int(resetting.sum())
            resetting = terminated | truncated
    finally:
        vector.close()
    return meter.sample(build_s)


# Calibration ------------------------------------------------------------------------------
def calibrate_sleep(mean_s: float, sigma: float, seconds: float, seed: int) -> float:
    """The mean wall time of one ``SleepyEnv`` step as this machine runs it right now:
    the nominal mean plus the mean overshoot of ``time.sleep`` (measured on this thread).
    Using the overshoot rather than the raw mean keeps the lognormal's own sampling noise
    out of the ideal."""
    env = SleepyEnv(mean_s, sigma)
    env.reset(seed=seed)
    overshoot = 0.0
    steps = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or steps < 20:
        started = time.perf_counter()
        env.step(0)
        overshoot += time.perf_counter() - started - env.last_sleep
        steps += 1
    return mean_s + overshoot / steps

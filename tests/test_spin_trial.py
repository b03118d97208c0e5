"""Whether a vector env's children poll between lockstep steps, tried rather than guessed
(:class:`aioenv.vector._grouping.SpinTrial`): the rule fed made-up cycle times, the SPIN
request a process worker's child obeys, and an ``AioVectorEnv`` that runs its trials
while it steps as ``SyncVectorEnv`` does."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from envs import Counter
from gymnasium.vector import SyncVectorEnv
from support import cpu_seconds, totals_after

import aioenv
from aioenv.vector._grouping import SpinTrial
from aioenv.wire._frames import FrameDecoder, decode_spin, encode_spin
from aioenv.wire._requests import Request

# Serial (alone, after the parallel part of make test): it measures CPU time and times probes.
pytestmark = pytest.mark.serial


class Cycles:
    """A clock for :class:`SpinTrial` whose step cycles last what ``cost(spinning)`` says
    for the way the children were last told to wait."""

    def __init__(self, cost: Callable[[bool, int], float]) -> None:
        self.cost = cost
        self.now = 0.0
        self.spinning = True
        self.switches: list[bool] = []
        self.steps = 0

    def switch(self, spinning: bool) -> None:
        self.switches.append(spinning)
        self.spinning = spinning

    def clock(self) -> float:
        return self.now

    def run(self, trial: SpinTrial, steps: int) -> None:
        for _ in range(steps):
            trial.step_started()
            self.now += self.cost(self.spinning, self.steps)
            self.steps += 1


def _trial(cycles: Cycles, **options: Any) -> SpinTrial:
    settings: dict[str, Any] = {"first_trial": 10, "window": 4, "rounds": 3, "longest_gap": 80}
    return SpinTrial(cycles.switch, clock=cycles.clock, **{**settings, **options})


def test_children_are_put_to_sleep_where_sleeping_is_faster() -> None:
    cycles = Cycles(lambda spinning, _: 1.2 if spinning else 1.0)
    trial = _trial(cycles)
    cycles.run(trial, 9)
    assert cycles.switches == []  # nothing is tried before first_trial steps
    # A trial: 3 rounds of 4 counted cycles asleep, then 4 polling, each window's first
    # cycle left out.
    cycles.run(trial, 1 + 6 * 5)
    assert trial.trials == 1
    assert cycles.switches == [False, True, False, True, False, True, False]
    assert trial.spinning is False and cycles.spinning is False


def test_polling_stays_where_it_is_faster_and_trials_grow_rarer() -> None:
    cycles = Cycles(lambda spinning, _: 1.0 if spinning else 1.2)
    trial = _trial(cycles)
    decided: list[int] = []  # the step at which each trial ended
    started: list[int] = []  # the step at which each trial began (its first switch)
    while trial.trials < 6:
        trials, switches = trial.trials, len(cycles.switches)
        cycles.run(trial, 1)
        if trial.trials > trials:
            decided.append(cycles.steps)
        elif len(cycles.switches) > switches and len(started) == len(decided):
            started.append(cycles.steps)
    assert trial.spinning is True and cycles.spinning is True
    assert started[0] == 10  # first_trial
    # The gaps after a trial that kept the way double up to longest_gap (80).
    gaps = [begin - end for end, begin in zip(decided, started[1:], strict=False)]
    assert gaps[:3] == [20, 40, 80] and set(gaps[3:]) == {80}


def test_a_noisy_machine_keeps_the_way_it_has() -> None:
    """Asleep is faster in two rounds of three, polling in the third: no switch."""
    rounds: list[float] = []

    def cost(spinning: bool, step: int) -> float:
        window = (step - 10) // 5
        if spinning:
            return 1.0
        rounds.append(window)
        return 0.9 if window in (0, 2) else 1.1

    cycles = Cycles(cost)
    trial = _trial(cycles)
    cycles.run(trial, 10 + 6 * 5)
    assert trial.trials == 1
    assert trial.spinning is True and cycles.switches[-1] is True


def test_a_slow_step_now_and_then_does_not_decide() -> None:
    """A training update between two steps is one slow cycle: the window's median holds."""
    cycles = Cycles(lambda spinning, step: 50.0 if step % 5 == 3 else (1.0 if spinning else 1.2))
    trial = _trial(cycles)
    cycles.run(trial, 10 + 6 * 5)
    assert trial.trials == 1 and trial.spinning is True


def test_a_cycle_across_a_switch_does_not_count() -> None:
    """Windows of one cycle each: the cycle that spans a switch costs 100 (its child waited
    the old way); counted, it would be every window's measurement and hide that asleep
    is faster."""
    switched_at: list[int] = []

    def cost(spinning: bool, step: int) -> float:
        if switched_at and step == switched_at[-1]:
            return 100.0
        return 1.0 if spinning else 0.8

    cycles = Cycles(cost)

    def switch(spinning: bool) -> None:
        cycles.switch(spinning)
        switched_at.append(cycles.steps)

    trial = SpinTrial(switch, clock=cycles.clock, first_trial=3, window=1, rounds=2)
    cycles.run(trial, 3 + 4 * 2)
    assert trial.trials == 1 and trial.spinning is False


def test_a_cycle_with_a_reset_in_it_does_not_count() -> None:
    cycles = Cycles(lambda spinning, _: 1.0 if spinning else 0.8)
    trial = SpinTrial(cycles.switch, clock=cycles.clock, first_trial=3, window=1, rounds=1)
    cycles.run(trial, 4)  # the trial's first window (asleep) began, its first cycle left out
    trial.interrupted()
    cycles.now += 1000.0  # reset() took this long between two steps
    cycles.run(trial, 4)
    assert trial.trials == 1 and trial.spinning is False


def test_the_spin_request_round_trips_the_wire() -> None:
    decoder = FrameDecoder()
    frames = list(decoder.feed(encode_spin(0.002, 3) + encode_spin(0.0, 1)))
    assert [(kind, seq, slot) for kind, seq, slot, _ in frames] == [
        (Request.SPIN, 0, 3),
        (Request.SPIN, 0, 1),
    ]
    assert [decode_spin(frame) for *_, frame in frames] == [0.002, 0.0]


async def test_a_child_told_to_sleep_steps_the_same_and_stops_polling() -> None:
    """A worker made polling, told mid-run to sleep and back, many times, answers every
    step as a worker that never polled; told to sleep, its child leaves the core alone
    between steps (polling, it would spend most of each 4 ms gap on it)."""
    async with (
        aioenv.make_pool(Counter, 2, mode="process", seed=3, idle_spin=0.01) as told,
        aioenv.make_pool(Counter, 2, mode="process", seed=3) as sleeping,
    ):
        for pool in (told, sleeping):
            await pool.reset_all()
        workers = [worker for worker in told.workers if isinstance(worker, aioenv.ProcessWorker)]
        for t in range(40):
            for worker in workers:
                worker.set_idle_spin(0.0 if t % 3 else 0.01)
            assert await totals_after(told, t) == await totals_after(sleeping, t)
        for worker in workers:
            worker.set_idle_spin(0.0)
            assert worker.idle_spin == 0.0
        pid = workers[0].pid
        before = cpu_seconds(pid)
        for t in range(60):
            told.send_action(t, 0)
            await told.get_state()
            await asyncio.sleep(0.004)
        assert cpu_seconds(pid) - before < 0.1


def test_an_engine_child_told_to_sleep_steps_the_same_and_stops_polling() -> None:
    """The spin trial's switch reaches an AioVectorEnv's children (through the step
    buffer): told to sleep and back, many times, they step as children that never polled;
    told to sleep, a child leaves the core alone between steps (polling, it would spend
    most of each 4 ms gap on it)."""
    with (
        aioenv.AioVectorEnv(
            "CartPole-v1", 2, mode="process", envs_per_worker=2, idle_spin=0.01
        ) as told,
        aioenv.AioVectorEnv("CartPole-v1", 2, mode="process", envs_per_worker=2) as sleeping,
    ):
        for envs in (told, sleeping):
            envs.reset(seed=3)
        for t in range(40):
            told._envs.set_idle_spin(0.0 if t % 3 else 0.01)  # as the trial switches
            ours, theirs = told.step(np.array([t % 2] * 2)), sleeping.step(np.array([t % 2] * 2))
            for x, y in zip(ours[:4], theirs[:4], strict=True):
                np.testing.assert_array_equal(x, y)
        told._envs.set_idle_spin(0.0)
        assert told.idle_spin == 0.0
        (pid,) = set(told.apply(lambda env: os.getpid()))
        before = cpu_seconds(pid)
        for t in range(60):
            told.step(np.array([t % 2] * 2))
            time.sleep(0.004)
        assert cpu_seconds(pid) - before < 0.1


@pytest.mark.parametrize("seconds", [-1e-3, 0.5, "fast", True])
async def test_a_bad_spin_is_a_clear_error(seconds: Any) -> None:
    worker: aioenv.ProcessWorker[Any] = aioenv.ProcessWorker(Counter, idle_spin=0.002)
    async with worker:
        with pytest.raises(ValueError, match="idle_spin must be a number of seconds from 0"):
            worker.set_idle_spin(seconds)
        assert worker.idle_spin == 0.002


def test_vector_env_tries_its_children_asleep_and_steps_as_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Children that poll by the rule (a core each) are tried asleep while the vector env
    steps; whatever each trial decides, every step matches SyncVectorEnv's."""
    from aioenv.vector import _grouping as _layout

    monkeypatch.setattr(_layout, "usable_cores", lambda: 4)
    import gymnasium

    def make() -> gymnasium.Env[Any, Any]:
        return gymnasium.make("CartPole-v1")

    ours = aioenv.AioVectorEnv(make, 4, mode="process", envs_per_worker=2)
    theirs = SyncVectorEnv([make] * 4)
    try:
        assert ours.idle_spin == _layout.LOCKSTEP_IDLE_SPIN
        trial = ours._spin_trial
        assert trial is not None
        for observations in (ours.reset(seed=7)[0], theirs.reset(seed=7)[0]):
            assert observations.shape == (4, 4)
        rng = np.random.default_rng(0)
        steps = 0
        while trial.trials < 2:
            actions = rng.integers(2, size=4)
            a, b = ours.step(actions), theirs.step(actions)
            for x, y in zip(a[:4], b[:4], strict=True):
                np.testing.assert_array_equal(x, y)
            steps += 1
            assert steps < 5_000
        assert ours.idle_spin in (0.0, _layout.LOCKSTEP_IDLE_SPIN)
        assert ours.idle_spin == (_layout.LOCKSTEP_IDLE_SPIN if trial.spinning else 0.0)
    finally:
        ours.close()
        theirs.close()


def test_an_asked_spin_is_never_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    from aioenv.vector import _grouping as _layout

    monkeypatch.setattr(_layout, "usable_cores", lambda: 4)
    with aioenv.AioVectorEnv(
        "CartPole-v1", 4, mode="process", envs_per_worker=2, idle_spin=0.002
    ) as envs:
        assert envs._spin_trial is None
        envs.reset(seed=1)
        for _ in range(300):
            envs.step(envs.action_space.sample())
        assert envs.idle_spin == 0.002
    with aioenv.AioVectorEnv("CartPole-v1", 4, mode="inline") as inline:
        assert inline.idle_spin is None

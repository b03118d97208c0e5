"""The supervisor's state machine on a fake clock: no process, thread or event loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import aioenv
import aioenv.pool._options
from aioenv.core._environment import BatchStep, Step
from aioenv.core._seeds import restart_seed
from aioenv.core._supervision import Supervision, episode_ended, request_phase, timeout_error
from aioenv.core._supervisor import Remedies, Supervisor


class FakeClock:
    """Timers that fire only when the test advances time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> FakeTimer:
        timer = FakeTimer(self.now + delay, callback, args)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in sorted(self.timers, key=lambda t: t.when):
            if timer.when <= self.now and not timer.cancelled:
                timer.cancelled = True
                timer.callback(*timer.args)

    def pending(self) -> list[FakeTimer]:
        return [timer for timer in self.timers if not timer.cancelled]


@dataclasses.dataclass
class FakeTimer:
    when: float
    callback: Callable[..., object]
    args: tuple[Any, ...]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeWorker(Remedies):
    """Records what the supervisor asks of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.awaited = 0

    def _discard_env(self, env_gone: bool) -> None:
        self.calls.append(("discard", env_gone))

    def _start_env(self, seq: int, seed: int | None, reason: str) -> None:
        self.calls.append(("start", seq, seed))

    def _fail_request(self, error: aioenv.WorkerError, for_good: bool) -> None:
        self.calls.append(("fail", error, for_good))

    def _fail_controls(self, error: aioenv.WorkerError) -> None:
        self.calls.append(("fail_controls", error))

    def _awaiting(self, seq: int) -> bool:
        return seq == self.awaited

    def _timed_out(self, seq: int, timeout: float, elapsed: float) -> None:
        self.calls.append(("time_out", seq, elapsed))


def supervisor(**options: Any) -> tuple[Supervisor, FakeWorker, FakeClock]:
    worker = FakeWorker()
    reports: list[aioenv.WorkerError] = []
    options.setdefault("on_failure", reports.append)
    return Supervisor(Supervision(**options), 7, worker), worker, FakeClock()


def error(message: str = "boom") -> aioenv.WorkerError:
    return aioenv.WorkerError(message, worker_id=0)


@pytest.mark.loops
def test_a_deadline_fires_only_for_the_request_still_awaited() -> None:
    sup, worker, clock = supervisor(step_timeout=1.0)
    sup.answered()  # the env has started: step deadlines apply
    worker.awaited = 1
    sup.arm(clock, 1)
    clock.advance(0.5)
    assert worker.calls == []
    clock.advance(0.6)
    assert worker.calls == [("time_out", 1, pytest.approx(1.1))]
    worker.calls.clear()
    sup.arm(clock, 2)  # answered in time: disarmed before it fires
    worker.awaited = 2
    sup.answered()
    clock.advance(5)
    assert worker.calls == []
    sup.arm(clock, 3)  # the worker moved on (closed, say): nothing fires
    worker.awaited = 0
    clock.advance(5)
    assert worker.calls == []


@pytest.mark.loops
def test_start_up_gets_the_longer_deadline_until_the_env_answers() -> None:
    sup, _, _ = supervisor(step_timeout=2.0)
    assert sup.timeout() == 60.0  # max(step_timeout, 60) while starting
    assert sup.answered() is True
    assert sup.timeout() == 2.0
    assert sup.answered() is False  # only the first answer is the first
    assert supervisor(step_timeout=2.0, start_timeout=5.0)[0].timeout() == 5.0
    assert supervisor()[0].timeout() is None


def test_without_restarts_a_failure_is_raised_and_a_dead_env_is_dropped_for_good() -> None:
    sup, worker, clock = supervisor()
    worker.awaited = 4
    for _ in range(3 * Supervision().max_restarts):  # no budget applies with restarts off
        worker.calls.clear()
        sup.failed(failure := error(), env_gone=False, in_flight=4, clock=clock)
        assert worker.calls == [("fail", failure, False)]  # the env raised: it stays usable
    worker.calls.clear()
    sup.failed(death := error("died"), env_gone=True, in_flight=4, clock=clock)
    assert worker.calls == [
        ("fail_controls", death),
        ("discard", True),
        ("fail", death, True),
    ]
    assert sup.restarts == 0


def test_restarts_back_off_doubling_and_stop_at_the_budget() -> None:
    reports: list[aioenv.WorkerError] = []
    sup, worker, clock = supervisor(
        restart="on_failure", max_restarts=2, restart_backoff=0.5, on_failure=reports.append
    )
    worker.awaited = 1
    sup.failed(first := error("first"), env_gone=False, in_flight=1, clock=clock)
    assert worker.calls == [("fail_controls", first), ("discard", False)]
    assert [timer.when for timer in clock.pending()] == [0.5]
    clock.advance(0.5)
    assert worker.calls[-1] == ("start", 1, restart_seed(7, 1))
    sup.failed(second := error("second"), env_gone=True, in_flight=1, clock=clock)
    assert [timer.when - clock.now for timer in clock.pending()] == [1.0]  # doubled
    clock.advance(1.0)
    assert worker.calls[-1] == ("start", 1, restart_seed(7, 2))
    worker.calls.clear()
    sup.failed(third := error("third"), env_gone=True, in_flight=1, clock=clock)
    assert worker.calls == [("fail_controls", third), ("discard", True), ("fail", third, True)]
    assert sup.restarts == 2
    assert reports == [first, second, third]  # every failure is reported, restarted or not


def test_an_on_failure_that_raises_is_a_warning_and_the_restart_goes_on() -> None:
    def broken(error: aioenv.WorkerError) -> None:
        raise KeyError("the user's logger is gone")

    sup, worker, clock = supervisor(restart="on_failure", restart_backoff=0.5, on_failure=broken)
    worker.awaited = 1
    with pytest.warns(RuntimeWarning, match="on_failure callback raised KeyError"):
        sup.failed(first := error("first"), env_gone=True, in_flight=1, clock=clock)
    assert worker.calls == [("fail_controls", first), ("discard", True)]
    clock.advance(0.5)
    assert worker.calls[-1] == ("start", 1, restart_seed(7, 1))


def test_a_success_ends_the_streak_and_names_the_restart_it_completes() -> None:
    sup, worker, clock = supervisor(restart="on_failure", max_restarts=5, restart_backoff=1.0)
    worker.awaited = 1
    sup.failed(error("x"), env_gone=False, in_flight=1, clock=clock)
    clock.advance(1.0)
    assert sup.starting
    assert sup.answered(state=True)  # the new env's first answer
    assert sup.restart_completed == "WorkerError: x"  # the worker annotates this state with it
    assert not sup.answered(state=True)
    assert sup.restart_completed is None
    sup.failed(error("y"), env_gone=False, in_flight=1, clock=clock)
    assert [timer.when - clock.now for timer in clock.pending()] == [1.0]  # not 2.0


def test_the_backoff_stays_at_its_cap_however_many_failures_come_in_a_row() -> None:
    # An env that fails at every start, under the rate rule, whose budget a backoff capped
    # at 10 s never spends: at the 1025th failure in a row (about three hours) the doubling
    # left a float's range, and the supervisor raised OverflowError.
    sup, worker, clock = supervisor(
        restart="on_failure", max_restarts=5, restart_window=1.0, restart_backoff=0.5
    )
    worker.awaited = 1
    for _ in range(1100):
        sup.failed(error(), env_gone=False, in_flight=1, clock=clock)
        clock.advance(10.0)  # the restart starts, and its env fails again
    sup.failed(error(), env_gone=False, in_flight=1, clock=clock)
    assert [timer.when - clock.now for timer in clock.pending()] == [10.0]
    assert sup.restarts == 1101


def test_settled_holds_only_while_an_answer_would_change_nothing() -> None:
    """A worker skips answered() while the supervisor is settled: a deadline running, a
    failure counted, a restart and the state that completes it each unsettle it."""
    sup, worker, clock = supervisor(restart="on_failure", step_timeout=1.0, restart_backoff=1.0)
    assert not sup.settled  # starting: the first answer ends the start-up deadline
    sup.answered(state=True)
    assert sup.settled
    worker.awaited = 1
    sup.arm(clock, 1)
    assert not sup.settled  # a step deadline runs: the answer must disarm it
    sup.answered(state=True)
    assert sup.settled and clock.pending() == []
    sup.failed(error("x"), env_gone=False, in_flight=1, clock=clock)
    assert not sup.settled
    clock.advance(1.0)  # the restart starts a new env
    assert not sup.settled
    sup.answered(state=True)
    # This state completes the restart (the worker names it on it); the next must not.
    assert sup.restart_completed == "WorkerError: x" and not sup.settled
    sup.answered(state=True)
    assert sup.restart_completed is None and sup.settled


def test_a_failure_ends_the_deadline_and_the_budget_of_the_request_it_answers() -> None:
    # The restart answers the same request: a timer left armed would time it out again
    # while it waits out its backoff, and end an episode the failure already ended.
    budget_ends: list[str] = []
    sup, worker, clock = supervisor(restart="on_failure", step_timeout=1.0, restart_backoff=2.0)
    sup.answered()
    worker.awaited = 1
    sup.arm(clock, 1)
    sup.arm_budget(clock, 1.5, lambda: budget_ends.append("ran out"))
    clock.advance(0.2)
    sup.failed(error(), env_gone=False, in_flight=1, clock=clock)
    clock.advance(1.9)  # past both timers, before the restart
    assert not any(call[0] == "time_out" for call in worker.calls) and budget_ends == []
    clock.advance(0.1)
    assert worker.calls[-1] == ("start", 1, restart_seed(7, 1)) and sup.restarts == 1


def test_a_new_env_that_fails_leaves_no_restart_to_name_on_the_next_state() -> None:
    # With restarts off, an episode budget's new env that raises is kept: the state it
    # answers next completes no restart, so the worker marks nothing on it.
    sup, worker, clock = supervisor(episode_timeout=5.0)
    sup.answered()
    worker.awaited = 1
    sup.end_episode(1, clock)
    clock.advance(0)
    assert worker.calls == [("start", 1, restart_seed(7, 1))]
    sup.failed(failure := error(), env_gone=False, in_flight=1, clock=clock)
    assert worker.calls[-1] == ("fail", failure, False)
    sup.answered(state=True)
    assert sup.restart_completed is None


def test_a_failure_while_idle_restarts_at_the_next_request() -> None:
    sup, worker, clock = supervisor(restart="on_failure")
    sup.failed(error("idle"), env_gone=True, in_flight=0, clock=clock)
    assert sup.pending_restart == "WorkerError: idle"
    assert clock.pending() == []  # nothing to answer yet
    worker.awaited = 9
    sup.restart(9, sup.pending_restart)
    assert sup.pending_restart is None
    assert worker.calls[-1] == ("start", 9, restart_seed(7, 1))


def test_a_restart_is_skipped_when_its_request_is_no_longer_awaited() -> None:
    sup, worker, clock = supervisor(restart="on_failure", restart_backoff=1.0)
    worker.awaited = 3
    sup.failed(error(), env_gone=False, in_flight=3, clock=clock)
    worker.awaited = 0  # closed meanwhile
    clock.advance(1.0)
    assert not any(call[0] == "start" for call in worker.calls)


def test_restart_seeds_are_deterministic_and_differ_per_restart() -> None:
    seeds = [restart_seed(7, k) for k in range(1, 4)]
    assert seeds == [restart_seed(7, k) for k in range(1, 4)]
    assert len(set(seeds)) == 3
    assert restart_seed(None, 1) is None


def fail_and_restart(
    sup: Supervisor, worker: FakeWorker, clock: FakeClock, *, env_gone: bool = True
) -> bool:
    """One failure of the request in flight; True if the worker restarted its env."""
    worker.awaited = 1
    worker.calls.clear()
    sup.failed(error(f"at {clock.now}"), env_gone=env_gone, in_flight=1, clock=clock)
    clock.advance(0)  # no backoff: the restart starts now
    return any(call[0] == "start" for call in worker.calls)


def answer(sup: Supervisor) -> None:
    """The env answers the request in flight with a state (the worker's _on_reply)."""
    sup.answered(state=True)


def given_up(worker: FakeWorker, *, env_gone: bool) -> bool:
    """The last failure gave the worker up: its env dropped, the error raised for good."""
    failure = worker.calls[-1][1]
    return worker.calls == [
        ("fail_controls", failure),
        ("discard", env_gone),
        ("fail", failure, True),
    ]


def test_failures_spread_out_never_use_up_the_restart_budget() -> None:
    sup, worker, clock = supervisor(restart="on_failure", max_restarts=3, restart_window=10.0)
    for _ in range(50):  # three failures in every 10 s, for 50 failures: a steady rate
        assert fail_and_restart(sup, worker, clock)
        clock.advance(3.4)
    assert sup.restarts == 50


def test_the_failure_that_would_make_one_restart_too_many_within_the_window_gives_up() -> None:
    sup, worker, clock = supervisor(restart="on_failure", max_restarts=3, restart_window=10.0)
    for _ in range(3):
        assert fail_and_restart(sup, worker, clock)
        clock.advance(3.0)  # the three restarts fall within 6 s
    clock.advance(0.9)  # 9.9 s after the first
    assert not fail_and_restart(sup, worker, clock)
    assert worker.calls[-1][0] == "fail" and worker.calls[-1][2] is True  # given up
    assert sup.restarts == 3


def test_a_failure_just_past_the_window_restarts() -> None:
    sup, worker, clock = supervisor(restart="on_failure", max_restarts=2, restart_window=5.0)
    assert fail_and_restart(sup, worker, clock)
    clock.advance(1.0)
    assert fail_and_restart(sup, worker, clock)
    clock.advance(4.0)  # 5 s after the first failure: it has left the window
    assert fail_and_restart(sup, worker, clock)
    assert not fail_and_restart(sup, worker, clock)  # 1 s and 0 s ago: two in the window


def test_an_infinite_restart_window_counts_restarts_over_the_lifetime() -> None:
    sup, worker, clock = supervisor(
        restart="on_failure", max_restarts=3, restart_window=float("inf")
    )
    for _ in range(3):
        assert fail_and_restart(sup, worker, clock)
        answer(sup)  # the new env's start
        answer(sup)  # progress: the rate rule does not count it
        clock.advance(3600.0)  # an hour apart
    assert not fail_and_restart(sup, worker, clock)
    assert sup.restarts == 3


def test_the_default_budget_keeps_a_worker_that_makes_progress_between_failures() -> None:
    assert Supervision().restart_window is None  # the default: the crash-loop rule
    sup, worker, clock = supervisor(restart="on_failure")
    for _ in range(1000):  # far more than max_restarts, within a few seconds
        assert fail_and_restart(sup, worker, clock, env_gone=False)
        answer(sup)  # the new env's start: no progress yet
        answer(sup)  # a successful step: progress
        clock.advance(0.005)
    assert sup.restarts == 1000


def test_progress_gives_the_crash_loop_rule_its_whole_budget_again() -> None:
    """After progress, ``max_restarts`` failures in a row restart and the next gives up:
    the count of failures since progress starts again from none."""
    sup, worker, clock = supervisor(restart="on_failure", max_restarts=2)
    assert fail_and_restart(sup, worker, clock, env_gone=False)
    answer(sup)  # the new env's start
    answer(sup)  # a successful step: progress
    for _ in range(2):  # two failures in a row, each new env failing before progress
        assert fail_and_restart(sup, worker, clock, env_gone=False)
        answer(sup)
    assert not fail_and_restart(sup, worker, clock, env_gone=False)
    assert given_up(worker, env_gone=False)
    assert sup.restarts == 3


def test_the_default_budget_gives_up_after_max_restarts_failures_in_a_row() -> None:
    sup, worker, clock = supervisor(restart="on_failure")
    for _ in range(Supervision().max_restarts):
        assert fail_and_restart(sup, worker, clock)
        answer(sup)  # each new env starts (a restart, a reconnect): that is no progress
        clock.advance(60.0)  # however slowly the loop goes round
    assert not fail_and_restart(sup, worker, clock)
    assert given_up(worker, env_gone=True)
    assert sup.restarts == Supervision().max_restarts


def test_an_env_that_raises_at_every_request_is_given_up_for_good_by_the_default() -> None:
    sup, worker, clock = supervisor(restart="on_failure", max_restarts=3)
    assert fail_and_restart(sup, worker, clock, env_gone=False)  # a step raised
    for _ in range(2):  # each new env's reset raises too: no answer at all
        assert fail_and_restart(sup, worker, clock, env_gone=False)
    assert not fail_and_restart(sup, worker, clock, env_gone=False)
    assert given_up(worker, env_gone=False)  # not kept to raise again: it is given up


def test_the_rate_rule_gives_up_within_its_window_whatever_progress_came_between() -> None:
    sup, worker, clock = supervisor(restart="on_failure", max_restarts=3, restart_window=10.0)
    for _ in range(3):
        assert fail_and_restart(sup, worker, clock, env_gone=False)
        answer(sup)
        answer(sup)  # progress, which the crash-loop rule would count and this one does not
        clock.advance(3.0)
    assert not fail_and_restart(sup, worker, clock, env_gone=False)
    assert given_up(worker, env_gone=False)
    assert sup.restarts == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"restart_window": 0}, "restart_window must be None or a number > 0, got 0"),
        ({"restart_window": -5.0}, "restart_window must be None or a number > 0"),
        ({"restart_window": "10"}, "restart_window must be None or a number > 0"),
        ({"reset_timeout": 0.0}, "reset_timeout must be None or a number > 0"),
        ({"reset_timeout": False}, "reset_timeout must be None or a number > 0"),
        ({"max_restarts": 2.5}, "max_restarts must be an int >= 0"),
    ],
)
def test_new_options_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Supervision(**options)
    with pytest.raises(ValueError, match=message):
        aioenv.pool._options.PoolOptions(**options)


@pytest.mark.parametrize("mode", ["sync", "inline"])
def test_an_on_failure_that_cannot_be_called_is_refused_at_construction(mode: str) -> None:
    # on_failure="restart" meant restart="on_failure": refused, not a warning per failure
    message = "on_failure must be None or a callable.*got 'restart'.*restart='on_failure'"
    make = aioenv.AioVectorEnv if mode == "inline" else aioenv.make_pool
    with pytest.raises(ValueError, match=message):
        make("CartPole-v1", 2, mode=mode, on_failure="restart")


@pytest.mark.loops
def test_each_phase_gets_its_own_deadline() -> None:
    options = Supervision(step_timeout=1.0, reset_timeout=30.0)
    assert options.deadline("step") == 1.0
    assert options.deadline("reset") == 30.0
    assert options.deadline("step and reset") == 31.0
    assert options.deadline("rollout", 40) == 40.0  # a segment: one step deadline per step
    assert options.deadline("start-up") == 60.0  # max(step, reset, 60)
    assert Supervision(reset_timeout=90.0).deadline("start-up") == 90.0
    assert Supervision(reset_timeout=90.0).deadline("step") is None
    assert Supervision(reset_timeout=90.0).deadline("step and reset") is None
    same = Supervision(step_timeout=2.0)  # reset_timeout None: a reset gets step_timeout
    assert (same.deadline("reset"), same.deadline("step and reset")) == (2.0, 4.0)
    assert Supervision(step_timeout=2.0, start_timeout=5.0).deadline("start-up") == 5.0


@pytest.mark.loops
def test_the_supervisor_arms_the_deadline_of_the_phase_and_names_it() -> None:
    sup, worker, clock = supervisor(step_timeout=1.0, reset_timeout=30.0)
    assert sup.phase == "start-up"
    sup.answered()
    worker.awaited = 1
    sup.arm(clock, 1, "reset")
    assert (sup.phase, sup.timeout()) == ("reset", 30.0)
    clock.advance(29.0)
    assert worker.calls == []
    sup.answered()
    worker.awaited = 2
    sup.arm(clock, 2, "step")
    clock.advance(1.5)
    assert worker.calls == [("time_out", 2, pytest.approx(1.5))]
    error = timeout_error("thread worker 0 (X)", 0, 2, sup.phase, 1.5, 1.0, "dropped")
    assert "request 2 (step) ran 1.50 s, past its deadline of 1 s; dropped" in str(error)


def test_a_step_that_may_reset_is_told_from_a_plain_step() -> None:
    ended = Step(0, 1.0, terminated=True)
    going = Step(0, 1.0)
    batch = BatchStep(np.zeros(2), np.zeros(2), np.array([False, True]), np.zeros(2, bool), {})
    assert request_phase(aioenv.RESET, "same_step", False) == "reset"
    assert request_phase(aioenv.Reset(seed=1), "disabled", False) == "reset"
    assert request_phase(1, "disabled", True) == "step"
    assert request_phase(1, "same_step", False) == "step and reset"
    assert request_phase(1, "next_step", episode_ended(ended)) == "step and reset"
    assert request_phase(1, "next_step", episode_ended(going)) == "step"
    assert episode_ended(batch)  # one env of the group resets at the next step
    assert not episode_ended(
        BatchStep(np.zeros(2), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool))
    )
    assert episode_ended({"custom": "state"})  # unreadable: it may have


@pytest.mark.loops
def test_a_workers_own_deadlines_win_over_the_pools() -> None:
    pool = Supervision(step_timeout=1.0, reset_timeout=5.0, restart="on_failure")
    merged = pool.under(Supervision(reset_timeout=30.0))
    assert (merged.step_timeout, merged.reset_timeout, merged.restart) == (1.0, 30.0, "on_failure")
    assert pool.under(Supervision()).reset_timeout == 5.0

"""The supervisor's state machine on a fake clock: no process, thread or event loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

import aioenv
from aioenv.workers._supervision import Remedies, Supervision, Supervisor, restart_seed


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


class FakeWorker:
    """Records what the supervisor asks of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.awaited = 0

    def remedies(self) -> Remedies:
        return Remedies(
            discard_env=lambda gone: self.calls.append(("discard", gone)),
            start_env=lambda seq, seed, reason: self.calls.append(("start", seq, seed)),
            fail=lambda error, for_good: self.calls.append(("fail", error, for_good)),
            fail_controls=lambda error: self.calls.append(("fail_controls", error)),
            awaiting=lambda seq: seq == self.awaited,
            time_out=lambda seq, timeout, elapsed: self.calls.append(("time_out", seq, elapsed)),
        )


def supervisor(**options: Any) -> tuple[Supervisor, FakeWorker, FakeClock]:
    worker = FakeWorker()
    reports: list[aioenv.WorkerError] = []
    options.setdefault("on_failure", reports.append)
    return Supervisor(Supervision(**options), 7, worker.remedies()), worker, FakeClock()


def error(message: str = "boom") -> aioenv.WorkerError:
    return aioenv.WorkerError(message, worker_id=0)


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


def test_a_success_ends_the_streak_and_names_the_restart_it_completes() -> None:
    sup, worker, clock = supervisor(restart="on_failure", max_restarts=5, restart_backoff=1.0)
    worker.awaited = 1
    sup.failed(error("x"), env_gone=False, in_flight=1, clock=clock)
    clock.advance(1.0)
    assert sup.starting
    sup.answered()
    assert sup.succeeded() == "WorkerError: x"  # the worker annotates this state with it
    assert sup.succeeded() is None
    sup.failed(error("y"), env_gone=False, in_flight=1, clock=clock)
    assert [timer.when - clock.now for timer in clock.pending()] == [1.0]  # not 2.0


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

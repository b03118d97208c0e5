"""When a process worker's child polls for its next request and when it sleeps on it
(:mod:`aioenv.env_side._idle_spin`): the back-off rule fed spin outcomes, and the waiting
that applies it, on clocks the test moves."""

from __future__ import annotations

import socket
from typing import Any

from aioenv.env_side._idle_spin import CROWDED_SHARE, MAX_HOLD, MIN_HOLD, IdleSpin, next_hold

QUIET = 0.99  # the on-CPU share of a spin with a core to itself (measured: 99%)
CROWDED = 0.37  # ... of a spin beside a busy loop on a 2-core machine (measured: 37%)


def _holds(outcomes: list[tuple[bool, float]], hold: float = 0.0) -> list[float]:
    holds = []
    for caught, on_cpu in outcomes:
        hold = next_hold(hold, caught, on_cpu)
        holds.append(hold)
    return holds


def test_spins_that_catch_their_request_on_a_quiet_machine_keep_spinning() -> None:
    assert _holds([(True, QUIET)] * 50) == [0.0] * 50


def test_spins_beside_a_busy_process_back_off_to_one_try_a_second() -> None:
    holds = _holds([(True, CROWDED)] * 15)  # caught, but off the CPU most of the spin
    assert holds[:4] == [MIN_HOLD, 2 * MIN_HOLD, 4 * MIN_HOLD, 8 * MIN_HOLD]
    assert holds[-1] == MAX_HOLD
    assert holds == sorted(holds)
    assert next_hold(MAX_HOLD, True, CROWDED) == MAX_HOLD


def test_spins_that_miss_their_request_back_off_even_on_a_quiet_machine() -> None:
    # The script computes longer than the spin: the spin only burns a core.
    assert _holds([(False, QUIET)] * 3) == [MIN_HOLD, 2 * MIN_HOLD, 4 * MIN_HOLD]


def test_the_busy_share_is_the_threshold() -> None:
    assert next_hold(0.0, True, CROWDED_SHARE) == 0.0
    assert next_hold(0.0, True, CROWDED_SHARE - 0.01) == MIN_HOLD


def test_once_the_machine_is_quiet_again_paid_spins_end_the_hold() -> None:
    holds = _holds([(True, QUIET)] * 12, hold=MAX_HOLD)
    assert holds[0] == MAX_HOLD / 2
    assert holds == sorted(holds, reverse=True)
    assert holds[-1] == 0.0  # from a second to none in about ten paid spins
    # A lone unpaid spin among paid ones costs a short hold, not a long one.
    assert _holds([(True, QUIET), (False, QUIET), (True, QUIET)]) == [0.0, MIN_HOLD, 0.0]


class _Clocks:
    """A wall clock and a CPU clock that move only when the fake socket is polled: each
    poll takes ``poll_s`` of wall time, of which ``on_cpu`` on a CPU."""

    def __init__(self, poll_s: float, on_cpu: float) -> None:
        self.wall = self.cpu = 100.0
        self.poll_s, self.on_cpu = poll_s, on_cpu

    def tick(self) -> None:
        self.wall += self.poll_s
        self.cpu += self.poll_s * self.on_cpu


class _Socket:
    """A socket whose request arrives after ``polls`` non-blocking reads (None: only a
    blocking read gets it); it records each read's kind."""

    def __init__(self, clocks: _Clocks) -> None:
        self.clocks = clocks
        self.polls: int | None = None
        self.reads: list[str] = []

    def recv(self, size: int, flags: int = 0) -> bytes:
        if flags & socket.MSG_DONTWAIT:
            self.reads.append("poll")
            self.clocks.tick()
            if self.polls is None or self.polls > 1:
                self.polls = None if self.polls is None else self.polls - 1
                raise BlockingIOError
            self.polls = None
            return b"request"
        self.reads.append("block")
        return b"request"


def _waiting(clocks: _Clocks) -> IdleSpin:
    return IdleSpin(0.002, 64, clock=lambda: clocks.wall, cpu_clock=lambda: clocks.cpu)


def _receive(waiting: IdleSpin, sock: _Socket, polls: int | None) -> list[str]:
    sock.polls, sock.reads = polls, []
    fake: Any = sock
    assert waiting.receive(fake) == b"request"
    return sock.reads


def test_a_child_with_a_core_of_its_own_takes_each_request_while_it_spins() -> None:
    clocks = _Clocks(poll_s=1e-6, on_cpu=QUIET)
    waiting, sock = _waiting(clocks), _Socket(clocks)
    for _ in range(20):
        assert _receive(waiting, sock, polls=30) == ["poll"] * 30
    assert waiting.hold == 0.0


def test_a_crowded_child_sleeps_on_its_requests_and_tries_spinning_again_later() -> None:
    clocks = _Clocks(poll_s=1e-4, on_cpu=CROWDED)
    waiting, sock = _waiting(clocks), _Socket(clocks)
    assert _receive(waiting, sock, polls=5) == ["poll"] * 5  # caught, off the CPU most of it
    assert waiting.hold == MIN_HOLD
    assert _receive(waiting, sock, polls=5) == ["block"]  # held: no spin
    clocks.wall += MIN_HOLD  # the hold is over
    assert _receive(waiting, sock, polls=5) == ["poll"] * 5
    assert waiting.hold == 2 * MIN_HOLD
    clocks.wall += 2 * MIN_HOLD
    clocks.on_cpu = QUIET  # the other process is gone
    assert _receive(waiting, sock, polls=5) == ["poll"] * 5
    assert waiting.hold == MIN_HOLD


def test_a_spin_that_misses_ends_at_its_bound_and_the_child_blocks() -> None:
    clocks = _Clocks(poll_s=1e-4, on_cpu=QUIET)
    waiting, sock = _waiting(clocks), _Socket(clocks)
    reads = _receive(waiting, sock, polls=None)
    assert reads[-1] == "block"
    assert 18 <= reads.count("poll") <= 22  # 2 ms of 0.1 ms polls
    assert waiting.hold == MIN_HOLD


def test_no_idle_spin_never_polls() -> None:
    clocks = _Clocks(poll_s=1e-6, on_cpu=QUIET)
    waiting, sock = IdleSpin(0.0, 64), _Socket(clocks)
    assert _receive(waiting, sock, polls=1) == ["block"]

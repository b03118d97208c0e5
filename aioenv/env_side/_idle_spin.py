"""How a child process waits for its next request: polling for a moment, or asleep.

In a lockstep loop the next request comes a moment after the answer, and a child that is
still awake takes it at once, where a sleeping one costs both sides a wake-up (see
benchmarks/wake_latency.py). But polling only pays while the child has a core to itself:
beside another busy process, a poller that yields its core waits out that process's time
slice before it sees the request (a round trip through a spin that yields took 1.4 ms
beside a hog on the 2-core machine this was measured on, against 7-13 µs through a
semaphore, an eventfd or a socket, each of which wakes the sleeper at once). So a child
spins, bounded, only while spinning keeps paying, and blocks while the machine is busy:
:func:`next_hold` is that rule, :class:`IdleSpin` applies it.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = [
    "CROWDED_SHARE",
    "DEFAULT_IDLE_SPIN",
    "MAX_HOLD",
    "MAX_IDLE_SPIN",
    "MIN_HOLD",
    "IdleSpin",
    "checked_idle_spin",
    "next_hold",
]

#: Seconds a child polls for its next request before it sleeps, unless told otherwise
#: (``idle_spin=``): none; a vector env gives its children some where each has a core.
DEFAULT_IDLE_SPIN = 0.0
#: The longest ``idle_spin`` a child takes (seconds): spinning is for the gap between two
#: steps of a lockstep loop, not for waiting on a slow learner.
MAX_IDLE_SPIN = 0.01

T = TypeVar("T")

#: A spin that spent less than this share of its wall time on a CPU shared its core with
#: another runnable process: the machine is busy. A spinner with a core of its own is on
#: a CPU nearly all the time (99% measured), one beside a busy loop about a third of it.
CROWDED_SHARE = 0.5
#: How long a child waits asleep before it tries spinning again after a spin that did not
#: pay (seconds): the first hold, and the longest one. Each unpaid spin doubles the hold,
#: each paid one halves it (to none below the first): on a busy machine the child tries
#: once a second, at the cost of one spin; on a quiet one it is back to spinning after
#: a few paid spins.
MIN_HOLD = 0.001
MAX_HOLD = 1.0


def next_hold(hold: float, caught: bool, on_cpu: float) -> float:
    """The hold (seconds of waiting asleep before the next spin) after a spin that held
    ``hold`` before it; ``caught``: the request came during the spin; ``on_cpu``: the share
    of the spin's wall time the child spent on a CPU. A spin paid if it caught the request
    while the child had a core to itself."""
    if caught and on_cpu >= CROWDED_SHARE:
        return 0.0 if hold / 2 < MIN_HOLD else hold / 2
    return min(MAX_HOLD, max(MIN_HOLD, 2 * hold))


class IdleSpin:
    """Receives a child's requests: polling for up to ``seconds`` before it blocks, while
    :func:`next_hold` says spinning pays. Bounded, so an idle pool does not keep a core
    busy, and yielding between polls, so a child never holds a core that the script (or
    another child) could run on. ``clock`` and ``cpu_clock``: the wall clock and this
    thread's CPU clock, in seconds."""

    def __init__(
        self,
        seconds: float,
        receive_size: int,
        *,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.seconds = seconds
        self.receive_size = receive_size
        self.clock, self.cpu_clock = clock, cpu_clock
        self.hold = 0.0  # seconds to wait asleep after a spin before spinning again
        self.spin_after = 0.0  # the clock's time from which the next wait spins again

    def receive(self, sock: socket.socket) -> bytes:
        """What has arrived on ``sock`` (blocking), empty once the other side is gone."""
        if self.seconds > 0 and self.clock() >= self.spin_after:
            size = self.receive_size
            data = self.spin(lambda: sock.recv(size, socket.MSG_DONTWAIT))
            if data is not None:
                return data
        return sock.recv(self.receive_size)

    def spin(self, poll: Callable[[], T]) -> T | None:
        """Poll for up to ``seconds``, yielding the core between polls: what ``poll``
        returned once it did not raise :class:`BlockingIOError`, or None if nothing came
        in time. Each spin's outcome sets when the next may spin (:func:`next_hold`); the
        caller asks only from ``spin_after`` on."""
        started = self.clock()
        cpu = self.cpu_clock()
        deadline = started + self.seconds
        data: T | None = None
        while True:
            try:
                data = poll()
                break
            except BlockingIOError:
                if self.clock() > deadline:
                    break
                os.sched_yield()
        ended = self.clock()
        on_cpu = (self.cpu_clock() - cpu) / max(ended - started, 1e-9)
        self.hold = next_hold(self.hold, data is not None, on_cpu)
        self.spin_after = ended + self.hold
        return data


def checked_idle_spin(seconds: object) -> float:
    """An ``idle_spin`` option (a process worker's, an engine child's) as seconds:
    ValueError unless a number from 0 to :data:`MAX_IDLE_SPIN`."""
    if not (
        isinstance(seconds, (int, float))
        and not isinstance(seconds, bool)
        and 0 <= seconds <= MAX_IDLE_SPIN
    ):
        raise ValueError(
            f"idle_spin must be a number of seconds from 0 to {MAX_IDLE_SPIN}, got {seconds!r}"
        )
    return float(seconds)

"""What a hand-off between two processes costs on this machine, quiet and beside a CPU hog.

Two tables. The first is the floor of each way one process can wait for another: a round
trip parent -> child -> parent with nothing else to do, in µs, on a quiet machine and
beside a hog (one busy-loop process per core but one, as another CPU-heavy job would be):

- a POSIX semaphore (``multiprocessing.Semaphore``: a futex, no syscall when nobody sleeps),
- an eventfd (``os.eventfd``),
- a socketpair (what aioenv's process workers talk through),
- spin then block: poll a shared-memory flag for a bounded time, then sleep on a semaphore,
- spin with ``sched_yield`` between polls, and spin without it (never blocking).

For the spin-then-block row it also says how often the bounded spin caught the answer and
what share of the spin's wall time the spinning side spent on a CPU (``time.thread_time``
over wall time): near 1 on a quiet machine, far below it when a runnable process shares
the core, which is what aioenv's children read to stop spinning on a busy machine.

The second table is a lockstep loop through aioenv's children's way of waiting
(:class:`aioenv.env_side._idle_spin.IdleSpin`): a script that works between steps and one
child per core that works per step, each step one request to every child, in steps/s:
the children always spin before they block (a fixed spin), spin while it pays (aioenv's
rule, :func:`~aioenv.env_side._idle_spin.next_hold`), or never spin; quiet and beside a
hog.

The third table is a socketpair round trip as a function of how long the child works
before it answers: the part that is not the child's work is the cost of the two wake-ups.
On the 2-core VM this project is developed on, a side that waits less than about 0.15 ms
is woken for about 35 us; one that waits longer (its core goes to sleep) costs 150-250 us.
This is why aioenv's process workers answer each request as soon as it is done instead of
once per batch. Run::

    python benchmarks/wake_latency.py [--seconds 1.0] [--tables floors,idle_spin,work]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import time
from collections.abc import Callable
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from machine import cpu_hog, hog_count

from aioenv.env_side._idle_spin import IdleSpin
from aioenv.workers import default_context

WORK_US = (0, 50, 100, 150, 200, 300, 500, 1000)
_MESSAGE = bytes(64)
#: The bounded spin of the spin-then-block floor, in seconds (aioenv's lockstep default).
SPIN_S = 0.002
#: The floors' processes are forked: they share the semaphores, eventfds and shared flags
#: they were handed without any passing of descriptors.
_FORK: Any = multiprocessing.get_context("fork")


def _echo(sock: socket.socket, work_us: float) -> None:
    """Answer each message after ``work_us`` of CPU work (a stand-in for an env step)."""
    while True:
        message = sock.recv(len(_MESSAGE))
        if not message:
            return
        until = time.perf_counter() + work_us / 1e6
        while time.perf_counter() < until:  # the env "steps": this is its work, not a wait
            pass
        sock.sendall(message)


def round_trip_us(work_us: float, seconds: float) -> float:
    context: Any = default_context()
    parent, child = socket.socketpair()
    process = context.Process(target=_echo, args=(child, work_us), daemon=True)
    process.start()
    child.close()
    try:
        parent.sendall(_MESSAGE)  # the first round trip waits for the child to start
        parent.recv(len(_MESSAGE))
        count = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            parent.sendall(_MESSAGE)
            parent.recv(len(_MESSAGE))
            count += 1
        return (time.perf_counter() - started) / count * 1e6
    finally:
        parent.close()
        process.join(5.0)
        if process.exitcode is None:
            process.kill()
            process.join()


# The floors. Each is (setup -> (ping, pong, child side, stop)): the parent calls
# ``send()`` then ``wait()`` per round trip; the child loops ``wait()``/``send()`` on its own
# ends until the parent's stop message (``None`` from its wait).


class _Channel:
    """One direction of a hand-off: ``send`` then the other side's ``wait`` returns."""

    def send(self) -> None:
        raise NotImplementedError

    def wait(self) -> bool:  # False: stop
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class _Semaphore(_Channel):
    def __init__(self) -> None:
        self.semaphore = _FORK.Semaphore(0)
        self.stopping = _FORK.RawValue("b", 0)

    def send(self) -> None:
        self.semaphore.release()

    def wait(self) -> bool:
        self.semaphore.acquire()
        return not self.stopping.value

    def stop(self) -> None:
        self.stopping.value = 1
        self.semaphore.release()


class _EventFd(_Channel):
    def __init__(self) -> None:
        self.fd = os.eventfd(0)

    def send(self) -> None:
        os.eventfd_write(self.fd, 1)

    def wait(self) -> bool:
        return os.eventfd_read(self.fd) < 2**32  # the stop message is a large count

    def stop(self) -> None:
        os.eventfd_write(self.fd, 2**40)


class _Socket(_Channel):
    """A socketpair's one direction (aioenv's transport): 64 bytes a message."""

    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair()

    def send(self) -> None:
        self.theirs.sendall(_MESSAGE)

    def wait(self) -> bool:
        return bool(self.ours.recv(len(_MESSAGE)))

    def stop(self) -> None:
        self.theirs.close()


class _Spin(_Channel):
    """A shared-memory sequence number, polled: for ``spin_s`` and then sleeping on a
    semaphore (every send posts it, which costs no syscall while nobody sleeps), or for
    ever (``spin_s`` None) with or without ``sched_yield`` between polls."""

    def __init__(self, spin_s: float | None, yielding: bool) -> None:
        self.sent: Synchronized[int] = _FORK.RawValue("q", 0)  # type: ignore[assignment]
        self.seen = 0
        self.semaphore = _FORK.Semaphore(0)
        self.spin_s = spin_s
        self.yielding = yielding
        # The waiting side's record of its bounded spins: how many, how many caught the
        # message, and their wall and CPU time.
        self.spins = self.caught = 0
        self.spin_wall = self.spin_cpu = 0.0

    def send(self) -> None:
        self.sent.value += 1
        if self.spin_s is not None:
            self.semaphore.release()

    def wait(self) -> bool:
        self.seen += 1
        if self.spin_s is None:
            while self.sent.value < self.seen:
                if self.yielding:
                    os.sched_yield()
            return self.sent.value >= 0
        started, cpu = time.perf_counter(), time.thread_time()
        deadline = started + self.spin_s
        while self.sent.value < self.seen and time.perf_counter() < deadline:
            os.sched_yield()
        self.spins += 1
        self.caught += self.sent.value >= self.seen
        self.spin_wall += time.perf_counter() - started
        self.spin_cpu += time.thread_time() - cpu
        self.semaphore.acquire()  # posted with the message: at once if the spin caught it
        return self.sent.value >= 0

    def stop(self) -> None:
        self.sent.value = -(2**40)
        if self.spin_s is not None:
            self.semaphore.release()


def _floor_child(ping: _Channel, pong: _Channel) -> None:
    while ping.wait():
        pong.send()


def floor_us(make: Callable[[], _Channel], seconds: float) -> tuple[float, str]:
    """µs per round trip through two channels made by ``make``; and for spin-then-block,
    how the parent's bounded spins went."""
    ping, pong = make(), make()
    process = _FORK.Process(target=_floor_child, args=(ping, pong), daemon=True)
    process.start()
    try:
        ping.send()  # the first round trip waits for the child to start
        pong.wait()
        if isinstance(pong, _Spin):
            pong.spins = pong.caught = 0
            pong.spin_wall = pong.spin_cpu = 0.0
        count = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            ping.send()
            pong.wait()
            count += 1
        elapsed = time.perf_counter() - started
    finally:
        ping.stop()
        process.join(5.0)
        if process.exitcode is None:
            process.kill()
            process.join()
    note = ""
    if isinstance(pong, _Spin) and pong.spins:
        note = (
            f"spin caught {pong.caught / pong.spins:.0%}, "
            f"on a CPU {pong.spin_cpu / max(pong.spin_wall, 1e-9):.0%} of the spin"
        )
    return elapsed / count * 1e6, note


FLOORS: dict[str, Callable[[], _Channel]] = {
    "POSIX semaphore (futex)": _Semaphore,
    "eventfd": _EventFd,
    "socketpair": _Socket,
    f"spin {SPIN_S * 1e6:.0f} us with sched_yield, then block": lambda: _Spin(SPIN_S, True),
    "spin with sched_yield": lambda: _Spin(None, True),
    "spin": lambda: _Spin(None, False),
}


#: The idle-spin table's loops: (the script's work between steps, each child's per step), µs:
#: Pong-sized steps (4 envs a child) and CartPole-sized ones.
LOCKSTEP_US = ((300, 1200), (50, 100))
_STOP = b"q" * len(_MESSAGE)


class _AlwaysSpin(IdleSpin):
    """Spins before every wait, whatever the rule says (a fixed spin)."""

    def receive(self, sock: socket.socket) -> bytes:
        self.spin_after = 0.0
        return super().receive(sock)


def _lockstep_child(sock: socket.socket, work_us: float, spin: float, always: bool) -> None:
    waiting = (_AlwaysSpin if always else IdleSpin)(spin, len(_MESSAGE))
    while True:
        message = waiting.receive(sock)
        if not message or message == _STOP:
            return
        until = time.perf_counter() + work_us / 1e6
        while time.perf_counter() < until:
            pass
        sock.sendall(message)


def lockstep_rate(script_us: float, work_us: float, spin: str, seconds: float) -> float:
    """Steps/s of a lockstep loop over one child per core (``spin``: "always", "adaptive"
    or "never")."""
    ends, processes = [], []
    for _ in range(len(os.sched_getaffinity(0))):
        ours, theirs = socket.socketpair()
        process = _FORK.Process(
            target=_lockstep_child,
            args=(theirs, work_us, 0.0 if spin == "never" else SPIN_S, spin == "always"),
            daemon=True,
        )
        process.start()
        theirs.close()
        ends.append(ours)
        processes.append(process)
    try:
        steps = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            for end in ends:
                end.sendall(_MESSAGE)
            for end in ends:
                end.recv(len(_MESSAGE))
            until = time.perf_counter() + script_us / 1e6
            while time.perf_counter() < until:  # the script's policy
                pass
            steps += 1
        return steps / (time.perf_counter() - started)
    finally:
        for end in ends:
            end.sendall(_STOP)  # each child holds the others' ends too: no end-of-file
            end.close()
        for process in processes:
            process.join(5.0)
            if process.exitcode is None:
                process.kill()
                process.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    parser.add_argument(
        "--tables", default="floors,idle_spin,work", help="which tables, comma-separated"
    )
    args = parser.parse_args()
    tables = args.tables.split(",")
    hogs = hog_count()
    if "floors" in tables:
        print(f"| round trip parent -> child -> parent | quiet (us) | beside {hogs} hog(s) (us) |")
        print("|---|---:|---:|")
        for label, make in FLOORS.items():
            quiet, quiet_note = floor_us(make, args.seconds)
            with cpu_hog():
                busy, busy_note = floor_us(make, args.seconds)
            print(f"| {label} | {quiet:.1f} | {busy:.1f} |", flush=True)
            if quiet_note:
                print(f"|   its spins | {quiet_note} | {busy_note} |", flush=True)
        print()
    if "idle_spin" in tables:
        print(
            f"| lockstep: script / each child per step (us) | children spin | quiet (steps/s) "
            f"| beside {hogs} hog(s) (steps/s) |"
        )
        print("|---|---|---:|---:|")
        for script_us, work_us in LOCKSTEP_US:
            for spin in ("always", "adaptive", "never"):
                quiet_rate = lockstep_rate(script_us, work_us, spin, args.seconds)
                with cpu_hog():
                    busy_rate = lockstep_rate(script_us, work_us, spin, args.seconds)
                print(
                    f"| {script_us} / {work_us} | {spin} | {quiet_rate:,.0f} | {busy_rate:,.0f} |",
                    flush=True,
                )
        print()
    if "work" not in tables:
        return
    print("| child works (us) | round trip (us) | of which wake-ups (us) |")
    print("|---:|---:|---:|")
    for work in WORK_US:
        total = round_trip_us(work, args.seconds)
        print(f"| {work} | {total:.1f} | {total - work:.1f} |", flush=True)


if __name__ == "__main__":
    main()

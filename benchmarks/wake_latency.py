"""How long a round trip to a child process takes, as a function of how long the child works
before it answers: the part of the round trip that is not the child's work is the cost of
the two wake-ups.

On the 2-core VM this project is developed on, a side that waits less than about 0.15 ms
is woken for about 35 us; one that waits longer (its core goes to sleep) costs 150-250 us.
This is why aioenv's process workers answer each request as soon as it is done instead of
once per batch. Run::

    python benchmarks/wake_latency.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import socket
import time
from typing import Any

from aioenv.workers import default_context

WORK_US = (0, 50, 100, 150, 200, 300, 500, 1000)
_MESSAGE = bytes(64)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    args = parser.parse_args()
    print("| child works (us) | round trip (us) | of which wake-ups (us) |")
    print("|---:|---:|---:|")
    for work in WORK_US:
        total = round_trip_us(work, args.seconds)
        print(f"| {work} | {total:.1f} | {total - work:.1f} |", flush=True)


if __name__ == "__main__":
    main()

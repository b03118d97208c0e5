"""W4: the cost of one round trip through each transport, without any pool around it.

Each floor bounces a small message off an echo (a child process or a thread) and counts
round trips in a fixed window. They bound what any pool built on that transport can do
with one env: aioenv's process workers use (b)/(c), its thread workers use (d), and
gymnasium's ``AsyncVectorEnv`` uses (a).

Children start from aioenv's default multiprocessing context (``forkserver`` on Linux), so
the echo runs in the same kind of process as an aioenv worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from machine import CpuAccount
from runners import Loop, Meter, Sample, Timing, run_coroutine

from aioenv.workers import default_context

__all__ = ["FLOORS", "Floor"]

_MESSAGE = bytes(64)  # what the socket floors move each way (a step reply is of this order)
_PIPE_MESSAGE: tuple[int, float, bool, bool, dict[str, Any]] = (
    0,
    0.0,
    False,
    False,
    {},
)  # what the pipe floor pickles each way
_JOIN_TIMEOUT = 5.0


@dataclasses.dataclass(frozen=True)
class Floor:
    key: str
    label: str
    run: Callable[[Timing, CpuAccount], Sample]


# (a) multiprocessing Pipe, pickled send/recv ------------------------------------------------
def _pipe_echo(connection: Connection) -> None:
    while True:
        try:
            message = connection.recv()
        except EOFError:  # the parent closed its end
            return
        if message is None:
            return
        connection.send(message)


def pipe_pingpong(timing: Timing, account: CpuAccount) -> Sample:
    context: Any = default_context()  # typeshed lacks Process on BaseContext
    parent, child = context.Pipe()
    started = time.perf_counter()
    process = context.Process(target=_pipe_echo, args=(child,), daemon=True)
    process.start()
    child.close()
    try:
        parent.send(_PIPE_MESSAGE)  # the first round trip waits for the child to start
        parent.recv()
        build_s = time.perf_counter() - started
        meter = Meter(timing, account)
        while meter.running():
            parent.send(_PIPE_MESSAGE)
            parent.recv()
            meter.count += 1
        parent.send(None)
    finally:
        parent.close()  # on an error too, the child reads end-of-file and exits
        _stop(process)
    return meter.sample(build_s)


# (b), (c) socketpair + loop.add_reader ---------------------------------------------------
def _socket_echo(sock: socket.socket) -> None:
    sock.setblocking(True)
    size = len(_MESSAGE)
    buffer = bytearray(size)
    view = memoryview(buffer)
    while True:
        received = 0
        while received < size:
            count = sock.recv_into(view[received:])
            if count == 0:
                sock.close()
                return
            received += count
        sock.sendall(buffer)


class _Reader:
    """The parent's side: a persistent reader callback completes one future per reply."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.loop = loop
        self.sock = sock
        self.buffer = bytearray(len(_MESSAGE))
        self.received = 0
        self.waiter: asyncio.Future[None] | None = None
        loop.add_reader(sock.fileno(), self.on_readable)

    def on_readable(self) -> None:
        try:
            count = self.sock.recv_into(memoryview(self.buffer)[self.received :])
        except (BlockingIOError, InterruptedError):
            return
        if count == 0:  # the child is gone: stop watching, fail the round trip
            self.close()
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(ConnectionError("the echo child closed its socket"))
            return
        self.received += count
        if self.received == len(self.buffer) and self.waiter is not None:
            self.received = 0
            self.waiter.set_result(None)

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())


async def _socket_pingpong(timing: Timing, account: CpuAccount) -> Sample:
    loop = asyncio.get_running_loop()
    context: Any = default_context()  # typeshed lacks Process on BaseContext
    parent_end, child_end = socket.socketpair()
    started = time.perf_counter()
    process = context.Process(target=_socket_echo, args=(child_end,), daemon=True)
    process.start()
    child_end.close()
    parent_end.setblocking(False)
    reader = _Reader(loop, parent_end)
    try:

        async def round_trip() -> None:
            reader.waiter = loop.create_future()
            parent_end.send(_MESSAGE)  # 64 bytes always fit in an empty socket buffer
            await reader.waiter

        await round_trip()  # waits for the child to start
        build_s = time.perf_counter() - started
        meter = Meter(timing, account)
        while meter.running():
            await round_trip()
            meter.count += 1
    finally:
        reader.close()
        parent_end.close()  # the child reads end-of-file and exits
        _stop(process)
    return meter.sample(build_s)


def socket_pingpong(loop: Loop) -> Callable[[Timing, CpuAccount], Sample]:
    def run(timing: Timing, account: CpuAccount) -> Sample:
        return run_coroutine(_socket_pingpong(timing, account), loop)

    return run


# (d) a dedicated thread + call_soon_threadsafe ---------------------------------------------
def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _thread_pingpong(timing: Timing, account: CpuAccount) -> Sample:
    loop = asyncio.get_running_loop()
    requests: queue.SimpleQueue[asyncio.Future[None] | None] = queue.SimpleQueue()

    def serve() -> None:
        while True:
            waiter = requests.get()
            if waiter is None:
                return
            loop.call_soon_threadsafe(_resolve, waiter)

    started = time.perf_counter()
    thread = threading.Thread(target=serve, name="floor-echo", daemon=True)
    thread.start()
    try:

        async def round_trip() -> None:
            waiter = loop.create_future()
            requests.put(waiter)
            await waiter

        await round_trip()
        build_s = time.perf_counter() - started
        meter = Meter(timing, account)
        while meter.running():
            await round_trip()
            meter.count += 1
    finally:
        requests.put(None)
        thread.join(_JOIN_TIMEOUT)  # it is idle in requests.get(): this returns at once
    return meter.sample(build_s)


def thread_pingpong(timing: Timing, account: CpuAccount) -> Sample:
    return run_coroutine(_thread_pingpong(timing, account), "uvloop")


def _stop(process: Any) -> None:
    process.join(_JOIN_TIMEOUT)
    if process.is_alive():
        process.kill()
        process.join(_JOIN_TIMEOUT)
    process.close()


FLOORS: list[Floor] = [
    Floor("pipe", "(a) mp.Pipe send/recv, pickled", pipe_pingpong),
    Floor("asyncio", "(b) socketpair + add_reader, asyncio", socket_pingpong("asyncio")),
    Floor("uvloop", "(c) socketpair + add_reader, uvloop", socket_pingpong("uvloop")),
    Floor("thread", "(d) thread + call_soon_threadsafe, uvloop", thread_pingpong),
]

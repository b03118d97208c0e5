"""SocketWrites (aioenv.workers.process._host_socket): what a non-blocking socket does not take at
once is sent, in order, when the loop finds it writable; dropped, it is never sent."""

from __future__ import annotations

import asyncio
import socket

import pytest

from aioenv.workers.process._host_socket import SocketWrites

pytestmark = pytest.mark.timeout(60)


def _pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours.setblocking(False)
    return ours, theirs


def test_writes_the_socket_cannot_take_at_once_follow_in_order() -> None:
    async def scenario() -> bytes:
        loop = asyncio.get_running_loop()
        ours, theirs = _pair()
        theirs.setblocking(False)
        writes = SocketWrites(ours)
        chunks = [bytes([k]) * 300_000 for k in range(1, 4)]  # far over the send buffer
        for chunk in chunks:
            writes.write(chunk, loop)
        received = bytearray()
        while len(received) < sum(map(len, chunks)):
            received += await loop.sock_recv(theirs, 1 << 16)
        writes.drop()
        ours.close()
        theirs.close()
        return bytes(received)

    assert asyncio.run(scenario()) == b"".join(bytes([k]) * 300_000 for k in range(1, 4))


def test_dropped_writes_are_never_sent_and_the_loop_stops_watching() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = _pair()
        writes = SocketWrites(ours)
        writes.write(b"x" * 1_000_000, loop)  # most of it waits
        writes.drop()
        assert not loop.remove_writer(ours.fileno())  # nothing watches the socket now
        theirs.setblocking(False)
        taken = bytearray()  # what the socket took before the drop, and nothing else
        while True:
            try:
                taken += theirs.recv(1 << 16)
            except BlockingIOError:
                break
        assert 0 < len(taken) < 1_000_000 and set(taken) == {ord("x")}
        writes.write(b"y", loop)  # nothing waits before it any more
        assert await loop.sock_recv(theirs, 1 << 16) == b"y"
        ours.close()
        theirs.close()

    asyncio.run(scenario())


def test_a_write_to_a_socket_whose_far_end_is_gone_is_dropped_quietly() -> None:
    ours, theirs = _pair()
    theirs.close()
    SocketWrites(ours).write(b"z" * 10, None)  # EPIPE: the reader hears of the end
    ours.close()

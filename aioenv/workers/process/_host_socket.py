"""The writes of a :class:`~aioenv.workers.process._host.Host` to its child's socket (several
envs' frames of one loop iteration together, and what the socket does not take now when it
is writable), non-blocking, from the event loop's writers: the parent keeps no thread per
child. They are a Ray actor's direct connection's too (:mod:`aioenv.workers.ray._channel`)."""

from __future__ import annotations

import asyncio
import socket

__all__ = ["SocketWrites"]


class SocketWrites:
    """The writes to ``sock`` (non-blocking) not taken by it yet."""

    def __init__(self, sock: socket.socket) -> None:
        #: The socket written to.
        self.sock = sock
        #: What the socket has not taken yet, in order.
        self.waiting = bytearray()
        self._loop: asyncio.AbstractEventLoop | None = None

    def write(self, data: bytes, loop: asyncio.AbstractEventLoop | None) -> None:
        """Send ``data`` after what waits; what the socket does not take now goes when
        ``loop`` finds it writable. A socket whose far end is gone takes nothing: its
        reader (or the process's sentinel) hears of the end."""
        if self.waiting:
            self.waiting += data
            return
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return
        if sent < len(data):
            assert loop is not None, "a write the socket did not take needs an event loop"
            self.waiting += memoryview(data)[sent:]
            self._loop = loop
            loop.add_writer(self.sock.fileno(), self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self.sock.send(self.waiting)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            sent = len(self.waiting)
        del self.waiting[:sent]
        if not self.waiting:
            self.drop()  # (nothing to forget: it stops watching)

    def drop(self) -> None:
        """Forget what waits (the socket is about to close), and stop watching for the
        socket to be writable."""
        self.waiting.clear()
        if self._loop is not None:
            if not self._loop.is_closed():
                self._loop.remove_writer(self.sock.fileno())
            self._loop = None

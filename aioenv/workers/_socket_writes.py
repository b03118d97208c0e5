"""Writes to a non-blocking socket from an event loop, for the parent's ends of a process
worker's socket (:mod:`aioenv.workers.process._host_socket`) and of a Ray actor's direct
connection (:mod:`aioenv.workers.ray._channel`): what the socket takes now goes at once;
the rest waits, in order, until the loop says the socket is writable. The parent keeps no
thread per socket."""

from __future__ import annotations

import asyncio
import socket

__all__ = ["SocketWrites"]


class SocketWrites:
    """The writes to ``sock`` (non-blocking) not taken by it yet."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._pending = bytearray()
        self._loop: asyncio.AbstractEventLoop | None = None

    def write(self, data: bytes, loop: asyncio.AbstractEventLoop | None) -> None:
        """Send ``data`` after what waits; what the socket does not take now goes when
        ``loop`` finds it writable. A socket whose far end is gone takes nothing: its
        reader (or the process's sentinel) hears of the end."""
        if self._pending:
            self._pending += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return
        if sent < len(data):
            assert loop is not None, "a write the socket did not take needs an event loop"
            self._pending += memoryview(data)[sent:]
            self._loop = loop
            loop.add_writer(self._sock.fileno(), self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            sent = len(self._pending)
        del self._pending[:sent]
        if not self._pending:
            self._stop_watching()

    def drop(self) -> None:
        """Forget what waits (the socket is about to close)."""
        self._pending.clear()
        self._stop_watching()

    def _stop_watching(self) -> None:
        if self._loop is not None:
            if not self._loop.is_closed():
                self._loop.remove_writer(self._sock.fileno())
            self._loop = None

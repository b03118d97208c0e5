"""A :class:`~aioenv.workers.process._host.Host`'s socket to its child: frames written
(several envs' frames of one loop iteration together, and what the socket does not take
now when it is writable) and read as they come, each handed to its slot's ``deliver``.
Non-blocking, from the event loop's readers and writers: the parent keeps no thread per
child. Its writes (:class:`SocketWrites`) are a Ray actor's direct connection's too
(:mod:`aioenv.workers.ray._channel`)."""

from __future__ import annotations

import abc
import asyncio
import socket
from typing import Any

from ...wire._frames import FrameDecoder, send_descriptor

__all__ = ["HostSocket", "SocketWrites"]


class HostSocket(abc.ABC):
    """The writing and reading half of :class:`~aioenv.workers.process._host.Host`, over
    its fields named here."""

    size: int
    _socket: socket.socket
    _alive: socket.socket
    _loop: asyncio.AbstractEventLoop | None
    _queued: list[bytes]
    _writes: SocketWrites
    _reading: bool
    _receive_buffer: bytearray
    _decoder: FrameDecoder
    _deliver: list[Any]
    exitcode: int | None
    killed_for: tuple[int, str] | None

    @property
    @abc.abstractmethod
    def alive(self) -> bool:
        """Running and not being killed."""

    # Writing -------------------------------------------------------------------------
    def send(self, frame: bytes) -> None:
        """Send now, or (several envs here) at the end of this loop iteration, together
        with every other frame for this host sent meanwhile."""
        if self.exitcode is not None or self.killed_for is not None:  # not self.alive, inlined
            return  # gone, or going: its death is (or was) handled elsewhere
        if self.size == 1 or self._loop is None:
            self._writes.write(frame, self._loop)
            return
        if not self._queued:
            self._loop.call_soon(self._flush)
        self._queued.append(frame)

    def send_with_fd(self, frame: bytes, fd: int) -> bool:
        """Send a copy of descriptor ``fd`` ahead of ``frame``, which goes as usual. False
        if it could not go (the caller carries on without it)."""
        if not self.alive:
            return False
        try:
            send_descriptor(self._alive, fd)
        except OSError:
            return False
        self.send(frame)
        return True

    def _flush(self) -> None:
        frames, self._queued = self._queued, []
        if self.alive:
            self._writes.write(b"".join(frames), self._loop)

    # Reading -------------------------------------------------------------------------
    def _on_readable(self) -> None:
        buffer = self._receive_buffer
        view = memoryview(buffer)
        deliver = self._deliver
        while self._reading:
            try:
                count = self._socket.recv_into(buffer)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                count = 0
            if count == 0:
                self._stop_reading()  # end of file: the sentinel reports the exit
                return
            for kind, seq, slot, payload in self._decoder.feed(view[:count]):
                deliver[slot](self, kind, seq, payload)
            if count < len(buffer):
                return

    def _stop_reading(self) -> None:
        if self._reading and self._loop is not None:
            self._reading = False
            self._loop.remove_reader(self._socket.fileno())


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

"""A :class:`~aioenv.workers.process._host.Host`'s socket to its child: frames written
(several envs' frames of one loop iteration together, and what the socket does not take
now when it is writable) and read as they come, each handed to its slot's ``deliver``.
Non-blocking, from the event loop's readers and writers: the parent keeps no thread per
child. Its writes (:class:`SocketWrites`) are a Ray actor's direct connection's too
(:mod:`aioenv.workers.ray._channel`)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence

from ...engine._lane import Lane
from ...wire._frames import RECEIVE_SIZE, FrameDecoder, encode
from ...wire._pickles import dumps
from ...wire._requests import Request

__all__ = ["HostSocket", "SocketWrites"]


class HostSocket:
    """The writing and reading half of :class:`~aioenv.workers.process._host.Host`: the
    parent's end ``sock`` of its child's socket of requests and replies (made
    non-blocking), and ``alive``, held open and never written, over which lanes'
    descriptors travel; one slot per ``deliver`` callback, which that slot's messages go
    to (``size``: how many)."""

    def __init__(
        self,
        sock: socket.socket,
        alive: socket.socket,
        deliver: Sequence[Callable[..., None]],
    ) -> None:
        self.size = len(deliver)
        self._socket, self._alive = sock, alive
        sock.setblocking(False)
        self._deliver = list(deliver)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.exitcode: int | None = None
        #: The slot whose failure killed the child, and why, for the others' messages.
        self.killed_for: tuple[int, str] | None = None
        self.writes = SocketWrites(sock)
        #: Frames sent in this loop iteration, written together at its end (several envs).
        self.queued: list[bytes] = []
        #: The lanes whose steps were written in this loop iteration, posted at its end.
        self._posts: list[Lane] = []
        #: The lane each slot's steps take (:mod:`aioenv.engine._lane`), once the child has
        #: mapped it; those offered and not answered yet.
        self.lanes: dict[int, Lane] = {}
        self._offered: dict[int, Lane] = {}
        #: What each slot's lane in use calls when its answer wake may have a post (see
        #: :meth:`lane_answered`), for a later event loop to watch it too (:meth:`watch_lanes`).
        self._on_answer: dict[int, Callable[[Lane], None]] = {}
        self._reading = False
        self._receive_buffer, self._decoder = bytearray(RECEIVE_SIZE), FrameDecoder()

    @property
    def alive(self) -> bool:
        """Running and not being killed."""
        return self.exitcode is None and self.killed_for is None

    # Writing -------------------------------------------------------------------------
    def send(self, frame: bytes) -> None:
        """Send now, or (several envs here) at the end of this loop iteration, together
        with every other frame for this host sent meanwhile."""
        if self.exitcode is not None or self.killed_for is not None:  # not self.alive, inlined
            return  # gone, or going: its death is (or was) handled elsewhere
        if self.size == 1 or self._loop is None:
            self.writes.write(frame, self._loop)
            return
        if not self.queued:
            self._loop.call_soon(self._flush)
        self.queued.append(frame)

    def post_soon(self, lane: Lane) -> None:
        """Post ``lane``'s step (written, not posted) at the end of this loop iteration,
        before the frames sent meanwhile: a child of several envs is woken once for the
        steps its envs are sent together, as it is for their frames, not once for each
        (with more children than cores, each wake may preempt the parent mid-batch)."""
        if not self.queued and not self._posts:
            assert self._loop is not None
            self._loop.call_soon(self._flush)
        self._posts.append(lane)

    # The lanes --------------------------------------------------------------------------
    def has_lane(self, slot: int) -> bool:
        """A lane is in use for ``slot``, or offered."""
        return slot in self.lanes or slot in self._offered

    def offer_lane(self, lane: Lane, slot: int) -> None:
        """Send ``lane`` for ``slot`` to the child (its descriptors, then its offer); the
        child's answer comes as a LANE_ANSWER frame (:meth:`lane_answered`)."""
        if self.has_lane(slot) or not self.alive:
            lane.close()
            return
        try:
            # A copy of each, one byte with it: it arrives before any message sent on the
            # message socket after this (OSError: the child is gone).
            for fd in lane.descriptors():
                socket.send_fds(self._alive, [b"\0"], [fd])
        except OSError:
            lane.close()
            return
        self._offered[slot] = lane
        self.send(encode(Request.LANE, 0, dumps(lane.offer()), slot))

    def lane_answered(self, slot: int, in_use: bool, on_answer: Callable[[Lane], None]) -> None:
        """The child's answer to the lane offered for ``slot``: in use (``on_answer(lane)``
        is called from the loop whenever the lane's answer wake may have a post, until the
        lane is closed: when the slot is released, or the child is killed or has exited),
        or closed."""
        lane = self._offered.pop(slot, None)
        if lane is None or not in_use or self._loop is None or not self.alive:
            if lane is not None:
                lane.close()
            return
        self.lanes[slot], self._on_answer[slot] = lane, on_answer
        self._loop.add_reader(lane.answer_fd, on_answer, lane)

    def watch_lanes(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch the answer wakes of the lanes in use from ``loop``, a later event loop
        that takes over once the one that watched them is closed (it took their readers)."""
        for slot, lane in self.lanes.items():
            loop.add_reader(lane.answer_fd, self._on_answer[slot], lane)

    def _close_lanes(self, *slots: int) -> None:
        """Close the lanes of ``slots`` (all: every slot's), in use or offered."""
        for slot in slots or [*self.lanes, *self._offered]:
            lane = self.lanes.pop(slot, None)
            if lane in self._posts:
                self._posts.remove(lane)  # (its step goes with it)
            if lane is not None and self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(lane.answer_fd)
            offered = self._offered.pop(slot, None)
            for each in (lane, offered):
                if each is not None:
                    each.close()

    def _flush(self) -> None:
        # The posts first: a frame queued after a step was written is a later request.
        posts, self._posts = self._posts, []
        for lane in posts:
            lane.request.post()
        frames, self.queued = self.queued, []
        if frames and self.alive:
            self.writes.write(b"".join(frames), self._loop)

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
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return
        if sent < len(data):
            assert loop is not None, "a write the socket did not take needs an event loop"
            self.waiting += memoryview(data)[sent:]
            self._loop = loop
            loop.add_writer(self._sock.fileno(), self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self.waiting)
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
                self._loop.remove_writer(self._sock.fileno())
            self._loop = None

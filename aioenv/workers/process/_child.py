"""The child's side of a process worker: the main loop of a child process.

:func:`serve` is the whole program of a child. It talks to the parent only through its two
sockets (the protocol is in :mod:`aioenv.wire._frames`): it builds the envs of its slots,
then answers requests in the order they arrive with plain blocking reads and writes. What
each request does to a slot is :class:`~aioenv.env_side._serving.Slots`'s, as in a Ray
actor; this module decodes the frames and encodes the answers. It imports nothing from
the parent's side.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import socket
from typing import Any

from ...core._messages import EpisodeOptions, Failure
from ...engine._lane import ChildLane
from ...env_side._idle_spin import IdleSpin
from ...env_side._process_group import begin_serving, end_own_group, exit_with_own_group
from ...env_side._serving import Slots
from ...env_side._thread_caps import ThreadCaps
from ...wire._frames import (
    RECEIVE_SIZE,
    Frame,
    FrameDecoder,
    Kind,
    decode_array,
    decode_spin,
    encode,
    encode_reply,
)
from ...wire._pickles import dumps, loads
from ...wire._requests import CONTROL, STEP, STEP_ARRAY, Request

__all__ = ["serve"]

_DESCRIPTOR_WAIT = 5.0  # seconds to wait for a LANE message's descriptors


def serve(
    sock: socket.socket,
    alive: socket.socket,
    payloads: list[bytes],
    seeds: list[int | None],
    episode: EpisodeOptions,
    registry: bytes,
    thread_caps: ThreadCaps | None,
    build: bool,
    idle_spin: float,
) -> None:
    """Serve one env per payload (cloudpickled env sources), slot ``i`` seeded with
    ``seeds[i]``, until CLOSE or until the parent is gone. ``registry``: the parent's
    gymnasium ids (:func:`aioenv.core._registry.snapshot`), added to this process's before
    any env is built. ``thread_caps``: the caps of this process's native thread pools,
    applied before any env is built (:mod:`aioenv.env_side._thread_caps`). ``build``: build
    every env now and report its spaces (READY); otherwise each slot waits for a REBUILD.
    ``idle_spin``: seconds to poll for the next request before blocking on it, while
    polling pays (:class:`~aioenv.env_side._idle_spin.IdleSpin`).

    What the envs start ends with this process: it leads a process group of its own, which
    it ends once its envs are closed (or the parent is gone); see
    :mod:`aioenv.env_side._process_group`."""
    descriptors: queue.SimpleQueue[int] = queue.SimpleQueue()  # for LANE messages, in order
    begin_serving(alive, descriptors.put)
    sock.setblocking(True)
    slots = Slots(payloads, seeds, episode, registry, thread_caps)
    child = _Child(sock, slots, descriptors, IdleSpin(idle_spin, RECEIVE_SIZE))
    gone = False  # the parent
    try:
        if build:
            sock.sendall(b"".join(_ready(slot, slots) for slot in range(len(payloads))))
        decoder = FrameDecoder()
        while True:
            data, posted = child.receive()  # whatever has arrived is one batch
            if data == b"":
                gone = True
                return
            frames = decoder.feed(data) if data else []
            if not child.served(frames, posted):
                return
    except (BrokenPipeError, ConnectionResetError):
        gone = True
    finally:
        child.close()
        slots.close()
        while not descriptors.empty():
            os.close(descriptors.get())
        sock.close()
        if gone:  # an env's thread may still start processes: they go with this one
            exit_with_own_group(1)
        end_own_group()


class _Child:
    """The serving loop's state: the socket, the slots, the descriptors the parent sent,
    how it waits, and each slot's lane (:mod:`aioenv.engine._lane`), once the parent has
    sent one."""

    def __init__(
        self,
        sock: socket.socket,
        slots: Slots,
        descriptors: queue.SimpleQueue[int],
        waiting: IdleSpin,
    ) -> None:
        self.sock, self.slots = sock, slots
        self.descriptors, self.waiting = descriptors, waiting
        self.lanes: dict[int, ChildLane] = {}  # by slot
        self._slot_of: dict[int, int] = {}  # a lane's request descriptor: its slot
        self._poll = select.poll()  # (polled once a lane is in use, beside its wakes)
        self._poll.register(sock, select.POLLIN)

    def receive(self) -> tuple[bytes | None, dict[int, int]]:
        """What has arrived on the socket (blocking; empty once the parent is gone; None:
        nothing, but steps posted through lanes) and the steps posted, their numbers by
        slot. With a post, everything the socket holds is read (see the lane's order)."""
        if not self.lanes:
            return self.waiting.receive(self.sock), {}
        waiting = self.waiting
        got = None
        if waiting.seconds > 0 and waiting.clock() >= waiting.spin_after:
            got = waiting.spin(self._poll_all)
        while got is None:
            # poll(2) reports every descriptor ready when it returns: with a request's,
            # the socket too wherever anything was written to it before the post.
            ready = [fd for fd, _ in self._poll.poll()]
            posted = [self._slot_of[fd] for fd in ready if fd in self._slot_of]
            got = self._take(self.sock.fileno() in ready, posted)
        data, posts = got
        if posts and data:
            # Everything else the socket holds now (non-blocking): every request made
            # before the step is in.
            chunks = [data]
            with contextlib.suppress(BlockingIOError, InterruptedError):
                while chunk := self.sock.recv(RECEIVE_SIZE, socket.MSG_DONTWAIT):
                    chunks.append(chunk)
            data = b"".join(chunks)
        return data, posts

    def _take(
        self, from_socket: bool, posted: list[int]
    ) -> tuple[bytes | None, dict[int, int]] | None:
        """What the socket holds (where ``from_socket``) and the steps posted in the lanes
        of slots ``posted``, taken first; None where none of them had anything."""
        posts: dict[int, int] = {}
        for slot in posted:
            seq = self.lanes[slot].posted()
            if seq:
                posts[slot] = seq
        data = None
        if from_socket:
            with contextlib.suppress(BlockingIOError):
                data = self.sock.recv(RECEIVE_SIZE, socket.MSG_DONTWAIT)
        return None if data is None and not posts else (data, posts)

    def _poll_all(self) -> tuple[bytes | None, dict[int, int]]:
        """:meth:`_take` of all, for a spin: BlockingIOError where none had anything."""
        got = self._take(True, list(self.lanes))
        if got is None:
            raise BlockingIOError
        return got

    def served(self, frames: list[Frame], posts: dict[int, int]) -> bool:
        """Serve a batch of request frames (``(kind, seq, slot, frame)``), and the steps
        ``posts`` (numbers by slot) through the lanes, each just before its slot's first
        later request, answering each as it is served; False once one is CLOSE (the rest
        are not served)."""
        for kind, seq, slot, frame in frames:
            if seq > posts.get(slot, seq):
                self._serve_post(slot, posts.pop(slot))
            if kind == Request.CLOSE:
                return False
            self._serve(kind, seq, slot, frame)
            if kind == Request.CLOSE_SLOT:
                posts.pop(slot, None)  # (its worker is gone: no one awaits it)
        for slot, seq in posts.items():
            self._serve_post(slot, seq)
        return True

    def _serve_post(self, slot: int, seq: int) -> None:
        self._answer(seq, slot, self.slots.serve(slot, STEP, self.lanes[slot].action()), True)

    def _serve(self, kind: int, seq: int, slot: int, frame: Any) -> None:
        slots = self.slots
        if kind == Request.LANE:
            self._open_lane(frame, slot)
        elif kind == Request.CLOSE_SLOT:
            slots.serve(slot, Request.CLOSE_SLOT, None)
            self._close_lane(slot)
        elif kind == Request.SPIN:  # one child, one way of waiting: any slot's
            self.waiting.seconds = decode_spin(frame)
        elif kind == Request.REBUILD:  # reported as a build is: the new env's spaces
            self.sock.sendall(_ready(slot, slots, Request.REBUILD, loads(frame)))
        else:
            # Each answer goes at once, not with the batch: the parent works on it while
            # this child steps the next env, and neither side idles long enough for its
            # core to sleep (waking a sleeping core costs far more than a write; see
            # benchmarks/wake_latency.py).
            self._answer(seq, slot, _result(slots, kind, slot, frame), kind != CONTROL)

    def _answer(self, seq: int, slot: int, result: Any, state: bool) -> None:
        """Send the answer to request ``seq``: through the slot's lane where it is a state
        the lane carries, else on the socket."""
        lane = self.lanes.get(slot) if state else None
        if lane is not None and lane.answered(seq, result):
            return
        self.sock.sendall(encode_reply(seq, result, slot, None if lane is None else lane.shared))

    def _open_lane(self, frame: Any, slot: int) -> None:
        """Map the lane the parent sent for ``slot`` (its descriptors came just before the
        frame) and say whether it is in use; if not, the slot's steps keep the socket."""
        fds: list[int] = []
        try:
            offer = loads(frame)
            for _ in range(1 + offer[3] + offer[4]):
                fds.append(self.descriptors.get(timeout=_DESCRIPTOR_WAIT))
            lane = ChildLane(offer, fds)
        except Exception:
            for fd in fds:
                os.close(fd)
            self.sock.sendall(encode(Kind.LANE_ANSWER, 0, b"", slot))
            return
        self._close_lane(slot)  # (a lane offered again replaces the slot's last)
        self.lanes[slot] = lane
        self._slot_of[lane.request_fd] = slot
        self._poll.register(lane.request_fd, select.POLLIN)
        self.slots.share(slot, lane.shared and lane.shared.views)  # (batches stacked there)
        self.sock.sendall(encode(Kind.LANE_ANSWER, 0, b"\x01", slot))

    def _close_lane(self, slot: int) -> None:
        lane = self.lanes.pop(slot, None)
        if lane is not None:
            self.slots.share(slot, None)
            del self._slot_of[lane.request_fd]
            self._poll.unregister(lane.request_fd)
            lane.close()

    def close(self) -> None:
        for slot in list(self.lanes):
            self._close_lane(slot)


def _ready(slot: int, slots: Slots, request: int = Request.BUILD, payload: Any = None) -> bytes:
    """Build (or rebuild) the slot's env, and the READY frame with its spaces."""
    spaces = slots.serve(slot, request, payload)
    try:
        return encode(Kind.READY, 0, dumps(spaces), slot)
    except Exception:
        return encode(Kind.READY, 0, dumps((None, None)), slot)


def _result(slots: Slots, kind: int, slot: int, payload: Any) -> Any:
    """What ``slot`` answers to one request frame (``kind``, ``payload``): a CONTROL, or a
    STEP of either encoding."""
    if kind == STEP_ARRAY:
        return slots.serve(slot, STEP, decode_array(payload))
    try:
        request = loads(payload)
    except Exception as exc:
        return Failure.from_exception(exc, "unpickling the request", "the request sent")
    return slots.serve(slot, CONTROL if kind == CONTROL else STEP, request)

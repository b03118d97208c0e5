"""The actor's end of its direct connection (the parent's is
:mod:`aioenv.workers.ray._channel`): accept the parent's connection, then answer the
messages that come on it, each env's as soon as it is ready.

Each frame from the parent carries a loop iteration's messages, each payload pickled on
its own, so that one that will not load here fails its own request only (and each reply
goes back so too). A message is
answered here, on the connection's thread, in the order it came; or, where the actor's
envs are all safe in threads and its slot's steps are slow (the rule of
:class:`~aioenv.workers.ray._actor.EnvActor`'s side-by-side calls), in a thread of the
slot's own (its *lane*), which then takes every message of that slot until it is idle, so
each slot's messages are answered in order. A lane writes its answer as soon as it has it:
an env whose step is done does not wait for the others of its frame, and its next action
can come while they step. Every message is answered by one reply (a CLOSE_SLOT by an
empty one), which lets the parent count what it still waits for.

Imports nothing from the parent's side, nor ray.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import pickle
import socket
import threading
import time
from typing import Protocol

import cloudpickle

from ...core._messages import Failure
from ...wire._ray_messages import FRAME, TOKEN_BYTES, Message, Reply, framed
from ...wire._requests import Request

__all__ = ["Answering", "ChannelServer", "accepted"]


def accepted(listener: socket.socket, token: bytes, deadline: float) -> socket.socket | None:
    """The first connection to ``listener`` that sends ``token`` before ``deadline``
    (others are closed unread), or None."""
    while (left := deadline - time.monotonic()) > 0:
        listener.settimeout(left)
        try:
            connection, _ = listener.accept()
        except OSError:  # the deadline passed
            return None
        connection.settimeout(min(left, 10.0))
        try:
            sent = connection.recv(TOKEN_BYTES, socket.MSG_WAITALL)
        except OSError:
            sent = b""
        if hmac.compare_digest(sent, token):
            connection.settimeout(None)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return connection
        connection.close()
    return None


class Answering(Protocol):
    """What the server asks of the actor (:class:`~aioenv.workers.ray._actor.EnvActor`)."""

    def answer(self, message: Message) -> Reply | None:
        """The reply to one message (None: it needs none)."""

    def side_by_side(self, slot: int, request: Request) -> bool:
        """``request`` for ``slot`` may be answered beside other slots'."""


class ChannelServer:
    """Answers ``actor``'s messages that come on ``connection`` (see the module's
    docstring) until the parent closes it: :meth:`run`, on the connection's thread."""

    def __init__(self, actor: Answering, connection: socket.socket, slots: int) -> None:
        self._actor = actor
        self._connection = connection
        self._writing = threading.Lock()
        self._ended = threading.Event()
        self._lanes: list[concurrent.futures.ThreadPoolExecutor | None] = [None] * slots
        self._last: list[concurrent.futures.Future[None] | None] = [None] * slots

    def run(self) -> None:
        try:
            while (body := _frame(self._connection)) is not None:
                answered: list[Reply] = []
                for slot, seq, request, data in pickle.loads(body):
                    message = (slot, seq, request, data)
                    if self._in_lane(slot, request):
                        self._last[slot] = self._lane(slot).submit(self._answer_alone, message)
                    else:
                        answered.append(self._answered(message))
                if answered and not self._write(answered):
                    return
        finally:
            self._ended.set()

    def stop(self) -> None:
        """Wait until the connection is closed (by the parent, before it asks the actor to
        close its envs) and every answer in progress is sent, and end the lanes."""
        self._ended.wait()
        for lane in self._lanes:
            if lane is not None:
                lane.shutdown(wait=True)

    def _in_lane(self, slot: int, request: Request) -> bool:
        last = self._last[slot]
        if last is not None and not last.done():
            return True  # after what its lane has to answer first
        # Alone in the actor, a slot has nothing to wait for here.
        return len(self._lanes) > 1 and self._actor.side_by_side(slot, request)

    def _lane(self, slot: int) -> concurrent.futures.ThreadPoolExecutor:
        lane = self._lanes[slot]
        if lane is None:
            name = f"aioenv-actor-lane-{slot}"
            lane = self._lanes[slot] = concurrent.futures.ThreadPoolExecutor(1, name)
        return lane

    def _answer_alone(self, message: tuple[int, int, Request, bytes]) -> None:
        self._write([self._answered(message)])

    def _answered(self, message: tuple[int, int, Request, bytes]) -> Reply:
        """The reply to a message whose payload is still pickled."""
        slot, seq, request, data = message
        try:
            payload = cloudpickle.loads(data)
        except Exception as exc:
            during = "reading a request on a Ray actor (unpickling)"
            failure = Failure.from_exception(exc, during, "the request sent")
            return (slot, seq, failure.without_exception())
        try:
            reply = self._actor.answer((slot, seq, request, payload))
        except Exception as exc:  # never silence: a lane's lost answer would hang its env
            failure = Failure.from_exception(exc, "answering a request on a Ray actor")
            return (slot, seq, failure.without_exception())
        return (slot, 0, None) if reply is None else reply

    def _write(self, replies: list[Reply]) -> bool:
        """Send ``replies`` as one frame, each result pickled on its own (one that will
        not pickle is its request's Failure); False once the parent has closed the
        connection."""
        body = pickle.dumps([_pickled(reply) for reply in replies], protocol=5)
        try:
            with self._writing:
                self._connection.sendall(framed(body))
        except OSError:
            return False
        return True


def _pickled(reply: Reply) -> tuple[int, int, bytes]:
    slot, seq, result = reply
    try:
        return (slot, seq, cloudpickle.dumps(result, protocol=5))
    except Exception as exc:
        failure = Failure.from_exception(exc, "sending a Ray actor's reply (pickling)")
        return (slot, seq, cloudpickle.dumps(failure.without_exception(), protocol=5))


def _frame(connection: socket.socket) -> bytearray | None:
    """The body of the next frame on ``connection``, or None once it is closed."""
    try:
        head = connection.recv(FRAME.size, socket.MSG_WAITALL)
        if len(head) < FRAME.size:
            return None
        (size,) = FRAME.unpack(head)
        body = bytearray(size)
        view, got = memoryview(body), 0
        while got < size:
            count = connection.recv_into(view[got:])
            if count == 0:
                return None
            got += count
    except OSError:
        return None
    return body

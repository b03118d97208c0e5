"""The env side of a Ray worker: the actor that serves one or more env slots.

It is what a child process is to a process worker (:mod:`aioenv.workers.process._child`), with a
Ray actor call in place of the socket: each call carries a batch of messages (one per slot
that had something to send in one loop iteration of the parent) and returns the answers
in the same order. Each env is driven by the same :class:`~aioenv.env_side._runner.EnvRunner` as
every other kind, and each message means what it means to a child: both serve through
:class:`~aioenv.env_side._serving.Slots`.

A call's steps for several slots are taken side by side, each in a thread of the actor,
when each of those slots took :data:`SIDE_BY_SIDE_STEP` or longer to answer each of its
last few requests (:data:`TIMED_REQUESTS`: the shortest counts, since a busy machine only
ever makes a request take longer) and its envs are safe in threads by the thread workers' rule
(:mod:`aioenv.env_side._thread_safety`); otherwise one after another, on the thread the
call came in on. An actor call returns when its last answer is ready, so envs that wait
(a remote tool, a simulator that releases the GIL) would otherwise wait in turn: four
envs of 5 ms each would answer a call in 20 ms, not 5. Fast envs stay in turn, since a
hand-off to a thread costs tens of microseconds, more than a CartPole step.

The same messages come as actor calls or, once the parent has connected, as frames on a
direct connection (:meth:`EnvActor.open_channel` and :meth:`EnvActor.run_channel`),
which spares each step Ray's task submission, and whose slow envs answer each as soon as
it is done. The parent never has messages on both ways at once.

The actor's end of its direct connection (:meth:`EnvActor.run_channel`; the parent's is
:mod:`aioenv.workers.ray._channel`): accept the parent's connection, then answer the
messages that come on it, each env's as soon as it is ready.

Each message from the parent comes as a frame of the process worker's wire
(:mod:`aioenv.wire._frames`: its header, then its payload), a loop iteration's messages in
one write, each payload pickled on its own, so that one that will not load here fails its
own request only (and each reply goes back so too). A message is
answered here, on the connection's thread, in the order it came; or, where the actor's
envs are all safe in threads and its slot's steps are slow (the rule of
:class:`EnvActor`'s side-by-side calls), in a thread of the
slot's own (its *lane*: the thread its steps take beside other slots' in an actor call
too), which then takes every message of that slot until it is idle, so each slot's
messages are answered in order. A lane writes its answer as soon as it has it:
an env whose step is done does not wait for the others that came with it, and its next action
can come while they step. Every message is answered by one reply (a CLOSE_SLOT by an
empty one), which lets the parent count what it still waits for.

This module imports nothing from the parent's side, and ray itself only inside the
actor: the parent wraps :class:`EnvActor` with ``ray.remote`` (and imports this module
only then). The messages are in :mod:`aioenv.wire._ray_messages`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hmac
import secrets
import socket
import threading
import time
from typing import Any

import cloudpickle

from ...core._messages import ControlRequest, EpisodeOptions, Failure
from ...env_side._serving import Slots
from ...env_side._thread_caps import ThreadCaps
from ...env_side._thread_safety import runner_unsafe_reason
from ...wire._frames import HEADER, RECEIVE_SIZE, FrameDecoder, Kind
from ...wire._ray_messages import TOKEN_BYTES, Message, Pickled, Reply, with_arguments
from ...wire._requests import Request

__all__ = ["SIDE_BY_SIDE_STEP", "TIMED_REQUESTS", "EnvActor", "accepted"]

#: Seconds each of a slot's last requests took, from which its steps go beside the other
#: slots' of the same call (see the module's docstring).
SIDE_BY_SIDE_STEP = 1e-3
#: How many of a slot's last requests are timed for it.
TIMED_REQUESTS = 4
#: The kind of a reply's frame on the direct connection (the parent reads its sequence
#: number, slot and payload).
_REPLY = int(Kind.STATE)


class EnvActor:
    """Serves one env per payload (cloudpickled env sources); slot ``i`` is seeded with
    ``seeds[i]`` at its first reset. Envs are built when a BUILD or REBUILD message asks,
    once the parent's gymnasium ids (``registry``, :func:`aioenv.core._registry.snapshot`) are
    added to this process's and its native thread pools capped (``thread_caps``, see
    :mod:`aioenv.env_side._thread_caps`). What each message does is
    :class:`~aioenv.env_side._serving.Slots`'s, as in a process worker's child."""

    def __init__(
        self,
        payloads: list[bytes],
        seeds: list[int | None],
        episode: EpisodeOptions,
        registry: bytes,
        thread_caps: ThreadCaps | None,
    ) -> None:
        self._slots = Slots(payloads, seeds, episode, registry, thread_caps)
        #: Per slot: seconds its last requests took; whether its envs are safe in threads.
        self._took = [collections.deque[float](maxlen=TIMED_REQUESTS) for _ in payloads]
        self._thread_safe = [False] * len(payloads)
        #: Per slot: the thread its messages are answered in beside other slots' (its
        #: *lane*, made when first needed), and the last message handed to it there.
        self._lanes: list[concurrent.futures.ThreadPoolExecutor | None] = [None] * len(payloads)
        self._last: list[concurrent.futures.Future[None] | None] = [None] * len(payloads)
        self._lock = threading.Lock()  # one call at a time, and close after the channel
        self._listener: socket.socket | None = None
        self._token = b""
        #: The direct connection once accepted, its writes' lock, and its end (set once
        #: the parent has closed it and the messages that came on it are handed out;
        #: cleared as a later connection is accepted, run_channel's calls one at a time).
        self._connection: socket.socket | None = None
        self._writing = threading.Lock()
        self._ended = threading.Event()

    def serve(self, messages: list[Message]) -> list[Reply]:
        """Answer ``messages`` in order (the steps of several slots side by side where
        that pays, see the module's docstring); messages that need no answer get none."""
        with self._lock:
            if self._side_by_side(messages):
                # The first here, on the thread that waits for the others anyway; each
                # other in its slot's lane (one message per slot: see _side_by_side).
                others = [
                    self._lane(message[0]).submit(self.answer, message) for message in messages[1:]
                ]
                answers = [self.answer(messages[0]), *(other.result() for other in others)]
            else:
                answers = [self.answer(message) for message in messages]
        return [reply for reply in answers if reply is not None]

    def _side_by_side(self, messages: list[Message]) -> bool:
        slots = {slot for slot, _, _, _ in messages}
        return (
            len(slots) > 1
            and len(slots) == len(messages)
            and all(self.side_by_side(slot, request) for slot, _, request, _ in messages)
        )

    def side_by_side(self, slot: int, request: int) -> bool:
        """``request`` for ``slot`` may be answered beside other slots' (see the module's
        docstring): it is a step, every slot's envs are safe in threads (by the thread
        workers' rule), and each of ``slot``'s last requests took :data:`SIDE_BY_SIDE_STEP`
        or longer."""
        took = self._took[slot]
        return (
            request == Request.STEP
            and all(self._thread_safe)
            and bool(took)
            and min(took) >= SIDE_BY_SIDE_STEP
        )

    def answer(self, message: Message) -> Reply | None:
        """The reply to one message (None: it needs none)."""
        slot, seq, request, payload = message
        if request == Request.CONTROL:
            payload = _resolved(payload)
        start = time.perf_counter()
        answer = self._slots.serve(slot, request, payload)
        self._took[slot].append(time.perf_counter() - start)
        if request == Request.STEP:
            return (slot, seq, _portable(answer))
        if request == Request.CONTROL:
            return (slot, seq, _pickled(_portable(answer)))
        if request == Request.CLOSE_SLOT:
            return None
        # BUILD, REBUILD: the spaces (seq 0), pickled, or both None where they will not pickle
        self._thread_safe[slot] = runner_unsafe_reason(self._slots.runners[slot]) is None
        ready = _pickled(answer)
        return (slot, 0, (None, None) if ready is answer else ready)  # spaces are informative

    def close(self) -> None:
        """Close every env (the parent then kills the actor)."""
        with self._lock:
            if self._connection is not None:
                # Closed by the parent before it asks the actor to close its envs: wait
                # until every answer in progress is sent.
                self._ended.wait()
            for lane in self._lanes:
                if lane is not None:
                    lane.shutdown(wait=True)
            self._slots.close()

    # The direct connection ---------------------------------------------------------------
    def open_channel(self) -> tuple[str, int, bytes]:
        """Listen for the parent's direct connection, on this node's address: the address,
        the port and the secret the parent must send first (this call came through Ray,
        which only the parent can call)."""
        import ray  # inside the actor, where Ray runs

        node: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        family = socket.AF_INET6 if ":" in node else socket.AF_INET
        self._listener = socket.create_server((node, 0), family=family)
        self._token = secrets.token_bytes(TOKEN_BYTES)
        address, port = self._listener.getsockname()[:2]
        return address, port, self._token

    def run_channel(self, wait: float) -> None:
        """Accept the parent's connection (waiting ``wait`` seconds at most) and answer the
        messages that come on it (see the module's docstring), on this call's thread,
        until the parent closes it. In a concurrency group of its own: the call lasts as
        long as the connection, and its failure tells the parent that the actor is gone."""
        listener = self._listener
        assert listener is not None, "open_channel first"
        with listener:
            connection = accepted(listener, self._token, time.monotonic() + wait)
        if connection is None:
            return  # the parent did not connect: its messages keep coming as calls
        with connection:
            self._ended.clear()  # a later loop's connection (after the first one ended)
            self._connection = connection
            decoder = FrameDecoder()
            try:
                while True:
                    try:
                        data = connection.recv(RECEIVE_SIZE)
                    except OSError:
                        data = b""
                    if not data:
                        return  # closed by the parent
                    answered: list[Reply] = []
                    for request, seq, slot, payload in decoder.feed(data):
                        message = (slot, seq, request, payload)
                        if self._in_lane(slot, request):
                            lane = self._lane(slot)
                            self._last[slot] = lane.submit(self._answer_alone, message)
                        else:
                            answered.append(self._answered(message))
                    if answered and not self._write(answered):
                        return
            finally:
                self._ended.set()

    def linger(self, seconds: float) -> None:
        """Wait here: a call the parent makes after killing the actor, which fails as soon
        as the kill has taken effect (and returns only if it never does)."""
        time.sleep(seconds)

    def _in_lane(self, slot: int, request: int) -> bool:
        last = self._last[slot]
        if last is not None and not last.done():
            return True  # after what its lane has to answer first
        # Alone in the actor, a slot has nothing to wait for here.
        return len(self._lanes) > 1 and self.side_by_side(slot, request)

    def _lane(self, slot: int) -> concurrent.futures.ThreadPoolExecutor:
        lane = self._lanes[slot]
        if lane is None:
            name = f"aioenv-actor-lane-{slot}"
            lane = self._lanes[slot] = concurrent.futures.ThreadPoolExecutor(1, name)
        return lane

    def _answer_alone(self, message: tuple[int, int, int, bytes | memoryview]) -> None:
        self._write([self._answered(message)])

    def _answered(self, message: tuple[int, int, int, bytes | memoryview]) -> Reply:
        """The reply to a message whose payload is still pickled."""
        slot, seq, request, data = message
        try:
            payload = cloudpickle.loads(data)
        except Exception as exc:
            during = "reading a request on a Ray actor (unpickling)"
            failure = Failure.from_exception(exc, during, "the request sent")
            return (slot, seq, failure.without_exception())
        try:
            reply = self.answer((slot, seq, request, payload))
        except Exception as exc:  # never silence: a lane's lost answer would hang its env
            failure = Failure.from_exception(exc, "answering a request on a Ray actor")
            return (slot, seq, failure.without_exception())
        return (slot, 0, None) if reply is None else reply

    def _write(self, replies: list[Reply]) -> bool:
        """Send ``replies`` in one write, a frame each, each result pickled on its own (one
        that will not pickle is its request's Failure); False once the parent has closed
        the connection."""
        frames = b"".join([_reply_frame(reply) for reply in replies])
        assert self._connection is not None, "written only once accepted"
        try:
            with self._writing:
                self._connection.sendall(frames)
        except OSError:
            return False
        return True


def _pickled(result: Any) -> Any:
    """``result`` as :class:`Pickled` bytes, or as it is where cloudpickle cannot take it
    (Ray's serializer then says why)."""
    try:
        return Pickled(cloudpickle.dumps(result, protocol=5))
    except Exception:
        return result


def _portable(result: Any) -> Any:
    """A :class:`Failure` whose exception cannot travel loses it (its text stays)."""
    if isinstance(result, Failure) and result.exception is not None:
        try:
            cloudpickle.dumps(result.exception)
        except Exception:
            return result.without_exception()
    return result


def _resolved(request: ControlRequest) -> ControlRequest:
    """The request with the arguments the parent put in the object store fetched here.
    (Ray resolves only an actor call's top-level arguments, and these are nested.)"""
    import ray  # inside a Ray actor, where ray is importable

    return with_arguments(request, lambda value: type(value) is ray.ObjectRef, ray.get)


# The direct connection's server ----------------------------------------------------------
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


def _reply_frame(reply: Reply) -> bytes:
    slot, seq, result = reply
    try:
        data: bytes = cloudpickle.dumps(result, protocol=5)
    except Exception as exc:
        failure = Failure.from_exception(exc, "sending a Ray actor's reply (pickling)")
        data = cloudpickle.dumps(failure.without_exception(), protocol=5)
    return HEADER.pack(len(data), seq, _REPLY, slot) + data

"""A Ray actor's direct connection: the parent's end of a TCP connection to the actor, on
which a host's messages travel as frames instead of actor calls.

An actor call goes through Ray's task submission: a thread of aioenv's to make it (no Ray
call is made on the event loop), Ray's own threads and its scheduler on the actor's side,
and a thread hop back to the loop, about a millisecond or two per call on a busy machine.
Once an actor is made, its host asks it to listen (``open_channel``, an actor call) and
connects to the address it names, from the event loop, sending first the secret that came
with the address (the actor reads nothing from a connection without it). The actor then
answers frames on that connection (``run_channel``, an actor call that lasts as long as the
connection: its failure says the actor is gone, as Ray learns it, a lost node included).
A loop iteration's messages for the actor go in one write, each as a frame of the process
worker's wire (:mod:`aioenv.wire._frames`: its header, then its payload cloudpickled on its
own), and each env's answer comes back as soon as it is ready, a frame too
(:meth:`aioenv.workers.ray._actor.EnvActor.run_channel`): no thread between the loop and
the socket, and one write and one read per env step at most.

Where the connection cannot be made (a firewall between the nodes, a driver outside the
cluster's network), the host warns (once per node) and its messages keep going as actor
calls.
"""

from __future__ import annotations

import asyncio
import socket
import warnings
from typing import Any, Protocol

import cloudpickle

from ...core._messages import Failure
from ...core._rollouts import Rollout
from ...wire._frames import HEADER, RECEIVE_SIZE, FrameDecoder
from ...wire._ray_messages import CHANNEL_GROUP, Message, Reply
from ...wire._requests import Request
from ..process._host_socket import SocketWrites
from ._calls import send_off_loop

__all__ = ["CONNECT_TIMEOUT", "DirectConnection", "connect", "first_line", "goes_direct", "loaded"]

#: Seconds the parent gives a connection to the actor to be made.
CONNECT_TIMEOUT = 10.0
#: Seconds the actor waits for the parent's connection (a bound, not a wait: the parent
#: connects as soon as it has the address).
ACCEPT_WAIT = 60.0

#: The nodes whose actors could not be reached directly, warned of once each.
_UNREACHED: set[str] = set()


class ChannelHost(Protocol):
    """What a direct connection tells its host
    (:class:`~aioenv.workers.ray._host.ActorHost`), and asks of it."""

    @property
    def label(self) -> str:
        """The actor, for the warning where it cannot be reached."""

    def on_replies(self, replies: list[Reply]) -> None:
        """The replies that came (every message sent is answered by one)."""

    def flush_soon(self) -> None:
        """The connection can carry messages now."""

    def on_lost(self, reason: str) -> None:
        """The actor is gone (its end of the connection closed, or the actor call that
        serves it failed as Ray found the actor gone)."""


class DirectConnection:
    """An actor host's direct connection, from asking the actor to listen to closing; once
    made, its socket is read and written from the loop. It tells ``host`` what comes of it
    (:class:`ChannelHost`); ``ray``: the ray module, whose errors it tells apart."""

    def __init__(self, ray: Any, host: ChannelHost) -> None:
        self._ray, self._host = ray, host
        self._closed = False
        #: The loop it was begun from (once): None until then.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Task[None] | None = None
        #: The connection once made (its socket), and its writes not taken by it yet.
        self._writes: SocketWrites | None = None
        self._decoder = FrameDecoder()
        #: It can carry messages.
        self.open = False
        #: Messages sent on it that are not answered yet.
        self.unanswered = 0

    def begin(self, loop: asyncio.AbstractEventLoop, actor: Any) -> None:
        """Ask ``actor`` to listen (an actor call, off the loop), then connect from
        ``loop`` (once)."""
        if self._loop is not None or self._closed:
            return
        self._loop = loop
        listening = loop.create_future()
        listening.add_done_callback(lambda done: self._on_listening(done, actor))
        send_off_loop([(actor.open_channel, (), listening, False)])

    def _on_listening(self, listening: asyncio.Future[Any], actor: Any) -> None:
        if self._closed or listening.cancelled() or listening.exception() is not None:
            return  # the actor is gone or failed: its calls say so
        assert self._loop is not None
        address, port, token = listening.result()
        serving = self._loop.create_future()  # as long as the connection lasts
        serving.add_done_callback(self._on_served)
        method = actor.run_channel.options(concurrency_group=CHANNEL_GROUP)
        send_off_loop([(method, (ACCEPT_WAIT,), serving, False)])
        self._connecting = self._loop.create_task(self._connect(address, port, token))

    async def _connect(self, address: str, port: int, token: bytes) -> None:
        try:
            sock = await connect(address, port, token)
        except (OSError, asyncio.TimeoutError) as exc:
            if address not in _UNREACHED:  # once per node: a pool may have hundreds there
                _UNREACHED.add(address)
                warnings.warn(
                    f"aioenv: no direct connection to Ray {self._host.label} at {address}:"
                    f"{port} ({type(exc).__name__}: {exc}); the messages of the actors on "
                    "that node go as actor calls, which are slower (a firewall between the "
                    "nodes? make_pool(..., direct_connection=False) skips the attempt)",
                    RuntimeWarning,
                    stacklevel=1,
                )
            return
        if self._closed:
            sock.close()
            return
        assert self._loop is not None
        self._writes, self.open = SocketWrites(sock), True
        self._loop.add_reader(sock.fileno(), self._on_readable, sock)
        self._host.flush_soon()

    def _on_served(self, serving: asyncio.Future[Any]) -> None:
        """The actor's end stopped serving: fine once closed from here; a failure that
        is not the call's own is the actor's death, as Ray learnt it (a lost node)."""
        error = None if serving.cancelled() else serving.exception()
        if error is not None and not isinstance(error, self._ray.exceptions.RayTaskError):
            self._host.on_lost(first_line(error))

    def send(self, messages: list[Message]) -> list[Reply]:
        """Send ``messages`` in one write, a frame each, each payload pickled on its own (one
        that will not load on the actor fails its own request there): the Failures of those
        whose payloads would not pickle, which are not sent."""
        assert self._writes is not None
        sent: list[bytes] = []
        failed: list[Reply] = []
        for slot, seq, request, payload in messages:
            try:
                data = cloudpickle.dumps(payload, protocol=5)
                sent.append(HEADER.pack(len(data), seq, request, slot) + data)
            except Exception as exc:
                during = "pickling a request for a Ray actor"
                failure = Failure.from_exception(exc, during, "the request sent")
                failed.append((slot, seq, failure.without_exception()))
        if sent:
            self._writes.write(b"".join(sent), self._loop)
            self.unanswered += len(sent)
        return failed

    def _on_readable(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(RECEIVE_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            self._host.on_lost("its direct connection closed")
            return
        frames = self._decoder.feed(data)
        if frames:
            replies = [(slot, seq, loaded(payload)) for _, seq, slot, payload in frames]
            self.unanswered -= len(replies)
            self._host.on_replies(replies)

    def close(self) -> None:
        """Close it, or stop making it: nothing more comes from it (the actor's end of it
        then stops answering; what was sent and not answered is never answered)."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self.open:
            self.open = False
            assert self._loop is not None
            assert self._writes is not None
            self._loop.remove_reader(self._writes.sock.fileno())
            self._writes.drop()
            self._writes.sock.close()


def goes_direct(message: Message) -> bool:
    """Whether ``message`` may go on the direct connection: not a control request nor a
    rollout, whose large values and policies go through Ray's object store."""
    _, _, request, payload = message
    return request != Request.CONTROL and type(payload) is not Rollout


async def connect(address: str, port: int, token: bytes) -> socket.socket:
    """A non-blocking socket connected to the actor listening at ``address:port``, the
    ``token`` sent; OSError or TimeoutError where it cannot be made in time."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.wait_for(loop.sock_connect(sock, (address, port)), CONNECT_TIMEOUT)
        await asyncio.wait_for(loop.sock_sendall(sock, token), CONNECT_TIMEOUT)
    except BaseException:
        sock.close()
        raise
    return sock


def first_line(error: BaseException) -> str:
    """``error``'s type and the first line of its text, to say why an actor is gone."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def loaded(data: bytes | memoryview) -> Any:
    """A reply's result from its bytes (a frame's, or an actor call's
    :class:`~aioenv.wire._ray_messages.Pickled`), or the Failure that says why it would
    not load here (the same whichever way the reply came)."""
    try:
        return cloudpickle.loads(data)
    except Exception as exc:
        return Failure.from_exception(exc, "reading a Ray actor's reply (unpickling)")

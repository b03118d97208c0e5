"""What does not fit the step buffer travels beside it, pickled, on the socket the parent
and a child share: requests that are not steps (resets, calls, closing) and the parts of
an answer that have no fixed size (infos, a final observation, a failure). A message is
a process worker's frame (:mod:`aioenv.wire._frames`, its sequence number and slot 0):
a request or an answer as :func:`~aioenv.wire._frames.encode_reply` encodes it (pickled
whole, a BatchStep in its binary layout), or a step's infos as an INFOS frame (their
flag and bytes, as a BATCH_STATE's tail carries them). Both sides read the socket only
after the wake told them a message is there; a small message is written before that
post, so it is whole when read, a large one after (:data:`SMALL`).
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable
from typing import Any

from ..core._errors import EnvError
from ..core._messages import Failure
from ..wire._frames import HEADER, INFOS, Kind, decode_reply, encode
from ._wake import Wake

__all__ = [
    "SMALL",
    "GivenUp",
    "Reported",
    "answer_of",
    "encoded_infos",
    "post_with",
    "receive_message",
]

#: A message this long (bytes) fits a socket's buffer on any system aioenv runs on (Linux
#: gives a Unix socket 208 KiB by default): its sender can write it before it posts the
#: wake. A longer one is written after the post, as the reader reads it, since writing
#: it first could wait for a reader that waits for the post.
SMALL = 32 * 1024


@dataclasses.dataclass(frozen=True)
class Reported:
    """A child's answer (``message``: as it would travel alone, or b"" for none) with the
    errors of its envs that failed meanwhile, restarted or given up: each goes to the
    parent's ``on_failure``."""

    errors: list[Any]
    message: bytes


@dataclasses.dataclass(frozen=True)
class GivenUp:
    """A child's answer where an env of its failed with its restart budget spent: the
    error that gave it up (the vector env cannot go on without it)."""

    error: Any


def encoded_infos(flag: int, data: bytes) -> bytes:
    """A step's infos as :func:`aioenv.wire._pickles.encode_infos` gave them, as a message
    whose reader gets ``(flag, data)`` back without unpickling anything."""
    return encode(Kind.INFOS, 0, bytes((flag,)) + data)


def post_with(sock: socket.socket, wake: Wake, data: bytes) -> None:
    """Post ``wake`` with a message (``data``, encoded) for its taker on ``sock``: a small
    one written first, whole when read; a large one after the post, as it is read (see
    :data:`SMALL`). With no data, only the post."""
    if len(data) <= SMALL:
        if data:
            sock.sendall(data)
        wake.post()
    else:
        wake.post()
        sock.sendall(data)


def receive_message(sock: socket.socket) -> Any:
    """The next message; :class:`EOFError` if the other side closed its end first. One
    message is in flight at a time, so a read of more than it asks for takes nothing of
    the next: most messages take one ``recv``."""
    data = _read(sock, HEADER.size, SMALL)
    end = HEADER.size + HEADER.unpack_from(data)[0]
    if len(data) < end:
        data += _read(sock, end - len(data), end - len(data))
    return _decoded(data)


def _decoded(data: bytes | bytearray) -> Any:
    """A whole message (its head and body) as its reader gets it."""
    length, _, kind, _ = HEADER.unpack_from(data)
    body = memoryview(data)[HEADER.size : HEADER.size + length]
    return (body[0], body[1:]) if kind == INFOS else decode_reply(kind, body, None)[0]


def answer_of(
    sock: socket.socket, name: str, w: int, report: Callable[[list[Any]], None] | None = None
) -> Any:
    """A child's message as the parent takes it: its answer (None for none: its rows hold
    it), the EnvError its failure is (of ``name``, child ``w``), or :class:`GivenUp`. The
    errors :class:`Reported` with it go to ``report``. EOFError or OSError where the child
    is gone."""
    answer = receive_message(sock)
    if type(answer) is Reported:
        if report is not None:
            report(answer.errors)
        answer = _decoded(answer.message) if answer.message else None
    if isinstance(answer, Failure):
        return EnvError.from_failure(answer, name, w)
    return answer


def _read(sock: socket.socket, at_least: int, at_most: int) -> bytearray:
    data = bytearray()
    while len(data) < at_least:
        chunk = sock.recv(min(at_most - len(data), 1 << 20))
        if not chunk:
            raise EOFError("the other side of the engine's socket closed it")
        data += chunk
    return data

"""What does not fit the step buffer travels beside it, pickled, on the socket the parent
and a child share: requests that are not steps (resets, calls, closing) and the parts of
an answer that have no fixed size (infos, a final observation, a failure). A message is
its length (8 bytes) and its pickle; both sides block on the socket only after the wake
told them a message is there, so a read never waits for a peer that is still working.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

import cloudpickle

from ..core._messages import Failure

__all__ = ["receive_message", "send_message"]

_LENGTH = struct.Struct("<Q")


def send_message(sock: socket.socket, message: Any) -> None:
    """Send ``message``. What the standard pickle cannot take (a class of the user's main
    module, shipped with the env) goes by value (cloudpickle); a :class:`Failure` whose
    exception will not pickle at all goes without it, its text and traceback kept."""
    try:
        data = pickle.dumps(message, protocol=5)
    except Exception:
        try:
            data = cloudpickle.dumps(message, protocol=5)
        except Exception as exc:
            if not isinstance(message, Failure):
                message = Failure.from_exception(exc, "pickling the answer to send it back")
            data = pickle.dumps(message.without_exception(), protocol=5)
    sock.sendall(_LENGTH.pack(len(data)) + data)


def receive_message(sock: socket.socket) -> Any:
    """The next message; :class:`EOFError` if the other side closed its end first."""
    (length,) = _LENGTH.unpack(_read(sock, _LENGTH.size))
    return pickle.loads(_read(sock, length))


def _read(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError("the other side of the engine's socket closed it")
        data += chunk
    return bytes(data)

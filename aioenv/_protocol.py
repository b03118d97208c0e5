"""The wire protocol between the parent and a process worker.

A message is a fixed binary header followed by a pickled payload::

    payload length (u64) | sequence number (u64) | kind (u8) | payload

Requests carry a sequence number and the reply repeats it, so the parent can tell the
reply to the current request from a late reply to an abandoned one. The parent reads
without ever blocking (``FrameDecoder`` is fed whatever bytes have arrived); the child
reads and writes with plain blocking calls.
"""

from __future__ import annotations

import enum
import io
import pickle
import struct
from typing import Any

__all__ = [
    "HEADER",
    "FrameDecoder",
    "Kind",
    "dumps",
    "encode",
    "loads",
    "read_frame",
]

HEADER = struct.Struct("<QQB")


class Kind(enum.IntEnum):
    # parent -> child
    STEP = 1
    RESET = 2  # payload: empty, or a pickled Reset(seed, options)
    CLOSE = 3
    CONTROL = 4  # payload: a pickled ControlRequest; answered with STATE or FAILURE
    # child -> parent
    READY = 16  # the env was built (or failed to be); payload: (observation_space, action_space)
    STATE = 17  # payload: the state
    FAILURE = 18  # payload: a Failure


def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=5)


def loads(data: bytes | memoryview) -> Any:
    return pickle.loads(data)


def encode(kind: Kind, seq: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), seq, kind) + payload


class FrameDecoder:
    """Turns a byte stream, fed in chunks of any size, into ``(kind, seq, payload)``."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes | memoryview) -> list[tuple[int, int, bytes | memoryview]]:
        frames: list[tuple[int, int, bytes | memoryview]] = []
        size = HEADER.size
        if not self._buffer:
            # Fast path: the chunk holds whole frames, nothing buffered from before.
            offset = 0
            end = len(chunk)
            while end - offset >= size:
                length, seq, kind = HEADER.unpack_from(chunk, offset)
                stop = offset + size + length
                if stop > end:
                    break
                frames.append((kind, seq, chunk[offset + size : stop]))
                offset = stop
            if offset < end:
                self._buffer += chunk[offset:]
            return frames
        buffer = self._buffer
        buffer += chunk
        offset = 0
        while len(buffer) - offset >= size:
            length, seq, kind = HEADER.unpack_from(buffer, offset)
            stop = offset + size + length
            if stop > len(buffer):
                break
            frames.append((kind, seq, bytes(buffer[offset + size : stop])))
            offset = stop
        del buffer[:offset]
        return frames

    @property
    def pending_bytes(self) -> int:
        return len(self._buffer)


def read_frame(stream: io.BufferedIOBase) -> tuple[int, int, bytes] | None:
    """Blocking read of one message (the child side); None at end of stream."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    length, seq, kind = HEADER.unpack(header)
    payload = stream.read(length) if length else b""
    if len(payload) < length:
        return None
    return kind, seq, payload

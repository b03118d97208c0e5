"""The wire protocol between the parent and a process worker: both ends read it here.

The parent's end is :mod:`aioenv.workers.process._host`, the child's
:mod:`aioenv.workers.process._child`. They share two sockets. An engine child's messages
beside its step buffer (:mod:`aioenv.engine._child`) are these frames too: its requests
and answers as STATE (or BATCH_STATE) frames, a step's infos as an INFOS frame.

**The message socket.** A message is a fixed binary header followed by a payload::

    payload length (u64) | sequence number (u64) | kind (u8) | slot (u16) | payload

``kind`` is a :class:`~aioenv.wire._requests.Request` on the way to the child (the
vocabulary a Ray actor's messages share) and a :class:`Kind` on the way back. ``slot``
says which of the child's envs the message is for (a child can host several).
Requests carry a sequence number and the reply repeats it, so the parent can tell the
reply to the current request from a late reply to an abandoned one (sequence number 0:
no reply expected). The parent reads without ever blocking (``FrameDecoder`` is fed
whatever bytes have arrived); the child reads and writes with plain blocking calls.

**The alive socket.** Only the parent holds its far end, and never writes data on it, so
end-of-file there tells the child that the parent died. It also carries file descriptors
(a lane's memory and wakes, see :mod:`aioenv.engine._lane`): one byte with each descriptor
attached (SCM_RIGHTS), sent just before the LANE message that describes them. Descriptors
ride on this socket, read by the child's watchdog thread
(:func:`aioenv.env_side._process_group.exit_with_own_group_when_gone`), because
receiving them on the message socket would need ``recvmsg`` for every request, several
times slower than ``recv``.
"""

from __future__ import annotations

import enum
import functools
import pickle
import struct
from typing import Any

import cloudpickle
import numpy as np

from ..core._environment import BatchStep, Step
from ..core._messages import Failure
from ._pickles import decode_infos, dumps, encode_infos, loads, raw_dtype
from ._requests import STEP, STEP_ARRAY, Request
from ._shared_memory import SharedObservations

__all__ = [
    "BATCH_STATE",
    "HEADER",
    "INFOS",
    "LANE_ANSWER",
    "READY",
    "RECEIVE_SIZE",
    "STEP_STATE",
    "FrameDecoder",
    "Kind",
    "decode_array",
    "decode_batch_step",
    "decode_reply",
    "decode_spin",
    "encode",
    "encode_action",
    "encode_array_action",
    "encode_batch_step",
    "encode_reply",
    "encode_spin",
    "encode_step",
    "Frame",
]

HEADER = struct.Struct("<QQBH")


class Kind(enum.IntEnum):
    """What a frame from the child carries. A frame to the child carries a request, and
    its kind is that :class:`~aioenv.wire._requests.Request`'s number."""

    READY = 16  # the env was built (or failed to be); payload: (observation_space, action_space)
    STATE = 17  # payload: the state (or the Failure raised), pickled
    STEP_STATE = 19  # payload: a Step in encode_step's binary layout (no pickling)
    BATCH_STATE = 20  # payload: a BatchStep in encode_batch_step's layout
    LANE_ANSWER = 21  # a LANE request served: payload b"\x01" (the lane is in use) or empty
    INFOS = 22  # beside an engine child's rows: a step's infos, payload their flag (u8) and bytes


# The kinds the parent's hot path tests, as plain ints: a frame's kind arrives as an int,
# and comparing two ints is cheaper than looking up and comparing an enum member.
READY, STEP_STATE, BATCH_STATE, LANE_ANSWER, INFOS = (
    int(Kind.READY),
    int(Kind.STEP_STATE),
    int(Kind.BATCH_STATE),
    int(Kind.LANE_ANSWER),
    int(Kind.INFOS),
)

#: Bytes either side reads from the message socket at once.
RECEIVE_SIZE = 1 << 16


def encode(kind: Kind | Request, seq: int, payload: bytes = b"", slot: int = 0) -> bytes:
    return HEADER.pack(len(payload), seq, kind, slot) + payload


def encode_action(seq: int, action: Any, slot: int) -> bytes:
    """A STEP message of ``action``, pickled (the hot path's :func:`encode`, with no call
    to :func:`dumps`); raises what pickling raises."""
    payload = pickle.dumps(action, protocol=5)
    return HEADER.pack(len(payload), seq, STEP, slot) + payload


def encode_array_action(seq: int, action: np.ndarray[Any, Any], slot: int) -> bytes:
    """A STEP_ARRAY message: a numeric array action (a batch of actions, a continuous
    action) as its dtype, shape and raw bytes, several times cheaper than a pickle; for
    an array whose dtype is :func:`raw_dtype`."""
    payload = _array_header(action.dtype, action.shape) + action.tobytes()
    return HEADER.pack(len(payload), seq, STEP_ARRAY, slot) + payload


_SECONDS = struct.Struct("<d")


def encode_spin(seconds: float, slot: int) -> bytes:
    """A SPIN message: from now on the child polls ``seconds`` for each next request
    before it blocks (no answer)."""
    return encode(Request.SPIN, 0, _SECONDS.pack(seconds), slot)


def decode_spin(payload: bytes | memoryview) -> float:
    """The seconds a SPIN message carries."""
    seconds: float = _SECONDS.unpack(payload)[0]
    return seconds


def decode_array(payload: bytes | memoryview) -> np.ndarray[Any, Any]:
    """The array of a STEP_ARRAY message (a fresh, writable copy)."""
    return _decode_observation(payload, 0, len(payload), _RAW_ARRAY, None)  # type: ignore[no-any-return]


# A Step: reward, flags, then the observation (raw array bytes, a pickle, or nothing when it
# is in shared memory), then a pickled tail (info, final_observation, final_info) only when
# there is something in it.
_STEP_HEAD = struct.Struct("<dBI")  # reward, flags, length of the observation part
_ARRAY_HEAD = struct.Struct("<BB")  # length of the dtype string, number of dimensions
_TERMINATED, _TRUNCATED, _RAW_ARRAY, _TAIL, _SHARED = 1, 2, 4, 8, 16
_BATCH_FLAGS_AT = struct.calcsize("<I")  # the flags byte's offset in a BATCH_STATE payload


def encode_step(
    seq: int, step: Step[Any], slot: int = 0, shared: SharedObservations | None = None
) -> bytes:
    """A STEP_STATE message for ``step``: plain numeric arrays travel as raw bytes, or are
    written to ``shared`` memory when they fit its layout."""
    flags, body = _encode_observation(step.observation, shared)
    flags |= (_TERMINATED if step.terminated else 0) | (_TRUNCATED if step.truncated else 0)
    size = sum(map(len, body))
    if step.info or step.final_observation is not None or step.final_info is not None:
        flags |= _TAIL
        body.append(dumps((step.info, step.final_observation, step.final_info)))
    payload = b"".join([_STEP_HEAD.pack(step.reward, flags, size), *body])
    return HEADER.pack(len(payload), seq, STEP_STATE, slot) + payload


# A BatchStep of k envs: k, flags, length of the observation part; then the rewards (k
# float64), terminated and truncated (k bytes each), the stacked observations as for a Step,
# and a pickled tail only when there is something in it: the infos packed as records
# (flag PACKED_INFOS), or in gymnasium's vector form with their kinds (VECTOR_INFOS),
# else the sparse per-row infos and finals.
_BATCH_HEAD = struct.Struct("<IBI")


def encode_batch_step(
    seq: int, batch: BatchStep[Any], slot: int = 0, shared: SharedObservations | None = None
) -> bytes:
    """A BATCH_STATE message: one header and a few raw arrays for the whole batch."""
    flags, body = _encode_observation(batch.observations, shared)
    size = sum(map(len, body))
    tail = encode_infos(batch)
    if tail is not None:
        flags |= _TAIL | tail[0]
        body.append(tail[1])
    head = _BATCH_HEAD.pack(len(batch.rewards), flags, size)
    arrays = [
        np.ascontiguousarray(batch.rewards, np.float64).tobytes(),
        np.ascontiguousarray(batch.terminated, np.bool_).tobytes(),
        np.ascontiguousarray(batch.truncated, np.bool_).tobytes(),
    ]
    payload = b"".join([head, *arrays, *body])
    return HEADER.pack(len(payload), seq, BATCH_STATE, slot) + payload


def decode_batch_step(
    payload: bytes | memoryview, shared: SharedObservations | None = None
) -> BatchStep[Any]:
    """The BatchStep of a BATCH_STATE message (arrays copied out of the message; stacked
    observations in shared memory are a view, as for a Step's in :func:`decode_reply`)."""
    rows, flags, size = _BATCH_HEAD.unpack_from(payload)
    at = _BATCH_HEAD.size
    rewards = np.frombuffer(payload, np.float64, rows, at).copy()
    at += 8 * rows
    terminated = np.frombuffer(payload, np.bool_, rows, at).copy()
    truncated = np.frombuffer(payload, np.bool_, rows, at + rows).copy()
    at += 2 * rows
    observations = _decode_observation(payload, at, size, flags, shared)
    if not flags & _TAIL:
        return BatchStep(observations, rewards, terminated, truncated)
    return decode_infos(flags, payload[at + size :], (observations, rewards, terminated, truncated))


def encode_reply(
    seq: int, result: Any, slot: int = 0, shared: SharedObservations | None = None
) -> bytes:
    """The message answering request ``seq`` with ``result``: a Step or a BatchStep in
    its binary layout (:func:`encode_step`, :func:`encode_batch_step`), anything else (a
    Failure too) pickled whole, as STATE. What the standard pickle cannot take (a class of
    the user's main module, shipped with the env) goes by value (cloudpickle hands the
    parent back its own class objects); what will not pickle at all goes as the Failure
    of that, and a Failure whose exception will not pickle goes without it, its text and
    traceback kept."""
    try:
        if type(result) is Step:
            return encode_step(seq, result, slot, shared)
        if type(result) is BatchStep:
            return encode_batch_step(seq, result, slot, shared)
    except Exception:
        pass  # pickled whole below, by value where it must be
    # (A Failure too: the parent unpickles either alike.)
    try:
        data = pickle.dumps(result, protocol=5)
    except Exception:
        try:
            data = cloudpickle.dumps(result, protocol=5)
        except Exception as exc:
            if not isinstance(result, Failure):
                result = Failure.from_exception(exc, "pickling the answer to send it to the parent")
            data = pickle.dumps(result.without_exception(), protocol=5)
    return encode(Kind.STATE, seq, data, slot)


def decode_reply(
    kind: int, payload: bytes | memoryview, shared: SharedObservations | None
) -> tuple[Any, bool]:
    """A reply's state (or Failure) and whether its observation views ``shared`` memory.
    A Step's array observation is a fresh, writable copy, except one in shared memory:
    that is a view of ``shared``, valid until the next request."""
    if kind == STEP_STATE:
        reward, flags, size = _STEP_HEAD.unpack_from(payload)
        start = _STEP_HEAD.size
        observation = _decode_observation(payload, start, size, flags, shared)
        terminated, truncated = bool(flags & _TERMINATED), bool(flags & _TRUNCATED)
        # The tail (info, final observation, final info) travels only when there is one.
        tail = loads(payload[start + size :]) if flags & _TAIL else ({},)
        return Step(observation, reward, terminated, truncated, *tail), bool(flags & _SHARED)
    if kind == BATCH_STATE:
        state = decode_batch_step(payload, shared)
        return state, bool(payload[_BATCH_FLAGS_AT] & _SHARED)
    return loads(payload), False


def _encode_observation(
    observation: Any, shared: SharedObservations | None
) -> tuple[int, list[bytes]]:
    if shared is not None and shared.write(observation):
        return _SHARED, []
    if type(observation) is np.ndarray and raw_dtype(observation.dtype):
        return _RAW_ARRAY, [
            _array_header(observation.dtype, observation.shape),
            observation.tobytes(),
        ]
    return 0, [dumps(observation)]


def _decode_observation(
    payload: bytes | memoryview,
    start: int,
    size: int,
    flags: int,
    shared: SharedObservations | None,
) -> Any:
    if flags & _SHARED:
        if shared is None:
            raise ValueError("a reply refers to shared memory this worker does not have")
        return shared.read()
    if flags & _RAW_ARRAY:
        header_end = start + _ARRAY_HEAD.size + payload[start] + 8 * payload[start + 1]
        dtype, shape = _array_description(bytes(payload[start:header_end]))
        return np.ndarray(shape, dtype, payload, header_end).copy()
    return loads(payload[start : start + size])


@functools.cache
def _array_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    """Length of the dtype string, number of dimensions, the dtype string, the shape."""
    code: bytes = dtype.str.encode()
    ndim = len(shape)
    return _ARRAY_HEAD.pack(len(code), ndim) + code + struct.pack(f"<{ndim}Q", *shape)


@functools.cache
def _array_description(header: bytes) -> tuple[np.dtype[Any], tuple[int, ...]]:
    """What :func:`_array_header` wrote: the dtype and the shape."""
    code_length, ndim = _ARRAY_HEAD.unpack_from(header)
    at = _ARRAY_HEAD.size
    dtype = np.dtype(header[at : at + code_length].decode())
    shape = struct.unpack_from(f"<{ndim}Q", header, at + code_length)
    return dtype, shape


Frame = tuple[int, int, int, "bytes | memoryview"]  # kind, seq, slot, payload


class FrameDecoder:
    """Turns a byte stream, fed in chunks of any size, into ``(kind, seq, slot, payload)``."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes | memoryview) -> list[Frame]:
        size = HEADER.size
        buffer = self._buffer
        if buffer:
            # A frame begun in an earlier chunk: once it is whole, the frames are read
            # from a copy of what is buffered (each payload then a copy of its own).
            buffer += chunk
            if len(buffer) < size or len(buffer) < size + HEADER.unpack_from(buffer)[0]:
                return []
            chunk = bytes(buffer)
            buffer.clear()
        # Whole frames are cut out of the chunk itself (views of it, where it is a view).
        frames: list[Frame] = []
        offset = 0
        end = len(chunk)
        while end - offset >= size:
            length, seq, kind, slot = HEADER.unpack_from(chunk, offset)
            stop = offset + size + length
            if stop > end:
                break
            frames.append((kind, seq, slot, chunk[offset + size : stop]))
            offset = stop
        if offset < end:
            buffer += chunk[offset:]
        return frames

    @property
    def pending_bytes(self) -> int:
        return len(self._buffer)

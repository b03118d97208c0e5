"""How the objects a process worker's frames (and the engine's messages) carry are pickled:
plainly, or with their numeric arrays as raw bytes, dtype and shape (a child's answer,
by value where it must be, is :func:`aioenv.wire._frames.encode_reply`'s); and a batch's
infos as they travel (:func:`encode_infos`), the same way in both."""

from __future__ import annotations

import copyreg
import functools
import io
import pickle
from typing import Any

import numpy as np

from ..core._environment import BatchStep
from ..core._infos import FlatInfos

__all__ = [
    "VECTOR_INFOS",
    "PACKED_INFOS",
    "decode_infos",
    "dumps",
    "dumps_arrays",
    "encode_infos",
    "loads",
    "not_pickled",
    "pickled_for",
    "raw_dtype",
]

#: How a batch's infos travel, beside their bytes: packed as records, in gymnasium's
#: vector form with their kinds, or (neither) as the sparse per-row infos and finals.
VECTOR_INFOS, PACKED_INFOS = 32, 64


def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=5)


#: The standard unpickler itself: what :func:`dumps` (or cloudpickle) wrote.
loads = pickle.loads


def pickled_for(obj: Any, what: str, worker: Any) -> bytes:
    """:func:`dumps` of ``obj`` (``what`` it is) to send to ``worker``'s process: TypeError
    saying what could not be pickled, with the worker's ``name`` (read only then: a
    worker's name is made each time it is read)."""
    try:
        return pickle.dumps(obj, protocol=5)
    except Exception as exc:
        raise not_pickled(what, worker, exc) from exc


def not_pickled(what: str, worker: Any, exc: Exception) -> TypeError:
    """The error for ``what`` (an action, a request) that raised ``exc`` as it was pickled
    to go to ``worker``'s process."""
    return TypeError(
        f"{worker.name}: the {what} could not be pickled to send it to the worker process "
        f"({type(exc).__name__}: {exc})"
    )


def dumps_arrays(obj: Any) -> bytes:
    """:func:`dumps`, numeric arrays pickled as their raw bytes, dtype and shape (what a
    batch's vector infos are made of): a third of the default's cost each way, which
    goes through numpy's generic reconstruction and pickles the dtype as an object."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.dispatch_table = _ARRAYS_AS_BYTES
    pickler.dump(obj)
    return buffer.getvalue()


def raw_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether arrays of ``dtype`` travel as their raw bytes and dtype string: not for
    objects, nor for a structured dtype, whose string (``|V6``) drops its fields."""
    return not dtype.hasobject and dtype.fields is None


def _reduce_array(array: np.ndarray[Any, Any]) -> Any:
    if not raw_dtype(array.dtype):
        return array.__reduce_ex__(5)
    if array.ndim == 1:
        return _vector, (array.tobytes(), array.dtype.str)
    return _array, (array.tobytes(), array.dtype.str, array.shape)


def _vector(data: bytes, dtype: str) -> np.ndarray[Any, Any]:
    """A 1-D array of :func:`dumps_arrays` (writable: it owns a copy of ``data``)."""
    array: np.ndarray[Any, Any] = np.frombuffer(data, _dtype(dtype)).copy()
    return array


def _array(data: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    return _vector(data, dtype).reshape(shape)


_dtype = functools.cache(np.dtype)
_ARRAYS_AS_BYTES = {**copyreg.dispatch_table, np.ndarray: _reduce_array}


def encode_infos(batch: BatchStep[Any]) -> tuple[int, bytes] | None:
    """A batch's infos as they travel (a BATCH_STATE's tail, and the engine's message
    beside its buffer): their flag and bytes; None where there are none."""
    if batch.packed_infos is not None:
        return PACKED_INFOS, dumps(tuple(batch.packed_infos))
    if batch.vector_infos is not None:
        if not batch.vector_infos:
            return None
        return VECTOR_INFOS, dumps_arrays((batch.vector_infos, batch.info_types))
    if batch.infos or batch.final_infos:
        return 0, dumps((batch.infos, batch.final_observations, batch.final_infos))
    return None


def decode_infos(
    flags: int, data: bytes | memoryview, parts: tuple[Any, Any, Any, Any]
) -> BatchStep[Any]:
    """The BatchStep of ``parts`` (its observations, rewards, terminated and truncated
    flags) and the infos :func:`encode_infos` gave as ``flags`` and ``data``."""
    if flags & PACKED_INFOS:
        return BatchStep(*parts, packed_infos=FlatInfos(*loads(data)))
    if flags & VECTOR_INFOS:
        vector_infos, info_types = loads(data)
        return BatchStep(*parts, vector_infos=vector_infos, info_types=info_types)
    return BatchStep(*parts, *loads(data))  # the infos, final observations and final infos

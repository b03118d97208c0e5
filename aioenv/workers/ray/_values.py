"""Large arguments of control requests (``pool.set_attr``, ``pool.call``) go into Ray's
object store once, however many Ray workers they are sent to.

A pool sends one value to many workers in one go (one loop iteration). The first Ray worker
to send a large value puts it (``ray.put``) and every other Ray worker sending the same
object in that iteration passes the same reference; each actor fetches it from its node's
object store, so the value is serialized once and crosses the network once per node
rather than once per actor. Small values travel inline: a put would cost more than it saves.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import numpy as np

from ...core._messages import ControlRequest

__all__ = ["SHARE_THRESHOLD", "shared_request"]

#: Bytes (estimated) from which an argument goes through the object store.
SHARE_THRESHOLD = 64 * 1024

_MAX_DEPTH = 4


class _PutOnce:
    """The references put in this loop iteration, by the id of the value put (the value is
    held too, so the id cannot be reused); forgotten at the next iteration."""

    def __init__(self) -> None:
        self._refs: dict[int, tuple[Any, Any]] = {}

    def ref(self, value: Any) -> Any:
        entry = self._refs.get(id(value))
        if entry is not None:
            return entry[1]
        import ray

        ref = ray.put(value)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return ref  # outside a loop no sends are batched: nothing to share it with
        if not self._refs:
            loop.call_soon(self._refs.clear)
        self._refs[id(value)] = (value, ref)
        return ref


_PUT_ONCE = _PutOnce()


def shared_request(request: ControlRequest) -> ControlRequest:
    """``request`` with its large arguments replaced by object references (shared with the
    other Ray workers it is sent to in this loop iteration)."""
    if request.op not in ("call", "set"):
        return request
    if not any(_large(v) for v in (*request.args, *request.kwargs.values())):
        return request
    args = tuple(_PUT_ONCE.ref(v) if _large(v) else v for v in request.args)
    kwargs = {k: _PUT_ONCE.ref(v) if _large(v) else v for k, v in request.kwargs.items()}
    return dataclasses.replace(request, args=args, kwargs=kwargs)


def _large(value: Any) -> bool:
    return _size(value, 0) >= SHARE_THRESHOLD


def _size(value: Any, depth: int) -> int:
    """A cheap lower bound of ``value``'s pickled size: arrays and buffers counted, the
    rest nearly free. Stops early once the threshold is reached."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return len(value)
    if depth >= _MAX_DEPTH:
        return 0
    items: Any
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        nbytes = getattr(value, "nbytes", None)  # torch tensors, jax arrays
        return nbytes if isinstance(nbytes, int) else 0
    total = 0
    for item in items:
        total += _size(item, depth + 1)
        if total >= SHARE_THRESHOLD:
            break
    return total

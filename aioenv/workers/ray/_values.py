"""Large arguments of control requests (``pool.set_attr``, ``pool.call``) go into Ray's
object store once, however many Ray workers they are sent to.

A pool sends one value to many workers in one go (one loop iteration). The first Ray worker
to send a large value marks it to be put (:func:`shared_request`), and every other Ray
worker sending the same object in that iteration passes the same mark; the first actor
call that carries it, made off the event loop (:mod:`aioenv.workers.ray._host`), puts it
(``ray.put``, :func:`with_references`), and the others pass the reference. Each actor
fetches it from its node's object store, so the value is serialized once and crosses the
network once per node rather than once per actor. Small values travel inline: a put would
cost more than it saves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core._messages import ControlRequest
from ...loops._here import running_loop
from ...wire._ray_messages import with_arguments

__all__ = ["SHARE_THRESHOLD", "shared_request", "with_references"]

#: Bytes (estimated) from which an argument goes through the object store.
SHARE_THRESHOLD = 64 * 1024

_MAX_DEPTH = 4


class _Put:
    """A large value that goes into the object store once, put by the first actor call
    that carries it (off the event loop); every call carrying it passes the reference."""

    __slots__ = ("_ref", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self._ref: Any = None

    def ref(self) -> Any:
        if self._ref is None:
            import ray

            self._ref = ray.put(self.value)
        return self._ref


#: The values marked to be put in this loop iteration, by the id of the value (held by its
#: mark, so the id cannot be reused); forgotten at the next iteration.
_MARKS: dict[int, _Put] = {}


def _mark(value: Any) -> _Put:
    put = _MARKS.get(id(value))
    if put is not None:
        return put
    put = _Put(value)
    loop = running_loop()
    if loop is None:
        return put  # outside a loop no sends are batched: nothing to share it with
    if not _MARKS:
        loop.call_soon(_MARKS.clear)
    _MARKS[id(value)] = put
    return put


def shared_request(request: ControlRequest) -> ControlRequest:
    """``request`` with its large arguments marked to be put into the object store, once
    for every Ray worker it is sent to in this loop iteration (no Ray call here: see
    :func:`with_references`)."""
    if request.op not in ("call", "set"):
        return request
    return with_arguments(request, _large, _mark)


def with_references(request: ControlRequest) -> ControlRequest:
    """``request`` with its marked arguments put (the first time) and replaced by their
    object references: where the actor call is made, off the event loop."""
    return with_arguments(request, lambda value: type(value) is _Put, _Put.ref)


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

"""The actor calls of Ray workers, made off the event loop.

Ray's calls take the GIL for a while and, on busy cores, tens of milliseconds, during which
every other worker of a pool would wait. So the actor calls asked for in one loop
iteration, every host's (:class:`~aioenv.workers.ray._host.ActorHost`), are handed
together to :data:`ACTOR_CALLS`, one thread that makes them in the order asked for (so
each actor runs them in that order, and answers in that order too), putting the large
values they carry into Ray's object store there, once per value (:func:`shared_request`
and :func:`with_references` below, and the policies of :func:`_portable`).
Each answer comes back on the ``ObjectRef``'s future, completed on Ray's own thread and
handed to the loop with ``call_soon_threadsafe`` (no thread per call, no polling, no
blocking ``ray.get``).

Large arguments of control requests (``pool.set_attr``, ``pool.call``) go into Ray's
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

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ...core._messages import ControlRequest
from ...core._rollouts import Rollout, package_of
from ...loops._here import running_loop
from ...wire._ray_messages import Message, with_arguments
from ...wire._requests import Request
from .._off_loop import OffLoopCalls, call_soon_threadsafe

__all__ = ["ACTOR_CALLS", "Call", "add_outbox", "send_off_loop", "shared_request"]

#: The process's actor calls, made in the order asked for. Each open Ray worker holds it
#: (the thread waits for its next call, rather than a thread started for each:
#: milliseconds on a busy machine).
ACTOR_CALLS = OffLoopCalls("aioenv-ray-calls")

#: An actor call to make off the loop: the actor method, its arguments, where its answer
#: goes, and whether the arguments are messages to make portable there.
Call = tuple[Any, tuple[Any, ...], asyncio.Future[Any], bool]


#: Per event loop, the hosts with messages queued in its current iteration, as the
#: functions that take each one's call: at the iteration's end, one hand-off to
#: :data:`ACTOR_CALLS` carries every host's call.
_OUTBOXES: dict[asyncio.AbstractEventLoop, list[Callable[[], Call | None]]] = {}


def add_outbox(loop: asyncio.AbstractEventLoop, flush: Callable[[], Call | None]) -> None:
    """``flush`` (on the loop, once this iteration's callbacks have run) returns the
    host's call, or None if it has none to make now."""
    flushes = _OUTBOXES.get(loop)
    if flushes is None:
        flushes = _OUTBOXES[loop] = []
        loop.call_soon(_hand_off, loop)
    flushes.append(flush)


def _hand_off(loop: asyncio.AbstractEventLoop) -> None:
    calls = [call for flush in _OUTBOXES.pop(loop) if (call := flush()) is not None]
    if calls:
        send_off_loop(calls)


def send_off_loop(calls: list[Call]) -> None:
    """Make ``calls`` in :data:`ACTOR_CALLS`'s thread, after those asked for before."""
    ACTOR_CALLS.submit(functools.partial(_make_calls, calls))


def _make_calls(calls: list[Call]) -> None:
    """Off the loop: make ``calls`` in order, each answer to be handed to its loop."""
    for method, args, reply, messages in calls:
        try:
            if messages:
                args = ([_portable(message) for message in args[0]],)
            ref = method.remote(*args)
            future = ref.future()
        except BaseException as exc:  # the call was not made: that is its answer
            ref, future = None, concurrent.futures.Future()
            future.set_exception(exc)
        future.add_done_callback(functools.partial(_on_answer, reply, ref))  # ref held till then


def _portable(message: Message) -> Message:
    """A message with the large values it carries put into the object store: a policy's
    bytes (once per policy) and a control request's large arguments (once per value sent
    in one loop iteration, see :func:`shared_request`).

    A policy package (a rollout's, or ``pool.set_policy``'s request's) keeps the reference
    to its bytes, :attr:`~aioenv.core._rollouts.PolicyPackage.stored`: they are put once
    per package, however many actors it goes to, and the reference lives as long as the
    package, which the pool holds while the policy is in force."""
    slot, seq, request, payload = message
    if request == Request.CONTROL:
        payload = with_references(payload)
    elif request != Request.STEP or type(payload) is not Rollout:
        return message
    package = package_of(payload)
    if package is None:
        return (slot, seq, request, payload)
    if package.stored is None:
        import ray

        package.stored = ray.put(package.pickled())
    return (slot, seq, request, package.repacked(payload, package.stored))


def _on_answer(
    reply: asyncio.Future[Any], ref: Any, future: concurrent.futures.Future[Any]
) -> None:
    """On Ray's thread (or where the call could not be made): hand the answer, the done
    ``future``, to the reply's loop."""
    call_soon_threadsafe(reply.get_loop(), functools.partial(_settle, reply, future))


def _settle(reply: asyncio.Future[Any], future: concurrent.futures.Future[Any]) -> None:
    """On the reply's loop: ``reply`` takes the outcome of ``future``."""
    if reply.done():
        return  # cancelled meanwhile (an end that stopped waiting)
    if future.cancelled():
        reply.cancel()
    elif (error := future.exception()) is not None:
        reply.set_exception(error)
    else:
        reply.set_result(future.result())


# Large values, put into the object store once ----------------------------------------
#: Bytes (estimated) from which an argument goes through the object store.
SHARE_THRESHOLD = 64 * 1024

_MAX_DEPTH = 4


class _Put:
    """A large value that goes into the object store once, put by the first actor call
    that carries it (off the event loop); every call carrying it passes the reference."""

    def __init__(self, value: Any) -> None:
        self.value = value

    @functools.cached_property
    def ref(self) -> Any:
        """The reference, the value put the first time it is asked for."""
        import ray

        return ray.put(self.value)


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
    return with_arguments(request, lambda value: _size(value, 0) >= SHARE_THRESHOLD, _mark)


def with_references(request: ControlRequest) -> ControlRequest:
    """``request`` with its marked arguments put (the first time) and replaced by their
    object references: where the actor call is made, off the event loop."""
    return with_arguments(request, lambda value: type(value) is _Put, lambda put: put.ref)


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

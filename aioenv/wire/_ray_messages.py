"""What travels between a Ray worker's host and its actor: one actor call carries a list of
:data:`Message` and returns a list of :data:`Reply` (on the actor's direct connection,
each goes as a frame of the process worker's wire, :mod:`aioenv.wire._frames`). Shared by
both sides; what a message asks is a :class:`~aioenv.wire._requests.Request`, as in a
process worker."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..core._messages import ControlRequest

__all__ = [
    "CHANNEL_GROUP",
    "TOKEN_BYTES",
    "Message",
    "Pickled",
    "Reply",
    "with_arguments",
]


#: ``(slot, seq, request, payload)``: one request for one slot; ``request`` is a
#: :class:`~aioenv.wire._requests.Request`, or its number where it came in a frame.
Message = tuple[int, int, int, Any]
#: ``(slot, seq, result)``: a state, a control's result or a :class:`Failure`; with ``seq``
#: 0, a tuple says that a slot's env was built (BUILD, REBUILD): its spaces,
#: ``(observation_space, action_space)`` (both None where they could not travel).
Reply = tuple[int, int, Any]


@dataclasses.dataclass(frozen=True)
class Pickled:
    """A reply in cloudpickle's bytes (spaces, control results): classes the parent
    shipped by value with the env (a custom space defined in a script) come back as the
    parent's own classes, where Ray's serializer would make new ones that compare unequal."""

    data: bytes


#: The Ray concurrency group the actor answers its direct connection in, beside its calls.
CHANNEL_GROUP = "channel"
#: The bytes of the secret the parent sends first on a direct connection, proving that the
#: actor handed it the address: nothing else is read from a connection that lacks it.
TOKEN_BYTES = 32


def with_arguments(
    request: ControlRequest, picked: Callable[[Any], bool], replaced: Callable[[Any], Any]
) -> ControlRequest:
    """``request`` with each argument that ``picked`` picks replaced by ``replaced`` of it
    (the request itself where none is): how a control request's large arguments go into
    Ray's object store on the parent's side, and come out of it on the actor's."""
    if not any(picked(value) for value in (*request.args, *request.kwargs.values())):
        return request
    args = tuple(replaced(v) if picked(v) else v for v in request.args)
    kwargs = {k: replaced(v) if picked(v) else v for k, v in request.kwargs.items()}
    return dataclasses.replace(request, args=args, kwargs=kwargs)

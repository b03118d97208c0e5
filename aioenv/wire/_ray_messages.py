"""What travels between a Ray worker's host and its actor: one actor call carries a list
of :data:`Message` and returns a list of :data:`Reply`. Shared by both sides; what a
message asks is a :class:`~aioenv.wire._requests.Request`, as in a process worker."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._requests import Request

__all__ = ["Message", "Pickled", "Ready", "Reply"]


#: ``(slot, seq, request, payload)``: one request for one slot.
Message = tuple[int, int, Request, Any]
#: ``(slot, seq, result)``: a state, a control's result, a :class:`Failure` or :class:`Ready`.
Reply = tuple[int, int, Any]


@dataclasses.dataclass(frozen=True)
class Pickled:
    """A reply in cloudpickle's bytes (spaces, control results): classes the parent
    shipped by value with the env (a custom space defined in a script) come back as the
    parent's own classes, where Ray's serializer would make new ones that compare unequal."""

    data: bytes


@dataclasses.dataclass(frozen=True)
class Ready:
    """A slot's env was built: its spaces (None where they could not travel)."""

    observation_space: Any
    action_space: Any

"""What travels between a Ray worker's host and its actor: one actor call carries a list
of :data:`Message` and returns a list of :data:`Reply`. A leaf module, shared by both sides."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

__all__ = ["Message", "Op", "Pickled", "Ready", "Reply"]


class Op(enum.IntEnum):
    """What a message asks of a slot."""

    BUILD = 0  # build the env (seeded as given at start-up) and report its spaces
    REBUILD = 1  # close the env and build a fresh one: payload (seed, episode options)
    STEP = 2  # RESET, Reset(...) or an action: payload the action
    CONTROL = 3  # payload a ControlRequest
    CLOSE_SLOT = 4  # close the env of this slot


#: ``(slot, seq, op, payload)``: one request for one slot.
Message = tuple[int, int, Op, Any]
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

"""What a request asks of a serving process (a process worker's child, a Ray actor): the
one vocabulary of request kinds, their names and numbers, whose meaning
:class:`aioenv.env_side._serving.Slots` writes once. A process child's frames carry these
numbers as their kind (:mod:`aioenv.wire._frames`), a Ray actor's messages these members
(:mod:`aioenv.wire._ray_messages`). A leaf module: the parent's side sends these, the
env's side answers them."""

from __future__ import annotations

import enum

__all__ = ["CONTROL", "STEP", "STEP_ARRAY", "Request"]


class Request(enum.IntEnum):
    """What a request asks, and what its payload is."""

    # What a slot serves (Slots.serve), asked by a child's frame or an actor's message.
    BUILD = 0  # build the env (seeded as given at start-up); answered with its spaces
    STEP = 1  # RESET, Reset(...), a Rollout or an action: payload that request
    CONTROL = 2  # payload a ControlRequest; answered with its result
    REBUILD = 3  # close the env and build a fresh one: payload (seed, episode options)
    CLOSE_SLOT = 4  # close the env of this slot; no answer (a child serves its others on)
    # Only on a process child's socket: a STEP in another encoding, and the child's own.
    STEP_ARRAY = 6  # a STEP whose action is a numeric array: raw bytes, no pickling
    CLOSE = 8  # close every slot and end the child
    SPIN = 9  # payload: the seconds to poll for the next request before blocking (f64)
    LANE = 10  # payload: a lane's offer (aioenv.engine._lane); its descriptors ride along


# The requests the hot paths test, as plain ints: a frame's kind arrives as an int, and
# comparing two ints is cheaper than looking up and comparing an enum member.
STEP, CONTROL, STEP_ARRAY = int(Request.STEP), int(Request.CONTROL), int(Request.STEP_ARRAY)

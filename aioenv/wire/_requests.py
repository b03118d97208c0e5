"""What a request asks of an env slot of a serving process (a process worker's child, a
Ray actor): one vocabulary for both, whose meaning :class:`aioenv.env_side._serving.Slots`
writes once. A leaf module: the parent's side sends these, the env's side answers them."""

from __future__ import annotations

import enum

__all__ = ["Request"]


class Request(enum.IntEnum):
    """What a request asks of a slot, and what its payload is."""

    BUILD = 0  # build the env (seeded as given at start-up); answered with its spaces
    REBUILD = 1  # close the env and build a fresh one: payload (seed, episode options)
    STEP = 2  # RESET, Reset(...), a Rollout or an action: payload that request
    CONTROL = 3  # payload a ControlRequest
    CLOSE_SLOT = 4  # close the env of this slot; no answer

"""Rollouts inside a worker, the messages: a policy shipped once, a segment asked for and
answered.

A :class:`PolicyPackage` carries a user's policy to the env side. In the parent's own
process (sync, thread and async workers) it carries the object itself, which those workers
share. Pickled, it carries the policy's cloudpickle bytes (made once in the parent, however
many workers it goes to) or a Ray object reference to them, or only its key when the
receiving process has it already; each process unpickles a key once and its slots share the
result (see :class:`~aioenv.env_side._segment.PolicyCache`).

A :class:`Rollout` is a request like a step (it goes where steps go, so deadlines, restarts
and stale-reply checks apply to it as to a step): the runner plays ``num_steps`` transitions
per env with the policy (see :mod:`aioenv.env_side._segment`) and answers one
:class:`Segment` of arrays per env (a worker of several envs: the list of them, env 0's
first).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _pickling as pickling
from ._messages import ControlRequest

__all__ = ["DTYPES", "PolicyPackage", "Rollout", "Segment", "Transitions", "package_of"]

_NO_OBJECT = object()


class PolicyPackage:
    """A policy on its way to the env side: ``version`` (an int) and ``key`` (unique per
    :meth:`~aioenv.WorkerPool.set_policy` call) name it; ``payload`` is its cloudpickle
    bytes, a Ray object reference to them, or None (the receiving process has it).
    ``stored``: in the parent, the reference to its bytes once they were put in Ray's
    object store (once per package, however many actors it goes to). ``policy``: the
    policy object itself, where the package is :attr:`in_process` (read only there: a
    package that travelled as bytes has none)."""

    __slots__ = ("key", "payload", "policy", "stored", "version")

    def __init__(self, version: int, key: str, payload: Any = None, policy: Any = _NO_OBJECT):
        self.version = version
        self.key = key
        self.payload = payload
        self.policy = policy
        self.stored: Any = None

    @property
    def in_process(self) -> bool:
        """The package carries the policy object itself: it never left the parent's
        process, and the workers there share that object."""
        return self.policy is not _NO_OBJECT

    def pickled(self) -> bytes:
        """The policy's cloudpickle bytes, made on first use only (the parent pickles a
        policy once, however many workers it goes to)."""
        if not isinstance(self.payload, bytes):
            try:
                self.payload = pickling.dumps(self.policy)
            except Exception as exc:
                raise TypeError(
                    f"the policy (version {self.version}) could not be pickled with cloudpickle "
                    f"to send it to a worker process ({type(exc).__name__}: {exc}); make it "
                    "plain data (numpy arrays) and a function or class, or use thread workers"
                ) from exc
        payload: bytes = self.payload
        return payload

    def repacked(self, request: Any, payload: Any) -> Any:
        """``request``, which carries this package (see :func:`package_of`), with the
        package travelling with ``payload`` in place of its own: None (its key alone, for a
        child process that has it already) or a Ray object reference to its bytes."""
        package = PolicyPackage(self.version, self.key, payload)
        if type(request) is Rollout:
            return dataclasses.replace(request, policy=package)
        return dataclasses.replace(request, kwargs={**request.kwargs, "package": package})

    def __reduce__(self) -> tuple[Any, ...]:
        # The object itself never travels: its bytes (pickled once), a reference, or nothing.
        payload = self.pickled() if self.in_process else self.payload
        return (PolicyPackage, (self.version, self.key, payload))


@dataclasses.dataclass(frozen=True)
class Rollout:
    """Play ``num_steps`` transitions per env with ``policy`` and answer a :class:`Segment`
    per env.
    ``seed``: start from a fresh reset seeded so (env ``i`` of a worker: ``seed + i``); None:
    go on from where the last segment stopped (a reset if there is none).
    ``episode_timeout``: the seconds each episode may last (checked after each step: the
    step that finds its episode past it ends the episode truncated); None: no budget.
    ``fresh``: start from a reset even where an episode seems to go on (the worker ended
    it, out of its budget, while the env was idle)."""

    policy: PolicyPackage
    num_steps: int
    seed: int | None = None
    episode_timeout: float | None = None
    fresh: bool = False


def package_of(request: Any) -> PolicyPackage | None:
    """The policy package a request carries, if any: a :class:`Rollout`'s, or a
    ``ControlRequest("policy")``'s (from :meth:`~aioenv.WorkerPool.set_policy`)."""
    if type(request) is Rollout:
        return request.policy
    if type(request) is ControlRequest and request.op == "policy":
        package: PolicyPackage = request.kwargs["package"]
        return package
    return None


@dataclasses.dataclass(frozen=True, eq=False)
class Transitions:
    """The columns of transitions, one row each, that a worker's :class:`Segment` and the
    :class:`~aioenv.Trajectories` made of segments (and of collected episodes) share: the
    observation the policy saw, the action it chose, and the env's answer."""

    observations: Any
    actions: Any
    rewards: npt.NDArray[np.float64]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    next_observations: Any

    def __len__(self) -> int:
        return len(self.rewards)


@dataclasses.dataclass(frozen=True, eq=False)
class Segment(Transitions):
    """What a worker answers a :class:`Rollout` with, one per env (a worker of several envs
    answers the list of them, env 0's first): one row per transition of the env, in step
    order. ``step`` is the row's index in its episode (0 after a reset).
    Observations and actions are arrays where numpy can stack them, else lists."""

    step: npt.NDArray[np.int64]
    version: int
    #: The env's first row goes on from where its last segment stopped (that episode
    #: keeps its id), not from a reset or a state answered by hand.
    goes_on: bool


#: The dtype of each column of numbers that transitions have: a :class:`Segment`'s (its
#: ``step`` too) and the :class:`~aioenv.Trajectories`' made of segments (whose other
#: columns of numbers are ids, versions and open flags), rows or none.
DTYPES = {
    "rewards": np.float64,
    **dict.fromkeys(("terminated", "truncated", "open"), np.bool_),
    **dict.fromkeys(("step", "worker_id", "episode_id", "policy_version"), np.int64),
}

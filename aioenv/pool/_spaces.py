"""A pool's check that its workers share their spaces."""

from __future__ import annotations

from typing import Any

from gymnasium.vector.utils import batch_space

from ..core._errors import SpaceMismatch, WorkerError
from ..workers._seam import Member

__all__ = ["SpaceCheck"]


class SpaceCheck:
    """Checks each worker's spaces, when its env first answers, against the first
    reported by a worker of its size (envs it steps)."""

    def __init__(self) -> None:
        #: The spaces of the first worker of each size that reported them.
        self._spaces: dict[int, tuple[Any, Any]] = {}
        #: The spaces each worker last passed with: a restarted env that reports the same
        #: objects (a process worker keeps them when its new child's are the same bytes)
        #: passes without comparing them again (Box compares its bounds with allclose).
        self._passed: dict[int | None, tuple[Any, Any]] = {}
        #: Compare action spaces only (set by a pool whose caller checks observations
        #: itself: ``WorkerPool.allow_differing_observations``).
        self.observations_may_differ = False

    def check(self, worker: Member) -> WorkerError | None:
        """The error to raise in place of the worker's first reply, or None."""
        spaces = (worker.observation_space, worker.action_space)
        if spaces == (None, None):
            return None
        passed = self._passed.get(worker.worker_id)
        if passed is not None and passed[0] is spaces[0] and passed[1] is spaces[1]:
            return None
        reference = self._reference_spaces(worker.num_envs)
        if reference is None:
            self._spaces[worker.num_envs] = self._passed[worker.worker_id] = spaces
            return None
        for what, mine, theirs in zip(("observation", "action"), spaces, reference, strict=True):
            if what == "observation" and self.observations_may_differ:
                continue
            if mine != theirs:
                return SpaceMismatch(
                    f"{worker.name}: its {what} space {mine} differs from the pool's {theirs}; "
                    "every worker of a pool must share its spaces",
                    worker_id=worker.worker_id,
                )
        self._passed[worker.worker_id] = spaces
        return None

    def _reference_spaces(self, size: int) -> tuple[Any, Any] | None:
        """The spaces a worker stepping ``size`` envs must report: those of the first
        worker of that size, else a one-env worker's batched to ``size`` (a worker of
        several envs reports its envs' spaces batched); None for the first of its size
        where no one-env worker has reported yet."""
        if size in self._spaces:
            return self._spaces[size]
        if 1 not in self._spaces:
            return None
        single = self._spaces[1]
        return (
            None if single[0] is None else batch_space(single[0], size),
            None if single[1] is None else batch_space(single[1], size),
        )

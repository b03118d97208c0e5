"""The rollouts a pool's workers play with the policy they were sent, as the pool's
methods: ``set_policy``, ``rollout`` and ``policy_version``. :class:`~aioenv.WorkerPool`
inherits them; this module holds only their signatures and docs, :class:`Rollouts` does
the work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._rollout import Rollouts
from ._trajectories import Trajectories

__all__ = ["PoolCalls"]


class PoolCalls:
    """The rollouts of a :class:`~aioenv.WorkerPool`."""

    _rollouts: Rollouts

    # Rollouts inside workers (the pool's Rollouts) -------------------------------------
    @property
    def policy_version(self) -> int | None:
        """The version of the policy set by :meth:`set_policy` (None before the first)."""
        return self._rollouts.policy_version

    async def set_policy(self, policy: Any, version: int | None = None) -> int:
        """Ship ``policy`` to every open worker for :meth:`rollout`; return its version.

        ``policy`` is a callable from ONE observation to one action (a worker that steps
        several envs calls it once per env; there is no batch form). ``version``: an int
        greater than the previous one; None (the default) is the previous one plus 1, or 0
        for the first policy. Every transition a later rollout plays carries it.

        The policy is pickled once, in the parent, with cloudpickle, and only when a
        worker needs it so: each child process is sent the bytes once (workers sharing a
        child through ``envs_per_process`` share one unpickled copy), each Ray actor gets
        them through Ray's object store (one ``ray.put``). Sync, thread and async workers
        run in this process and share the object itself: thread workers call it from
        their threads, concurrently (a numpy policy is fine; guard any state it mutates).

        :raises ValueError: ``version`` does not increase.
        :raises TypeError: the policy is not callable or cannot be pickled for a process or
            Ray worker (the error names the worker).
        :raises EnvError: a worker could not unpickle it (names the worker).
        """
        return await self._rollouts.set_policy(policy, version)

    async def rollout(
        self, num_steps: int, *, seed: int | None = None, worker_ids: Sequence[int] | None = None
    ) -> Trajectories:
        """Each worker (``worker_ids``, default every open, unpaused worker not given up on)
        plays ``num_steps`` transitions per env with the policy of :meth:`set_policy` and
        answers one message; the result has exactly ``num_steps`` rows per env, ordered as
        :class:`~aioenv.Trajectories` are, each tagged with the policy's version.

        An env goes on from where its last segment stopped (its open episode's rows are
        marked ``open`` and continue in the next call, with the same episode id), or from
        the state of a reset or step sent to it by hand since;
        ``seed=s`` starts every env afresh from a reset seeded ``s + i`` (env ``i``
        counted across workers in worker order). Episodes end under the pool's
        ``max_episode_steps``; whatever the autoreset mode, the env is reset at once and
        ``next_observations`` holds the final observation. ``episode_stats()`` counts the
        episodes played.

        Failures: a worker whose segment fails loses that segment whole (no partial rows).
        Under ``restart="on_failure"`` its env is rebuilt (a new episode) and asked again
        for a whole segment. A worker that cannot go on makes ``rollout()`` raise its
        error once every other worker has answered; the others' segments are on the
        error's ``trajectories`` attribute. A cancelled ``rollout()`` discards its
        segments, and replies still in flight are dropped when they come: the pool can be
        used at once (a worker's env finishes the forgotten segment first).

        :raises RuntimeError: no policy was set.
        :raises ValueError: ``num_steps`` is not an int >= 1.
        :raises StateNotTaken: a worker has an action in flight or a state not taken.
        :raises WorkerRemoved: ``worker_ids`` names a worker that was given up on, or
            every worker was.
        """
        return await self._rollouts.rollout(num_steps, seed=seed, worker_ids=worker_ids)

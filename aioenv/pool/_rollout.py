"""Rollouts inside workers, the pool's side: ``set_policy`` and ``rollout``.

Each worker plays a whole segment locally with its copy of the policy and answers one
message (:mod:`aioenv.env_side._segment`), instead of one round trip per step. The request travels
where steps travel, so a segment is to the pool what a step is: its deadline is the pool's
``step_timeout`` once per transition it plays (checked for the segment as a whole), a
failure restarts the worker under the
pool's restart policy, and a reply nobody waits for any more is dropped as stale.
"""

from __future__ import annotations

import dataclasses
import operator
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple

from ..core._errors import StateNotTaken, WorkerError, WorkerPaused
from ..core._messages import ControlRequest
from ..core._rollouts import DTYPES, PolicyPackage, Rollout, Segment, Transitions
from ..core._seeds import checked_count, checked_seed
from ..workers._inbox import Inbox
from ._receiving import EpisodeCounter, EpisodeLedger
from ._remote_control import WorkerResults
from ._roster import Roster
from ._trajectories import COLUMNS, Trajectories, stack

__all__ = ["PoolRollouts"]


class PoolRollouts:
    """The rollouts of a :class:`~aioenv.WorkerPool`, which inherits them, over the workers
    of its roster: requests travel where steps travel and their replies come back through
    the pool's inbox; episodes played are counted in the pool's ``_episodes``; they raise
    once the pool is closed (the inbox knows). :meth:`_start_rollouts` sets up what they
    keep: the policy in force, and a ledger of each env's episodes (a lane per env, counted
    across workers in worker order) that gives the rows their episode ids."""

    _roster: Roster
    _inbox: Inbox
    _episodes: EpisodeCounter
    _ask: Callable[[list[int], list[ControlRequest]], Awaitable[WorkerResults[Any]]]

    def _start_rollouts(self) -> None:
        """No policy yet; the ledger's lanes count their finished episodes in their
        workers' statistics."""
        self._package: PolicyPackage | None = None
        lane_stats = [
            self._episodes.stats[worker_id]
            for worker_id, member in enumerate(self._roster.members)
            for _ in range(member.num_envs)
        ]
        self._rollout_ledger = EpisodeLedger(self._roster.lanes, lane_stats)

    @property
    def policy_version(self) -> int | None:
        """The version of the policy set by :meth:`set_policy` (None before the first)."""
        package = self._package
        return None if package is None else package.version

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
        :raises TypeError: the policy is not callable or cannot be pickled for a process
            worker (the error names the worker).
        :raises EnvError: a worker could not unpickle it, or a Ray worker could not pickle
            it into Ray's object store (either names the worker).
        """
        self._inbox.check_open()
        if not callable(policy):
            raise TypeError(f"set_policy() needs a callable policy, got {type(policy).__name__}")
        version = _next_version(self._package, version)
        package = PolicyPackage(version, uuid.uuid4().hex, policy=policy)
        ids = self._roster.ids(None)
        request = ControlRequest("policy", kwargs={"package": package})
        await self._ask(ids, [request] * len(ids))  # the first error, once all answered
        self._package = package
        return version

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
        for a whole segment; a policy that raises is the caller's error (an EnvError
        saying "the policy raised"), for which no env is rebuilt. A worker that cannot go
        on makes ``rollout()`` raise its error once every other worker has answered; the
        others' segments are on the error's ``trajectories`` attribute. A cancelled
        ``rollout()`` discards its segments, and replies still in flight are dropped when
        they come: the pool can be used at once (a worker's env finishes the forgotten
        segment first).

        :raises RuntimeError: no policy was set.
        :raises ValueError: ``num_steps`` is not an int >= 1 (numpy's too), or ``seed`` is
            not a non-negative int (numpy's too) or None.
        :raises StateNotTaken: a worker has an action in flight or a state not taken.
        :raises WorkerRemoved: ``worker_ids`` names a worker that was given up on, or
            every worker was.
        """
        self._inbox.check_open()
        package = self._package
        if package is None:
            raise RuntimeError("rollout() needs a policy: await pool.set_policy(policy) first")
        num_steps = checked_count(num_steps, "num_steps")
        seed = checked_seed(seed, "rollout()")
        ids = self._rollout_targets(worker_ids)
        members, first_env = self._roster.members, self._roster.first_env
        requests = {  # env i of the pool seeded seed + i
            i: Rollout(package, num_steps, None if seed is None else seed + first_env[i])
            for i in ids
            if members[i].failure is None
        }
        segments = await self._play(requests)
        for i in ids:  # failed for good while idle: its error answers in its place
            if (failure := members[i].failure) is not None:
                segments[i] = failure
        return self._assemble(segments)

    # Internals -------------------------------------------------------------------------
    def _rollout_targets(self, worker_ids: Sequence[int] | None) -> list[int]:
        """The ids of the workers to play (``worker_ids``, default every open, unpaused
        worker not given up on), checked: none paused, none with a state owed."""
        if worker_ids is None:
            self._roster.check_some_left("rollout()")
            ids = [i for i in self._roster.ids(None) if i not in self._inbox.paused]
        else:
            ids = self._roster.ids(worker_ids)
        for i in ids:
            name = self._roster.members[i].name
            if i in self._inbox.paused:
                raise WorkerPaused(f"rollout(): {name} is paused; resume it first")
            if i in self._inbox.owed:
                raise StateNotTaken(
                    f"rollout(): {name} has an action in flight or a state not taken; "
                    "take every pending state first (pool.drain()); nothing was sent"
                )
        return ids

    async def _play(self, requests: dict[int, Rollout]) -> dict[int, list[Segment] | WorkerError]:
        """Send each worker its request and wait for its segments, one per env (or its
        error); a reset state in their place is a restart's, and the worker is asked
        again."""
        results: dict[int, list[Segment] | WorkerError] = {}
        pending: list[int] = []
        first_env = self._roster.first_env  # worker i's lanes: first_env[i] to first_env[i + 1]
        try:
            for worker_id in self._roster.send_order(list(requests)):
                self._inbox.pause(worker_id)  # its answer is this call's: others' calls skip it
                self._roster.members[worker_id].send_action(requests[worker_id])
                pending.append(worker_id)
            while pending:
                for worker_id in list(pending):
                    outcome = self._inbox.pop(worker_id)
                    if outcome is None:
                        continue
                    if outcome.error is not None:
                        results[worker_id] = outcome.error
                    elif type(outcome.state) in (Segment, list):  # a list: several envs'
                        state = outcome.state
                        results[worker_id] = state if type(state) is list else [state]
                    else:  # a restarted env's reset answered: ask it again
                        # The worker's envs were replaced: the episodes they had open (those
                        # with steps) end, truncated, and count as finished in its statistics;
                        # the next start opens another. Their rows in the failed segment are
                        # lost with it.
                        for lane in range(first_env[worker_id], first_env[worker_id + 1]):
                            if self._rollout_ledger.lengths[lane]:
                                self._rollout_ledger.finish(lane)
                        self._roster.members[worker_id].send_action(requests[worker_id])
                        break  # a sync worker answers in line: look again before waiting
                    pending.remove(worker_id)
                else:
                    if pending:
                        await self._inbox.wait(None)  # raises once the pool is closed
        except BaseException:
            for worker_id in pending:
                self._roster.members[worker_id].forget_request()
            for worker_id in (*pending, *results):  # played, dropped: the next rows begin anew
                for lane in range(first_env[worker_id], first_env[worker_id + 1]):
                    self._rollout_ledger.start(lane)
            raise
        finally:
            for worker_id in requests:
                self._inbox.resume(worker_id)
        return results

    def _assemble(self, results: dict[int, list[Segment] | WorkerError]) -> Trajectories:
        parts: list[dict[str, Any]] = []
        error: WorkerError | None = None
        for worker_id in sorted(results):
            result = results[worker_id]
            self._episodes.expect_reset(worker_id)  # its restart's, where it failed
            if isinstance(result, list):  # its envs' segments, env 0's first
                for env, segment in enumerate(result):  # alone: a worker of one env
                    parts.append(self._columns(worker_id, env, segment, len(result) == 1))
            elif error is None:
                error = result
        trajectories = self._trajectories(parts)
        if error is not None:
            error.trajectories = trajectories  # type: ignore[attr-defined]
            self._roster.hand_out(error.worker_id, error)
            raise error
        return trajectories

    def _columns(self, worker_id: int, env: int, segment: Segment, alone: bool) -> dict[str, Any]:
        """The rows of env ``env`` of the worker (``alone``: its only one) with their
        episode ids and open flags, entered in the ledger (which counts their finished
        episodes in the worker's statistics). A row at step 0 starts an episode, and so do
        the lane's first row ever and a first row that goes on from a state answered by
        hand."""
        count = len(segment)
        ledger, lane = self._rollout_ledger, self._roster.first_env[worker_id] + env
        counter = self._episodes  # where the episode of a worker of one env is stepped by hand
        done = segment.terminated | segment.truncated
        starts = segment.step == 0
        if not segment.goes_on and not starts[0]:  # from a state answered by hand
            ledger.start(lane)
            if alone:  # that episode's rewards and steps so far go on in the lane
                ledger.returns[lane] = counter.returns[worker_id]
                ledger.lengths[lane] = counter.lengths[worker_id]
        episode_id: list[int] = []
        latest = ledger.latest(lane)
        rows = zip(segment.rewards.tolist(), starts.tolist(), done.tolist(), strict=True)
        for reward, start, end in rows:
            if start or latest is None:
                latest = ledger.start(lane)
            episode_id.append(latest)
            ledger.add(lane, reward, end)
        if alone:  # stepping it by hand goes on from there: its next state is a step
            counter.returns[worker_id] = ledger.returns[lane]
            counter.lengths[worker_id] = ledger.lengths[lane]
            counter.resetting[worker_id] = False
        last_end = np.flatnonzero(done).max(initial=-1)  # -1: no row ends an episode
        open_rows = np.arange(count) > last_end  # the rows of the episode left open
        # The columns every transition has, as the segment holds them.
        shared = dataclasses.fields(Transitions)
        return {
            **{field.name: getattr(segment, field.name) for field in shared},
            "worker_id": np.full(count, worker_id, np.int64),
            "episode_id": np.array(episode_id, np.int64),
            "step": segment.step,
            "policy_version": np.full(count, segment.version, np.int64),
            "open": open_rows,
        }

    def _trajectories(self, parts: list[dict[str, Any]]) -> Trajectories:
        members = sorted(self._roster.members, key=lambda member: member.num_envs)
        space = next((_one_env(w.observation_space, w.num_envs) for w in members), None)
        columns: dict[str, Any] = {}
        for name in COLUMNS:
            values = [part[name] for part in parts]
            if not values and name in DTYPES:  # no worker answered: no rows, of its dtype
                values = [np.empty(0, DTYPES[name])]
            observed = "observations" in name
            columns[name] = _concatenated(values, space if observed else None, observed)
        trajectories = Trajectories(**columns, observation_space=space)
        order = np.lexsort((trajectories.step, trajectories.episode_id, trajectories.worker_id))
        if np.array_equal(order, np.arange(len(order))):
            return trajectories
        return trajectories.select(order)


def _concatenated(values: list[Any], space: Any, observed: bool) -> Any:
    arrays = values and all(isinstance(value, np.ndarray) for value in values)
    if arrays and len({value.shape[1:] for value in values}) == 1:
        return np.concatenate(values)
    items = [item for value in values for item in value]
    return _by_part(items) if space is None and observed else stack(space, items)


def _one_env(space: Any, num_envs: int) -> Any:
    """The space of one env of a worker of ``num_envs`` whose envs' gymnasium batched as
    ``space`` (batch_space read backwards): a Dict's and a Tuple's by part, a Tuple of one
    item per env (a Text's, a Graph's, ...) its first, a Box's first row, a Discrete's
    from a MultiDiscrete."""
    if num_envs == 1 or space is None:
        return space
    if isinstance(space, Dict):
        return Dict({key: _one_env(sub, num_envs) for key, sub in space.items()})
    if isinstance(space, Tuple) and all(isinstance(sub, BATCHES) for sub in space):
        return Tuple([_one_env(sub, num_envs) for sub in space])
    if isinstance(space, MultiDiscrete):
        return Discrete(int(space.nvec[0]), start=int(space.start[0]))
    if isinstance(space, Box):
        return Box(space.low[0], space.high[0], dtype=space.dtype)
    return space[0] if isinstance(space, Tuple) else None  # None: a batching of its own


#: The spaces gymnasium's batches of envs' spaces are (a Tuple of one space per env aside).
BATCHES = (Box, MultiDiscrete, Dict, Tuple)


def _by_part(items: list[Any]) -> Any:
    """Observations whose space no worker gave, stacked as gymnasium batches a
    Dict or Tuple space: a dict (tuple) of their parts stacked; else one array."""
    first = items[0] if items else None
    if isinstance(first, dict):
        return {key: _by_part([item[key] for item in items]) for key in first}
    if isinstance(first, tuple):
        return tuple(_by_part([item[i] for item in items]) for i in range(len(first)))
    return np.asarray(items)


def _next_version(package: PolicyPackage | None, version: int | None) -> int:
    previous = None if package is None else package.version
    if version is None:
        return 0 if previous is None else previous + 1
    version = operator.index(version)
    if previous is not None and version <= previous:
        raise ValueError(
            f"set_policy(version={version}): versions must increase, and the current policy "
            f"has version {previous}; pass a larger int, or None for {previous + 1}"
        )
    return version

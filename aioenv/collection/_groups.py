"""Groups of rollouts per task (GRPO-style training): every task is played ``group_size``
times, each play an episode started by a reset given the task as its options, and the
group is handed out as soon as its last member ends.

Members are scheduled first-ready: whichever worker is free takes the next member, from
any task, so groups never wait for one another in lockstep; a member to retry goes first,
so its group completes soonest. The policy sees every state waiting for an action as one
:class:`~aioenv.Batch`, as :func:`aioenv.collect` does, and the pool's bound of one action
in flight per worker is the back-pressure.

A member fails when its worker's step or reset failed (restarted or raised) or its worker
was given up on; it is played again, on any worker, at most ``max_retries`` times, then its
group comes out incomplete. An episode that ran out of its budget (the pool option
``episode_timeout``) or its time limit ends truncated like any other: a finished member.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ..core._commands import Reset
from ..core._errors import WorkerError, describe_failure
from ..core._restarts import failure_note, is_restart_reset, restart_note
from ..core._seeds import checked_count
from ..pool._batch import Batch
from ..pool._pool import WorkerPool
from ..pool._trajectories import Trajectories
from ._collect import Policy, PoolDriver
from ._rows import EpisodeRows, Track, trajectories

__all__ = ["Group", "GroupCollector", "collect_groups"]

_RESETTING = "resetting"  # a worker's in-flight marker: its member's reset was sent


@dataclasses.dataclass(frozen=True, eq=False)
class Group:
    """The rollouts of one task.

    ``trajectories`` holds the finished members' episodes, member by member (``members``
    says which member each episode is, in row order); ``failed`` maps each member given up
    on (its retries spent) to the reason of its last failure, and ``retried`` lists every
    failed attempt that was played again, as ``(member, reason)``. Rows of failed attempts
    are dropped.
    """

    #: The task's position in the ``tasks`` given.
    task_id: int
    #: The task: the options every member's reset was given.
    task: Mapping[str, Any]
    trajectories: Trajectories
    members: tuple[int, ...]
    failed: Mapping[int, str]
    retried: tuple[tuple[int, str], ...]

    @property
    def complete(self) -> bool:
        """Every member finished (none was given up on)."""
        return not self.failed

    def returns(self) -> npt.NDArray[np.float64]:
        """Each finished member's return, in the order of ``members``."""
        return self.trajectories.episode_returns()

    def __repr__(self) -> str:
        state = "complete" if self.complete else f"incomplete, members {sorted(self.failed)} failed"
        return f"<Group of task {self.task_id}: {len(self.members)} episodes, {state}>"


@dataclasses.dataclass(eq=False)
class _OpenGroup:
    """A task whose members are still being played."""

    task_id: int
    task: Mapping[str, Any]
    size: int
    finished: dict[int, tuple[int, EpisodeRows]] = dataclasses.field(default_factory=dict)
    failed: dict[int, str] = dataclasses.field(default_factory=dict)
    retried: list[tuple[int, str]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class _Track(Track):
    """One worker: the member it plays, and the state waiting for an action or what is in
    flight (``(observation, action, version)`` or ``_RESETTING``). Idle: no member (and
    nothing waiting). Its ``finished`` stays empty: a member's episode goes to its group."""

    member: tuple[_OpenGroup, int] | None = None
    waiting: Any = None


class GroupCollector(PoolDriver):
    """An async iterator of :class:`Group`: ``group_size`` rollouts of each of ``tasks``
    on ``pool`` with ``policy`` (see :func:`collect_groups`). The collector owns the pool's
    stepping until it is exhausted or closed (:meth:`aclose`)."""

    _caller = "collect_groups()"
    _tracks: list[_Track]

    def __init__(
        self,
        pool: WorkerPool[Any],
        policy: Policy,
        tasks: Iterable[Mapping[str, Any]],
        *,
        group_size: int,
        max_retries: int = 1,
    ) -> None:
        self.group_size = checked_count(group_size, "collect_groups(): group_size")
        self.max_retries = checked_count(max_retries, "collect_groups(): max_retries", 0)
        if not callable(policy):
            raise TypeError(f"collect_groups() needs a callable policy, got {policy!r}")
        if pool.autoreset != "disabled":
            raise ValueError(
                "collect_groups() starts every member with a reset given its task: it needs a "
                f"pool with autoreset='disabled', not {pool.autoreset!r}"
            )
        super().__init__(pool, policy, [_Track() for _ in range(len(pool))])
        self._tasks = _checked_tasks(tasks)
        self._queue: deque[tuple[_OpenGroup, int]] = deque()  # members waiting for a worker
        self._ready: deque[Group] = deque()  # ended, in the order they ended
        self._exhausted = False
        self._closed = False

    def __aiter__(self) -> GroupCollector:
        return self

    async def __anext__(self) -> Group:
        """The next group to end (ended groups in the order they ended)."""
        if self._running:
            raise RuntimeError("this group collector is already collecting (one call at a time)")
        self._running = True
        try:
            while not self._ready:
                if self._closed:
                    raise StopAsyncIteration
                self._start()
                if not self._start_members():
                    # No group is left open (not yet handed out): each open group has a
                    # member waiting for a worker or played by one.
                    playing = any(track.member is not None for track in self._tracks)
                    if self._exhausted and not self._queue and not playing:
                        raise StopAsyncIteration
                    # Members left to play, and no worker to play them.
                    self._none_left(
                        "collect_groups() has no open, unpaused worker to play its members"
                    )
                await self._act()
                if not self.pool.num_pending:  # every send failed: start the members again
                    continue
                try:
                    batch = await self.pool.get_batch()
                except WorkerError as error:
                    self._on_error(error)
                    continue
                self._receive(batch)
            return self._ready.popleft()
        finally:
            self._running = False

    async def aclose(self) -> None:
        """Stop: wait for the actions in flight and drop the members being played and
        the groups not yet taken, so the pool is idle and can be used directly; the
        iterator ends. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._started and any(track.member is not None for track in self._tracks):
            await self.pool.drain()
        self._tracks = [_Track() for _ in self._tracks]
        self._queue.clear()
        self._ready.clear()

    # Scheduling ------------------------------------------------------------------------
    def _start_members(self) -> bool:
        """Every free worker takes the next member (a retry first, else the next task's), in
        the pool's send order (sync workers last: they reset in the send); True if some
        worker plays one."""
        active = self.pool.active_ids
        for worker_id in self.pool.send_order(active):
            track = self._tracks[worker_id]
            if track.member is not None:
                continue
            member = self._next_member()
            if member is None:
                break
            group, _ = member
            try:
                # A copy: an env that edits its options leaves the task as the user gave it.
                self.pool.send_action(Reset(options=dict(group.task)), worker_id)
            except WorkerError:  # it failed for good while idle: now given up, see removed
                self._queue.appendleft(member)  # not played: no retry spent
                continue
            track.member, track.in_flight = member, _RESETTING
        return any(self._tracks[w].member is not None for w in active)

    def _next_member(self) -> tuple[_OpenGroup, int] | None:
        if not self._queue and not self._exhausted:
            task = next(self._tasks, None)  # (task_id, task)
            if task is None:
                self._exhausted = True
            else:
                group = _OpenGroup(*task, self.group_size)
                self._queue.extend((group, index) for index in range(self.group_size))
        return self._queue.popleft() if self._queue else None

    # Stepping --------------------------------------------------------------------------
    async def _act(self) -> None:
        """One policy call for every state waiting for an action; send the actions."""
        rows = [w for w in self.pool.active_ids if self._tracks[w].waiting is not None]
        if not rows:
            return
        for worker_id, (action, sent) in await self._policy_actions(rows):
            track = self._tracks[worker_id]
            try:
                self.pool.send_action(action, worker_id)
            except WorkerError as error:  # it failed for good while idle: now given up
                self._member_failed(track, describe_failure(error))
                continue
            track.waiting, track.in_flight = None, sent

    def _receive(self, batch: Batch[Any]) -> None:
        for state, worker_id in batch:
            track = self._tracks[worker_id]
            sent = self._answered(track, worker_id, state)
            if sent is _RESETTING:  # the member's episode starts (a restarted env's too)
                self._begin(track, worker_id, state)
                continue
            if is_restart_reset(state):  # a new env answered the step: the episode is lost
                self._member_failed(track, restart_note(state) or "the env was restarted")
                continue
            episode = track.episode
            assert episode is not None
            if not episode.append(sent, state, self._own):
                track.waiting = state
            elif (note := failure_note(state)) is not None:
                self._member_failed(track, note)
            else:
                self._member_finished(track, worker_id, episode)

    def _on_error(self, error: WorkerError) -> None:
        """A worker's request failed and was raised (restarts off, or the worker given
        up): its member failed; the worker, if not given up, takes another."""
        if error.worker_id is None:
            raise error
        track = self._tracks[error.worker_id]
        if track.member is None:
            raise error  # no member of ours was in flight: not ours to absorb
        self._member_failed(track, describe_failure(error))

    # Members ending --------------------------------------------------------------------
    def _member_finished(self, track: _Track, worker_id: int, episode: EpisodeRows) -> None:
        group, index = self._release(track)
        group.finished[index] = (worker_id, episode)
        self._maybe_hand_out(group)

    def _member_failed(self, track: _Track, reason: str) -> None:
        group, index = self._release(track)
        # Each earlier failure of the member was played again (else it would not play).
        failures = 1 + sum(member == index for member, _ in group.retried)
        if failures <= self.max_retries:
            group.retried.append((index, reason))
            self._queue.appendleft((group, index))
        else:
            group.failed[index] = reason
            self._maybe_hand_out(group)

    def _release(self, track: _Track) -> tuple[_OpenGroup, int]:
        member = track.member
        assert member is not None
        track.member = track.episode = track.waiting = track.in_flight = None
        return member

    def _maybe_hand_out(self, group: _OpenGroup) -> None:
        if len(group.finished) + len(group.failed) < group.size:  # members still playing
            return
        members = sorted(group.finished)
        parts = [(*group.finished[index], False) for index in members]
        worker = self.pool.workers[0]
        rows = trajectories(parts, worker.observation_space, worker.action_space)
        self._ready.append(
            Group(
                group.task_id,
                group.task,
                rows,
                tuple(members),
                dict(sorted(group.failed.items())),
                tuple(group.retried),
            )
        )


def collect_groups(
    pool: WorkerPool[Any],
    policy: Policy,
    tasks: Iterable[Mapping[str, Any]],
    *,
    group_size: int,
    max_retries: int = 1,
) -> GroupCollector:
    """Play every task of ``tasks`` ``group_size`` times on ``pool`` with ``policy`` and
    hand out each task's :class:`Group` as soon as its last member ends:
    ``async for group in collect_groups(pool, policy, tasks, group_size=8): ...``.

    ``tasks``: an iterable of dicts (taken lazily, so it may be endless), each given to its
    members' resets as ``options``. ``group_size`` (>= 1): rollouts per task. ``policy``:
    a sync or async callable from a :class:`~aioenv.Batch` to one action per row, called
    once for every state waiting for an action. ``max_retries`` (>= 0, default 1): how many
    times a failed member is played again before its group comes out incomplete
    (:attr:`Group.failed`). The pool needs gymnasium envs and ``autoreset="disabled"``;
    per-rollout budgets come from its ``episode_timeout`` option (such an episode ends
    truncated: a finished member).

    Groups come out in the order they end, not in task order; free workers take the next
    member at once, so there is no lockstep. A worker given up on plays nothing more; once
    none is left the iterator raises :class:`~aioenv.WorkerRemoved`. Stopping early leaves
    actions in flight: ``await collector.aclose()`` waits for them, so the pool is idle.

    :raises ValueError: ``group_size`` < 1, ``max_retries`` < 0, no task, or a pool with
        autoreset.
    :raises TypeError: a task that is not a dict (raised when it is reached), or a
        policy that is not callable.
    """
    return GroupCollector(pool, policy, tasks, group_size=group_size, max_retries=max_retries)


def _checked_tasks(tasks: Iterable[Mapping[str, Any]]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """``tasks`` as an iterator of ``(task_id, task)`` (its position), each task checked to
    be a dict as it comes (the first at once); refused at once if empty."""
    if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
        raise TypeError(
            f"collect_groups(): tasks must be an iterable of dicts (reset options), got "
            f"{type(tasks).__name__}"
        )
    checked = itertools.starmap(_check_task, enumerate(tasks))
    first = next(checked, None)
    if first is None:
        raise ValueError("collect_groups(): tasks is empty; give at least one task")
    return itertools.chain([first], checked)


def _check_task(task_id: int, task: Any) -> tuple[int, Mapping[str, Any]]:
    if not isinstance(task, Mapping):
        raise TypeError(
            f"collect_groups(): task {task_id} is a {type(task).__name__}, not a dict of "
            "reset options"
        )
    return task_id, task

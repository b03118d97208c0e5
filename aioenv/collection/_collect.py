"""Driving a pool with a policy until a quota of transitions or episodes is met.

A :class:`Collector` keeps what one call did not return (open episodes, states waiting for
an action, actions in flight) for the next call, so nothing is dropped or returned twice,
also when a call is cancelled. The pool's bound of one action in flight per worker is the
back-pressure: a slow policy leaves every worker idle after one step, never queues more.
Its progress bar (:class:`Progress`) is a tqdm bar that stays quiet off a terminal.
"""

from __future__ import annotations

import copy
import inspect
import math
import operator
from collections.abc import Awaitable, Callable, Sequence
from typing import IO, Any, NoReturn, Union

import numpy as np
from tqdm import tqdm

from ..core._commands import RESET
from ..core._environment import Step
from ..core._errors import StateNotTaken, WorkerError
from ..core._restarts import is_restart_reset
from ..pool._batch import Batch
from ..pool._pool import WorkerPool, in_send_order
from ..pool._receiving import EpisodeLedger
from ..pool._roster import none_left
from ..pool._trajectories import Trajectories
from ._rows import NEEDS_RESET, Boundary, EpisodeRows, Quota, Track, make_quota, trajectories

__all__ = ["Boundary", "Collector", "Policy", "PoolDriver", "Quota", "collect", "make_quota"]

#: A sync or async callable from a :class:`Batch` to one action per row (a sequence or an
#: array whose first axis is the rows).
Policy = Callable[[Batch[Any]], Union[Any, Awaitable[Any]]]  # noqa: UP007 (runtime alias)
#: The kinds of worker whose envs step in this process.
_HERE = ("sync", "thread", "coroutine")


class PoolDriver:
    """What :class:`Collector` and :class:`~aioenv.GroupCollector` share: they own the
    stepping of ``pool``, choose actions with ``policy`` (its version: one rule), keep a
    :class:`Track` per worker and its episodes' ids, and are named in their errors by
    ``_caller``."""

    _caller = "collect()"
    _started = False
    _version: int = 0

    def __init__(self, pool: WorkerPool[Any], policy: Policy, tracks: Sequence[Track]) -> None:
        self.pool = pool
        #: The callable that chooses actions; may be replaced between calls.
        self.policy = policy
        self._tracks = tracks
        # A lane per worker: the drivers step workers of one env (aioenv.Step states).
        self._ledger = EpisodeLedger(len(pool))
        self._running = False
        # Observations the worker's next step may overwrite, kept as copies: views of shared
        # memory (copy=False), or an env's own arrays, which workers whose envs step in
        # this process hand out as they are (an env may write each into one array).
        self._copies = not pool.copy or any(w.kind in _HERE for w in pool.workers)

    @property
    def policy_version(self) -> int:
        """An int you set when the policy changes (default 0; it may not decrease). Each
        transition records the version in force when its action was chosen."""
        return self._version

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        version = operator.index(version)
        if version < self._version:
            raise ValueError(f"policy_version may not decrease: {self._version} -> {version}")
        self._version = version

    def _start(self) -> None:
        """Before the first step: the pool must be idle (the driver owns its stepping)."""
        if self._started:
            return
        for worker_id in range(len(self.pool)):
            if self.pool.has_pending(worker_id):
                raise StateNotTaken(
                    f"{self._caller}: worker {worker_id} has an action in flight or a state "
                    "not taken; await pool.drain() (after resuming paused workers) first"
                )
        self._started = True

    async def _policy_actions(self, rows: list[int]) -> list[tuple[int, tuple[Any, Any]]]:
        """One policy call for the states of workers ``rows`` (each waiting for an action):
        each worker with its action and what is in flight for it once sent (``(observation,
        action, version)``, the version in force when the policy was called), in the
        pool's send order (sync workers last: they step in the send)."""
        version = self._version
        states = [self._tracks[w].waiting for w in rows]
        batch = Batch(rows, states, self.pool.workers[rows[0]].observation_space)
        actions = self.policy(batch)
        if inspect.isawaitable(actions):
            actions = await actions  # cancelled here: the states still wait, nothing lost
        sends = [  # the observation owned now: the worker's step may overwrite a view of it
            (action, (self._own(state.observation), action, version))
            for state, action in zip(states, _action_rows(actions, len(rows)), strict=True)
        ]
        return in_send_order(self.pool, rows, sends)

    def _none_left(self, paused: str) -> NoReturn:
        """No worker to step: raise WorkerRemoved where the pool gave them up (every worker
        left is removed or closed), else ValueError(``paused``): they are paused."""
        removed = self.pool.removed
        if removed and not self.pool.paused:
            raise none_left(self._caller, removed)
        raise ValueError(paused)

    def _begin(self, track: Track, worker_id: int, state: Step[Any]) -> None:
        """Worker ``worker_id``'s episode starts from ``state``, which waits for an action."""
        track.episode = EpisodeRows(self._ledger.start(worker_id))
        track.waiting = state

    def _answered(self, track: Track, worker_id: int, state: Any) -> Any:
        """What was in flight for worker ``worker_id`` that ``state`` answers, taken off its
        ``track``. Raises for a reply this driver cannot take: RuntimeError where it answers
        nothing the driver sent, TypeError where it is not an :class:`~aioenv.Step`."""
        sent, track.in_flight = track.in_flight, None
        if sent is None:
            raise RuntimeError(
                f"{self._caller}: worker {worker_id} answered an action this collector did "
                "not send; do not send actions to a pool a collector is using"
            )
        if not isinstance(state, Step):
            raise TypeError(
                f"{self._caller} needs gymnasium envs (aioenv.Step states); worker {worker_id} "
                f"returned a {type(state).__name__}"
            )
        return sent

    def _own(self, observation: Any) -> Any:
        return copy.deepcopy(observation) if self._copies else observation


class Collector(PoolDriver):
    """Drives ``pool`` with ``policy`` (see :meth:`collect`), keeping what a call does not
    return for the next call. The collector owns the pool's stepping: between calls, do not
    send actions to the pool yourself (``call``, ``get_attr``, ``set_attr`` and ``pause`` are
    fine). To stop and use the pool directly, ``await pool.drain()``; the collector's open
    episodes are then abandoned (start a new collector afterwards).
    """

    def __init__(self, pool: WorkerPool[Any], policy: Policy) -> None:
        super().__init__(pool, policy, [Track() for _ in range(len(pool))])
        self._finish_counter = 0

    async def collect(
        self,
        *,
        num_steps: int | None = None,
        num_episodes: int | None = None,
        per_worker: bool = False,
        fraction: float = 1.0,
        boundary: Boundary = "episode",
        progress: bool = False,
    ) -> Trajectories:
        """Step the pool with the policy until the quota is met and return the transitions.

        Give exactly one of ``num_steps`` (at least that many transitions) or
        ``num_episodes`` (exactly that many finished episodes; extra ones finished meanwhile
        are kept for the next call). ``per_worker=True`` (default False) makes it a quota per
        worker, returned in worker order: a worker that met it gets no more actions this
        call. ``fraction`` (0 < fraction <= 1, default 1.0, needs ``per_worker``): return
        once that fraction of the active workers met its quota; the others return the
        episodes they finished so far and keep their open episodes.

        ``boundary="episode"`` (the default) returns whole episodes only: transitions count
        toward ``num_steps`` once their episode ends, and open episodes wait for a later
        call. ``boundary="step"`` also counts and returns the open episodes' rows so far,
        marked ``Trajectories.open``; later calls return their later rows.

        ``progress=True`` shows a tqdm bar (steps, steps/s, episodes, mean return) when
        stderr is a terminal. Open episodes, states waiting for an action and actions in
        flight carry over to the next call; a cancelled call loses nothing either.

        A worker's error is raised (its open episode is cut, marked truncated). A worker
        the pool gave up on (``pool.removed``) gets no more actions: later calls go on
        with the rest, counting ``per_worker`` quotas over them.
        """
        quota = make_quota(num_steps, num_episodes, per_worker, fraction, boundary)
        self._check_idle()
        return await self._collect(quota, progress)

    async def _collect(self, quota: Quota, progress: bool) -> Trajectories:
        """:meth:`collect` once its ``quota`` is checked and no other call is collecting."""
        self._running = True
        total = quota.amount * (len(self.pool) if quota.per_worker else 1)
        bar = Progress(progress, total=total if quota.unit == "steps" else None)
        try:
            self._start()
            while not quota.met(self._tracks, active := self.pool.active_ids):
                if not active:
                    removed = len(self.pool.removed)
                    note = (
                        f" ({removed} worker(s) were given up on: pool.removed)" if removed else ""
                    )
                    self._none_left(f"collect() has no open, unpaused worker to step{note}")
                await self._act(quota, active)
                try:
                    batch = await self.pool.get_batch()
                except WorkerError as error:
                    self._on_failure(error)
                    raise
                self._receive(batch, bar)
        finally:
            self._running = False
            bar.close()
        return self._take(quota)

    def _check_idle(self) -> None:
        """No other call of this collector is collecting."""
        if self._running:
            raise RuntimeError("this collector is already collecting (one call at a time)")

    # Stepping --------------------------------------------------------------------------
    async def _act(self, quota: Quota, active: list[int]) -> None:
        """Send RESET or a policy action to every active worker that waits and may go on,
        each batch in the pool's send order (sync workers last: they step in the send)."""
        resets: list[int] = []
        rows: list[int] = []
        for worker_id in active:
            track = self._tracks[worker_id]
            if track.waiting is None or not quota.wants_more(track):
                continue
            (resets if track.waiting is NEEDS_RESET else rows).append(worker_id)
        self._send([(worker_id, (RESET, RESET)) for worker_id in self.pool.send_order(resets)])
        if rows:
            self._send(await self._policy_actions(rows))

    def _send(self, sends: list[tuple[int, tuple[Any, Any]]]) -> None:
        """Send each worker of ``sends`` its action, in turn; what is in flight for it is
        then the ``sent`` beside it (``(worker_id, (action, sent))``)."""
        for worker_id, (action, sent) in sends:
            self.pool.send_action(action, worker_id)
            track = self._tracks[worker_id]
            track.waiting, track.in_flight = None, sent

    def _receive(self, batch: Batch[Any], bar: Progress) -> None:
        returns: list[float] = []
        steps = 0
        for state, worker_id in batch:
            track = self._tracks[worker_id]
            sent = self._answered(track, worker_id, state)
            # A failure that cut an episode short answers as a truncated step (recorded
            # below like any other); a restarted env's reset answers a reset, or a step
            # sent when no episode was open.
            if sent is RESET or is_restart_reset(state):
                self._begin(track, worker_id, state)
                continue
            steps += 1
            ended = self._record(track, worker_id, sent, state)
            if ended is not None:
                returns.append(ended)
        bar.update(steps, returns)

    def _record(
        self, track: Track, worker_id: int, sent: tuple[Any, Any, int], state: Step[Any]
    ) -> float | None:
        """Add one transition; returns the episode's return if it ended."""
        episode = track.episode
        assert episode is not None
        done = episode.append(sent, state, self._own)
        episode_return = self._ledger.add(worker_id, float(state.reward), done)
        if not done:
            track.waiting = state
            return None
        self._finish(track)
        if state.final_observation is not None:  # autoreset "same_step": it holds the reset
            self._begin(track, worker_id, Step(state.observation, info=state.info))
        return episode_return

    def _finish(self, track: Track) -> None:
        episode = track.episode
        assert episode is not None
        episode.finish_order = self._finish_counter
        self._finish_counter += 1
        track.finished.append(episode)
        track.episode = None
        track.waiting = NEEDS_RESET

    def _on_failure(self, error: WorkerError) -> None:
        """A worker's action failed (restarts off): that action has no outcome; its episode
        is cut (the rows so far are kept, the last marked truncated: gymnasium's "ended for
        a reason outside the task"), and the worker is reset before its next action."""
        if error.worker_id is None:
            return
        track = self._tracks[error.worker_id]
        episode = track.episode
        if episode is not None and len(episode):
            episode.truncated[-1] = True
            self._finish(track)
        track.episode, track.waiting, track.in_flight = None, NEEDS_RESET, None

    # Returning -------------------------------------------------------------------------
    def _take(self, quota: Quota) -> Trajectories:
        limits = self._finished_limits(quota)
        parts: list[tuple[int, EpisodeRows, bool]] = []  # (worker, rows, open)
        for worker_id, track in enumerate(self._tracks):
            limit = limits[worker_id]
            taken, track.finished = track.finished[:limit], track.finished[limit:]
            parts.extend((worker_id, episode, False) for episode in taken)
            running = track.episode
            if quota.boundary == "step" and running is not None and len(running):
                parts.append((worker_id, running.detach(), True))
        parts.sort(key=lambda part: (part[0], part[1].episode_id))
        worker = self.pool.workers[0]
        return trajectories(parts, worker.observation_space, worker.action_space)

    def _finished_limits(self, quota: Quota) -> list[int]:
        """How many finished episodes to return per worker: all of them for ``num_steps``,
        the first ``num_episodes`` per worker, or the first ``num_episodes`` to finish."""
        tracks = self._tracks
        if quota.unit == "steps":
            return [len(track.finished) for track in tracks]
        if quota.per_worker:
            return [quota.amount] * len(tracks)
        order = sorted(episode.finish_order for track in tracks for episode in track.finished)
        cutoff = order[quota.amount - 1] if len(order) >= quota.amount else math.inf
        return [sum(e.finish_order <= cutoff for e in track.finished) for track in tracks]


class Progress:
    """Steps (tqdm shows their rate), finished episodes and their mean return.

    ``enabled=False`` shows nothing; ``enabled=True`` shows the bar only when ``file``
    (default: stderr) is a terminal, so logs and CI output stay clean.
    """

    def __init__(
        self,
        enabled: bool,
        *,
        total: int | None,
        file: IO[str] | None = None,
        mininterval: float = 0.1,
    ) -> None:
        self._bar = tqdm(  # disabled (enabled=False): a tqdm bar that shows nothing
            total=total,
            unit="step",
            dynamic_ncols=True,
            disable=None if enabled else True,  # None: tqdm's "only on a terminal"
            file=file,
            leave=False,  # collect() runs in a loop: one line, not one per call
            mininterval=mininterval,
        )
        self.episodes = 0
        self._return_sum = 0.0

    def update(self, steps: int, returns: list[float]) -> None:
        """``steps`` more transitions, and the returns of the episodes that just ended."""
        self.episodes += len(returns)
        self._return_sum += sum(returns)
        if returns:  # so at least one episode counted
            mean_return = self._return_sum / self.episodes
            self._bar.set_postfix(
                episodes=self.episodes, mean_return=f"{mean_return:.1f}", refresh=False
            )
        self._bar.update(steps)

    def close(self) -> None:
        self._bar.close()


def _action_rows(actions: Any, count: int) -> list[Any]:
    """The policy's actions for a batch of ``count`` rows, one per row."""
    if isinstance(actions, np.ndarray) and actions.ndim == 1:
        actions = actions.tolist()  # plain Python scalars travel fastest
    try:
        rows = list(actions)
    except TypeError:  # one action (or None), not one per row
        got = f"{actions!r} ({type(actions).__name__})"
        raise TypeError(f"the policy returned {got}, not {count} actions (one per row)") from None
    if len(rows) != count:
        raise ValueError(f"the policy returned {len(rows)} actions for a batch of {count}")
    return rows


async def collect(
    pool: WorkerPool[Any],
    policy: Policy,
    *,
    num_steps: int | None = None,
    num_episodes: int | None = None,
    per_worker: bool = False,
    fraction: float = 1.0,
    boundary: Boundary = "episode",
    progress: bool = False,
    policy_version: int | None = None,
) -> Trajectories:
    """:meth:`Collector.collect` with the pool's own collector (made on first use and kept
    while the pool lives, so open episodes carry over between calls). ``policy`` replaces
    the collector's policy; ``policy_version`` (None: unchanged) sets its version. A call
    refused (its arguments, or another call collecting) changes neither."""
    if not callable(policy):
        raise TypeError(f"collect() needs a callable policy, got {policy!r}")  # as collect_groups
    collector: Collector | None = pool._collector
    if collector is None:
        collector = pool._collector = Collector(pool, policy)
    # The quota's errors first, then a call collecting, before anything changes.
    quota = make_quota(num_steps, num_episodes, per_worker, fraction, boundary)
    collector._check_idle()
    if policy_version is not None:
        collector.policy_version = policy_version  # raises where it would decrease
    collector.policy = policy
    return await collector._collect(quota, progress)

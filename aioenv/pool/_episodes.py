"""Episodes counted in the parent: one ledger per counting (episode ids, the open
episode's return and length, each finished episode added to its worker's statistics), and
the pool's running statistics per worker, counted from the states it hands out (rewards
and step counts). Nothing is added to the env's info."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from ..core._environment import Step
from ..core._messages import resets_next
from ..core._restarts import is_restart_reset

__all__ = ["EpisodeCounter", "EpisodeLedger", "EpisodeStats"]


@dataclasses.dataclass
class EpisodeStats:
    """Finished episodes of one worker: how many, their total return and length (in
    steps), and the return and length of the last one (NaN and 0 before the first)."""

    episodes: int = 0
    total_return: float = 0.0
    total_length: int = 0
    last_return: float = math.nan
    last_length: int = 0

    def _add(self, episode_return: float, length: int) -> None:
        """Count an episode that ended with this return and length."""
        self.episodes += 1
        self.total_return += episode_return
        self.total_length += length
        self.last_return, self.last_length = episode_return, length

    @property
    def mean_return(self) -> float:
        return self.total_return / self.episodes if self.episodes else math.nan

    @property
    def mean_length(self) -> float:
        return self.total_length / self.episodes if self.episodes else math.nan


class EpisodeLedger:
    """The episodes of ``lanes`` envs (a lane is one env, counted across the workers in
    worker order; one per worker where each steps one env): per lane, the episodes started
    and the open episode's return and length so far. ``stats`` (one per lane, the lanes of
    a worker sharing their worker's) receive each finished episode; without them the
    ledger only counts."""

    def __init__(self, lanes: int, stats: Sequence[EpisodeStats] | None = None) -> None:
        self.lanes = lanes
        self._stats = stats
        self._started = [0] * lanes
        #: Per lane, the open episode's return and length so far.
        self.returns = [0.0] * lanes
        self.lengths = [0] * lanes

    def start(self, lane: int) -> int:
        """Open the lane's next episode and return its id: the ``k``-th episode (from 0)
        of lane ``l`` has id ``k * lanes + l``, unique in this ledger whatever order the
        lanes play in (and ``id % lanes`` is its lane)."""
        ordinal = self._started[lane]
        self._started[lane] = ordinal + 1
        self.returns[lane], self.lengths[lane] = 0.0, 0
        return ordinal * self.lanes + lane

    def latest(self, lane: int) -> int | None:
        """The id of the lane's latest episode, open or not (None before its first)."""
        started = self._started[lane]
        return (started - 1) * self.lanes + lane if started else None

    def add(self, lane: int, reward: float, done: bool = False) -> float | None:
        """Add one step's reward to the lane's open episode; where the step ends it
        (``done``), :meth:`finish` it and return its return."""
        self.returns[lane] += reward  # the reward's own arithmetic: no float() rounding
        self.lengths[lane] += 1
        return self.finish(lane) if done else None

    def cut(self, lane: int) -> None:
        """The lane's env was replaced after a failure: its open episode (if it has steps)
        ends, truncated, and counts as finished; the next :meth:`start` opens another."""
        if self.lengths[lane]:
            self.finish(lane)

    def finish(self, lane: int) -> float:
        """Close the lane's open episode, count it in the lane's worker's statistics, and
        return its return. Steps added after it without a :meth:`start` go to the lane's
        next episode (under ``"same_step"`` autoreset no reset state starts it)."""
        episode_return, length = self.returns[lane], self.lengths[lane]
        if self._stats is not None:
            self._stats[lane]._add(episode_return, length)
        self.returns[lane], self.lengths[lane] = 0.0, 0
        return episode_return


class EpisodeCounter:
    """Adds up each worker's rewards and steps from the states it hands out, and closes an
    episode at the state that ends it. A state that answers a reset (a ``RESET`` sent, the
    state after a finished episode under ``"next_step"``, a restart) starts a new one.
    Workers that step several envs together hand out states that are not a
    :class:`~aioenv.Step`, so a worker is one lane of its ledger."""

    def __init__(self, num_workers: int, autoreset: str) -> None:
        self.stats = [EpisodeStats() for _ in range(num_workers)]
        self._ledger = EpisodeLedger(num_workers, self.stats)
        self._resetting = [True] * num_workers  # the next state answers a reset
        self._next_step = resets_next(autoreset, True)  # after each episode's end
        #: A state that is not an aioenv.Step was handed out: episode ends are invisible.
        self.saw_custom_state = False

    def expect_reset(self, worker_id: int) -> None:
        """A reset was sent to ``worker_id``: its next state starts an episode."""
        self._resetting[worker_id] = True

    def record(self, worker_id: int, state: Any) -> None:
        if type(state) is not Step:
            self.saw_custom_state = True
            return
        # A reset, or a restarted env's reset handed out in place of a step (its marker
        # is in the info: most steps have none). An episode a failure cut short ends as
        # a truncated step, counted below like any other.
        if self._resetting[worker_id] or (state.info and is_restart_reset(state)):
            self._resetting[worker_id] = False
            self._ledger.start(worker_id)
            return
        # The ledger's add(), inlined: this is every state's path.
        ledger = self._ledger
        ledger.returns[worker_id] += state.reward
        ledger.lengths[worker_id] += 1
        if state.terminated or state.truncated:
            ledger.finish(worker_id)
            self._resetting[worker_id] = self._next_step

"""Running episode statistics per worker, counted in the parent from the states the pool
hands out (rewards and step counts). Nothing is added to the env's info."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core._environment import Step
from ..core._restarts import restart_note

__all__ = ["EpisodeCounter", "EpisodeStats"]


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


class EpisodeCounter:
    """Adds up each worker's rewards and steps from the states it hands out, and closes an
    episode at the state that ends it. A state that answers a reset (a ``RESET`` sent, the
    state after a finished episode under ``"next_step"``, a restart) starts a new one."""

    def __init__(self, num_workers: int, autoreset: str) -> None:
        self.stats = [EpisodeStats() for _ in range(num_workers)]
        self._returns = [0.0] * num_workers
        self._lengths = [0] * num_workers
        self._resetting = [True] * num_workers  # the next state answers a reset
        self._next_step = autoreset == "next_step"
        #: A state that is not an aioenv.Step was handed out: episode ends are invisible.
        self.saw_custom_state = False

    def expect_reset(self, worker_id: int) -> None:
        """A reset was sent to ``worker_id``: its next state starts an episode."""
        self._resetting[worker_id] = True

    def record(self, worker_id: int, state: Any) -> None:
        if type(state) is not Step:
            self.saw_custom_state = True
            return
        if self._resetting[worker_id] or restart_note(state) is not None:  # a reset, a restart
            self._resetting[worker_id] = False
            self._returns[worker_id], self._lengths[worker_id] = 0.0, 0
            return
        episode_return = self._returns[worker_id] + state.reward
        length = self._lengths[worker_id] + 1
        if state.terminated or state.truncated:
            self.stats[worker_id]._add(episode_return, length)
            episode_return, length = 0.0, 0
            self._resetting[worker_id] = self._next_step
        self._returns[worker_id], self._lengths[worker_id] = episode_return, length

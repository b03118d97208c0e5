"""Running episode statistics per worker, fed by the states the pool hands out."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ._environment import Step

__all__ = ["EpisodeStats", "record_episode"]


@dataclasses.dataclass
class EpisodeStats:
    """Finished episodes of one worker: how many, their total return and length."""

    episodes: int = 0
    total_return: float = 0.0
    total_length: int = 0
    last_return: float = math.nan

    @property
    def mean_return(self) -> float:
        return self.total_return / self.episodes if self.episodes else math.nan

    @property
    def mean_length(self) -> float:
        return self.total_length / self.episodes if self.episodes else math.nan


def record_episode(stats: EpisodeStats, state: Any) -> None:
    """Count the episode that ``state`` ends, if it ends one."""
    if not isinstance(state, Step) or not state.done:
        return
    info = state.final_info if state.final_info is not None else state.info
    episode = info.get("episode")
    if not isinstance(episode, dict):
        return
    stats.episodes += 1
    stats.total_return += float(episode["r"])
    stats.total_length += int(episode["l"])
    stats.last_return = float(episode["r"])

"""How much a collect() call gathers: the quota options, checked, and how they count."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Literal

from ._rows import Track

__all__ = ["Boundary", "Quota", "make_quota"]

Boundary = Literal["episode", "step"]


@dataclasses.dataclass(frozen=True)
class Quota:
    """What one collect() call must gather, and how to count it per worker."""

    amount: int
    unit: Literal["steps", "episodes"]
    per_worker: bool
    fraction: float
    boundary: Boundary

    def count(self, track: Track) -> int:
        if self.unit == "episodes":
            return len(track.finished)
        rows = sum(len(episode) for episode in track.finished)
        if self.boundary == "step" and track.episode is not None:
            rows += len(track.episode)
        return rows

    def met(self, tracks: Sequence[Track], active: list[int]) -> bool:
        if not self.per_worker:
            return sum(self.count(track) for track in tracks) >= self.amount
        needed = max(1, math.ceil(self.fraction * len(active) - 1e-9))
        return sum(self.count(tracks[w]) >= self.amount for w in active) >= needed

    def wants_more(self, track: Track) -> bool:
        return not self.per_worker or self.count(track) < self.amount


def make_quota(
    num_steps: int | None,
    num_episodes: int | None,
    per_worker: bool,
    fraction: float,
    boundary: Boundary,
) -> Quota:
    if (num_steps is None) == (num_episodes is None):
        raise ValueError("collect() needs exactly one of num_steps= or num_episodes=")
    amount = num_steps if num_steps is not None else num_episodes
    if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
        raise ValueError(f"num_steps/num_episodes must be an int >= 1, got {amount!r}")
    if not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
        raise ValueError(f"fraction must be a number in (0, 1], got {fraction!r}")
    if fraction != 1 and not per_worker:
        raise ValueError("fraction < 1 needs per_worker=True (it counts workers that met theirs)")
    if boundary not in ("episode", "step"):
        raise ValueError(f"boundary must be 'episode' or 'step', got {boundary!r}")
    if boundary == "step" and num_steps is None:
        raise ValueError("boundary='step' applies to num_steps (num_episodes counts whole ones)")
    unit: Literal["steps", "episodes"] = "steps" if num_steps is not None else "episodes"
    return Quota(amount, unit, bool(per_worker), float(fraction), boundary)

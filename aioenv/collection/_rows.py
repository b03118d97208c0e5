"""The rows a :class:`~aioenv.Collector` keeps per episode until a call returns them (and
per worker, its :class:`Track`), how the returned ones become
:class:`~aioenv.Trajectories`, and how much one call gathers (:class:`Quota`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from ..core._environment import Step
from ..core._seeds import checked_count
from ..pool._trajectories import Trajectories, stack

__all__ = ["NEEDS_RESET", "Boundary", "EpisodeRows", "Quota", "Track", "make_quota", "trajectories"]

#: Where a collect() call may cut an episode: whole episodes only, or at any step.
Boundary = Literal["episode", "step"]


@dataclasses.dataclass(eq=False)
class EpisodeRows:
    """The rows of one episode not yet returned, a list per column (``first_step``: the step
    of row 0)."""

    episode_id: int
    first_step: int = 0
    observations: list[Any] = dataclasses.field(default_factory=list)
    actions: list[Any] = dataclasses.field(default_factory=list)
    rewards: list[float] = dataclasses.field(default_factory=list)
    terminated: list[bool] = dataclasses.field(default_factory=list)
    truncated: list[bool] = dataclasses.field(default_factory=list)
    next_observations: list[Any] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)
    finish_order: int = -1  # set when the episode ends

    def __len__(self) -> int:
        return len(self.rewards)

    def append(
        self, sent: tuple[Any, Any, int], state: Step[Any], own: Callable[[Any], Any]
    ) -> bool:
        """Add the transition ``sent`` (what was in flight: ``(observation, action,
        version)``, the action chosen by policy ``version``) led to ``state``; True if it
        ends the episode. The last transition's next observation is the episode's final
        one, whatever the autoreset mode. ``own`` makes the next observation kept the row's
        own (a copy of a view of shared memory, say), as ``sent``'s observation already is."""
        observation, action, version = sent
        done = state.terminated or state.truncated
        final = state.final_observation if done else None
        self.observations.append(observation)
        self.actions.append(action)
        self.rewards.append(float(state.reward))
        self.terminated.append(bool(state.terminated))
        self.truncated.append(bool(state.truncated))
        self.next_observations.append(own(state.observation if final is None else final))
        self.versions.append(version)
        return done

    def detach(self) -> EpisodeRows:
        """Move an open episode's rows out (to be returned now); it goes on from the next
        step."""
        rows = dataclasses.replace(self)  # shares the row lists, which the episode gives up
        for field in dataclasses.fields(self):
            if field.default_factory is list:  # a list of rows
                setattr(self, field.name, [])
        self.first_step += len(rows)
        return rows


#: A worker's marker in its :class:`Track`: its episode ended, send RESET next.
NEEDS_RESET = "needs reset"


@dataclasses.dataclass(eq=False)
class Track:
    """One worker as a :class:`~aioenv.Collector` sees it (and its quota counts). Exactly
    one of ``waiting`` (a state, or ``NEEDS_RESET``) and ``in_flight`` (``(observation,
    action, version)``, or ``RESET``) is set, except before the first call."""

    episode: EpisodeRows | None = None
    waiting: Any = NEEDS_RESET
    in_flight: Any = None
    finished: list[EpisodeRows] = dataclasses.field(default_factory=list)


def trajectories(
    parts: Sequence[tuple[int, EpisodeRows, bool]], observation_space: Any, action_space: Any
) -> Trajectories:
    """The rows of ``parts`` (``(worker_id, rows, open)``, in the order to return them),
    their observations and actions stacked as their spaces batch them."""
    episodes = [episode for _, episode, _ in parts]
    lengths = [len(episode) for episode in episodes]

    def column(name: str) -> list[Any]:
        return [item for episode in episodes for item in getattr(episode, name)]

    def repeat(values: Sequence[Any], dtype: Any) -> Any:
        return np.repeat(np.asarray(values, dtype=dtype), lengths)

    return Trajectories(
        observations=stack(observation_space, column("observations")),
        actions=stack(action_space, column("actions")),
        rewards=np.asarray(column("rewards"), dtype=np.float64),
        terminated=np.asarray(column("terminated"), dtype=np.bool_),
        truncated=np.asarray(column("truncated"), dtype=np.bool_),
        next_observations=stack(observation_space, column("next_observations")),
        worker_id=repeat([worker for worker, _, _ in parts], np.int64),
        episode_id=repeat([episode.episode_id for episode in episodes], np.int64),
        step=np.concatenate(
            [np.arange(e.first_step, e.first_step + len(e)) for e in episodes]
            or [np.empty(0, np.int64)]
        ).astype(np.int64),
        policy_version=np.asarray(column("versions"), dtype=np.int64),
        open=repeat([is_open for _, _, is_open in parts], np.bool_),
        observation_space=observation_space,
        action_space=action_space,
    )


# How much a collect() call gathers: the quota options, checked, and how they count ------
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
    unit: Literal["steps", "episodes"] = "steps" if num_steps is not None else "episodes"
    amount = checked_count(num_steps if unit == "steps" else num_episodes, "num_steps/num_episodes")
    if not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
        raise ValueError(f"fraction must be a number in (0, 1], got {fraction!r}")
    if fraction != 1 and not per_worker:
        raise ValueError("fraction < 1 needs per_worker=True (it counts workers that met theirs)")
    if boundary not in ("episode", "step"):
        raise ValueError(f"boundary must be 'episode' or 'step', got {boundary!r}")
    if boundary == "step" and num_steps is None:
        raise ValueError("boundary='step' applies to num_steps (num_episodes counts whole ones)")
    return Quota(amount, unit, bool(per_worker), float(fraction), boundary)

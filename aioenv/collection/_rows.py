"""The rows a :class:`~aioenv.Collector` keeps per episode until a call returns them (and
per worker, its :class:`Track`), and how the returned ones become
:class:`~aioenv.Trajectories`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core._environment import Step
from ..pool._trajectories import Trajectories, stack

__all__ = ["NEEDS_RESET", "EpisodeRows", "Track", "detach_rows", "trajectories"]


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


def detach_rows(episode: EpisodeRows) -> EpisodeRows:
    """Move an open episode's rows out (to be returned now); it goes on from the next step."""
    rows = dataclasses.replace(episode)  # shares the row lists, which the episode gives up
    for field in dataclasses.fields(episode):
        if field.default_factory is list:  # a list of rows
            setattr(episode, field.name, [])
    episode.first_step += len(rows)
    return rows


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

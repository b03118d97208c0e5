"""What :func:`aioenv.collect` and ``pool.rollout`` return: transitions as numpy arrays,
grouped by episode."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium.spaces import Box, Dict, Space, Tuple
from gymnasium.vector.utils import concatenate, create_empty_array

from ..core._environment import take_rows
from ..core._rollouts import Transitions

__all__ = ["COLUMNS", "Trajectories", "stack"]


@dataclasses.dataclass(frozen=True, eq=False)
class Trajectories(Transitions):
    """Transitions, one per row, with the rows of one episode contiguous and in step order;
    episodes are ordered by worker id, then by episode id (so per worker, in the order they
    were played).

    Row ``i`` is one transition: the policy saw ``observations[i]`` and chose
    ``actions[i]``; the env answered ``rewards[i]``, ``terminated[i]``, ``truncated[i]`` and
    ``next_observations[i]``. The last row of a finished episode has ``terminated`` or
    ``truncated`` set and its ``next_observations`` row is the episode's final observation
    (whatever the pool's autoreset mode). A reset is not a transition: its observation is the
    ``observations`` row of its episode's first transition (``step == 0``).

    Observations are stacked as gymnasium batches them (an array for a Box, a dict of arrays
    for a Dict space, ...); everything else is a 1-D array with one entry per row.
    """

    #: The worker that played the row's episode.
    worker_id: npt.NDArray[np.int64]
    #: Unique per collector (or per pool's rollouts): the ``k``-th episode (from 0) of lane
    #: ``l`` of ``n`` has id ``k * n + l``, whatever order the lanes finish in. A lane is a
    #: worker, or in ``pool.rollout`` one env of a worker of several.
    episode_id: npt.NDArray[np.int64]
    #: The transition's index in its episode (0 for the first action after a reset).
    step: npt.NDArray[np.int64]
    #: ``Collector.policy_version`` when the policy chose the row's action (for
    #: ``pool.rollout``: the version given to ``pool.set_policy``).
    policy_version: npt.NDArray[np.int64]
    #: True for rows of an episode still running: ``collect(boundary="step")`` returns them
    #: and the next call returns the episode's later rows (``step`` goes on from here).
    open: npt.NDArray[np.bool_]
    #: The spaces ``observations`` (and ``next_observations``) and ``actions`` are batches
    #: of, where they were stacked as gymnasium batches them (None: not known): how
    #: :meth:`select` takes their rows.
    observation_space: Space[Any] | None = None
    action_space: Space[Any] | None = None

    def __repr__(self) -> str:
        return (
            f"<Trajectories of {len(self)} transitions, {self.num_episodes} finished episodes, "
            f"{len(self.episode_slices()) - self.num_episodes} open>"
        )

    @property
    def num_episodes(self) -> int:
        """Episodes that end in these rows (with ``terminated`` or ``truncated``)."""
        return int(np.count_nonzero((self.terminated | self.truncated) & ~self.open))

    def episode_slices(self) -> list[slice]:
        """One slice of rows per episode (or part of an episode), in row order."""
        if not len(self):
            return []
        key = self.episode_id
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        stops = [*starts[1:].tolist(), len(self)]
        return [slice(start, stop) for start, stop in zip(starts.tolist(), stops, strict=True)]

    def episode_returns(self) -> npt.NDArray[np.float64]:
        """The sum of rewards of each finished episode here, in row order. An episode whose
        first rows came in an earlier call (``boundary="step"``) sums only the rows here."""
        ends = self.episode_slices()
        return np.array(
            [self.rewards[part].sum() for part in ends if not self.open[part.stop - 1]],
            dtype=np.float64,
        )

    def finished(self) -> Trajectories:
        """The rows of episodes that end here."""
        return self.select(~self.open)

    def unfinished(self) -> Trajectories:
        """The rows of episodes still running (only ``boundary="step"`` returns any)."""
        return self.select(self.open)

    def select(self, rows: Any) -> Trajectories:
        """These rows (a boolean mask, a slice or indices) as new Trajectories."""
        spaces = {"observations": self.observation_space, "actions": self.action_space}
        return dataclasses.replace(
            self,
            **{
                name: _taken(spaces.get(name.removeprefix("next_")), getattr(self, name), rows)
                for name in COLUMNS
            },
        )


#: The columns of :class:`Trajectories`: every field but its spaces.
COLUMNS = tuple(field.name for field in dataclasses.fields(Trajectories))[:-2]


def _taken(space: Space[Any] | None, stacked: Any, rows: Any) -> Any:
    """``rows`` of a batch of ``space`` in gymnasium's form of it: a Dict's and a Tuple's
    by part, the spaces gymnasium batches as a tuple with one item per row (Text, Graph,
    Sequence, OneOf, custom spaces) item by item, arrays by row."""
    if isinstance(space, Dict):
        return {key: _taken(space[key], stacked[key], rows) for key in stacked}
    if isinstance(space, Tuple):
        return tuple(_taken(sub, part, rows) for sub, part in zip(space, stacked, strict=True))
    if space is None or not isinstance(stacked, tuple):
        return take_rows(stacked, rows)
    return tuple(stacked[row] for row in np.arange(len(stacked))[rows].tolist())


def stack(space: Space[Any] | None, items: Sequence[Any], out: Any = None) -> Any:
    """``items`` (observations or actions) stacked as gymnasium batches ``space``, into
    ``out`` where given (a batch's rows for them, such as a pool's reused array); with no
    space known, ``numpy.asarray``, or where numpy cannot stack them (a hybrid action's
    tuples) a 1-D object array of them. :class:`~aioenv.Batch` stacks its observations
    here too."""
    if space is None:
        try:
            return np.asarray(items)
        except ValueError:  # an inhomogeneous shape
            return np.fromiter(items, object, len(items))
    if isinstance(space, Box):  # what gymnasium's concatenate does for a Box, minus dispatch
        if out is None:
            out = np.empty((len(items), *space.shape), space.dtype)
        return np.stack(items, axis=0, out=out) if items else out
    if out is None:
        out = create_empty_array(space, n=len(items))
    return concatenate(space, items, out) if items else out

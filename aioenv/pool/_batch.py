"""A batch of states from several workers, with gymnasium-style stacked fields."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt
from gymnasium.spaces import Box
from gymnasium.vector.utils import create_empty_array

from ..core._environment import Step
from ..workers._inbox import Outcome
from ._trajectories import stack

__all__ = ["Batch"]

S = TypeVar("S")


class Batch(Generic[S]):
    """States taken together: row ``i`` is ``states[i]`` from worker ``worker_ids[i]``.

    For gymnasium envs (states are :class:`~aioenv.Step`), ``observations`` is stacked with
    gymnasium's own batching utilities (any space: Box, Discrete, Dict, Tuple, ...), and
    ``rewards``, ``terminated``, ``truncated`` are arrays, ``infos`` a list of dicts.
    """

    def __init__(
        self,
        worker_ids: Sequence[int],
        states: list[S],
        observation_space: Any = None,
        out: Any = None,
    ) -> None:
        #: Which worker each row came from.
        self.worker_ids: npt.NDArray[np.int64] = np.asarray(worker_ids, dtype=np.int64)
        #: The states themselves, row by row (any state type).
        self.states = states
        self._observation_space = observation_space
        self._out = out  # where to stack the observations (a pool's reused array), if given
        self._all_steps = False  # checked once that every state is a Step

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Any:
        return iter(zip(self.states, self.worker_ids.tolist(), strict=True))

    def __repr__(self) -> str:
        return f"<Batch of {len(self)} from workers {self.worker_ids.tolist()}>"

    def _steps(self, field: str) -> list[Step[Any]]:
        if not self._all_steps:
            for state in self.states:
                if not isinstance(state, Step):
                    raise TypeError(
                        f"Batch.{field} needs gymnasium states (aioenv.Step); these states "
                        f"are {type(state).__name__}: use Batch.states"
                    )
            self._all_steps = True
        return self.states  # type: ignore[return-value]

    @functools.cached_property
    def observations(self) -> Any:
        """The rows' observations stacked along a new first axis (a dict or tuple of
        stacked arrays for Dict/Tuple spaces), computed once."""
        steps = self._steps("observations")
        items = [step.observation for step in steps]
        space = self._observation_space
        if space is None:
            return np.stack(items) if items else np.empty((0,))
        return stack(space, items, self._out)

    @functools.cached_property
    def rewards(self) -> npt.NDArray[np.float64]:
        """The rows' rewards, float64 (0.0 for reset states)."""
        return np.fromiter((s.reward for s in self._steps("rewards")), np.float64, len(self))

    @functools.cached_property
    def terminated(self) -> npt.NDArray[np.bool_]:
        """Per row: the episode ended in a terminal state."""
        return np.fromiter((s.terminated for s in self._steps("terminated")), np.bool_, len(self))

    @functools.cached_property
    def truncated(self) -> npt.NDArray[np.bool_]:
        """Per row: the episode was cut short (a time limit)."""
        return np.fromiter((s.truncated for s in self._steps("truncated")), np.bool_, len(self))

    @property
    def dones(self) -> npt.NDArray[np.bool_]:
        """Per row: ``terminated or truncated``."""
        return np.fromiter((s.done for s in self._steps("dones")), np.bool_, len(self))

    @property
    def infos(self) -> list[dict[str, Any]]:
        """The rows' info dicts, as the envs returned them."""
        return [s.info for s in self._steps("infos")]

    @property
    def final_observations(self) -> list[Any]:
        """Per row, the finished episode's last observation under ``autoreset="same_step"``
        (None for rows that did not end an episode)."""
        return [s.final_observation for s in self._steps("final_observations")]

    @property
    def final_infos(self) -> list[dict[str, Any] | None]:
        """Per row, the finished episode's last info under ``autoreset="same_step"``
        (None for rows that did not end an episode)."""
        return [s.final_info for s in self._steps("final_infos")]

    @classmethod
    def of_outcomes(
        cls, outcomes: Sequence[Outcome], space: Any, reused: ReusedRows | None = None
    ) -> Batch[Any]:
        """The batch of a pool's ``outcomes`` (states, not errors). Observations that view
        shared memory are stacked at once, before a next action overwrites them; with
        ``reused`` (a pool made with ``copy=False``) a Box batch is stacked into its array
        and the states keep their views, else each state's observation becomes its row of
        the stacked copy. A batch of BatchSteps (workers stepping several envs) is not
        stacked: each state owns its rows (with ``copy=True``)."""
        ids: list[int] = [outcome.worker_id for outcome in outcomes]  # type: ignore[misc]
        states = [outcome.state for outcome in outcomes]
        out = None if reused is None else reused.rows(space, len(ids))
        batch = cls(ids, states, space, out)
        if not any(outcome.borrowed for outcome in outcomes):
            return batch
        steps = all(type(state) is Step for state in states)  # else BatchSteps: not stacked
        observations: Any = batch.observations if steps else None  # stacked now, from the views
        if reused is not None:  # the states keep their views
            return batch
        # A Box observation becomes its row of the freshly stacked batch (the batch's copy is
        # the state's copy; `[row, ...]`, an array even of shape ()); any other is copied.
        box = steps and isinstance(space, Box)
        for row, outcome in enumerate(outcomes):
            if outcome.borrowed:
                state = outcome.state
                states[row] = (
                    state.with_observation(observations[row, ...]) if box else state.owned()
                )
        return batch

    def sorted(self) -> Batch[S]:
        """The same rows in worker-id order."""
        order = np.argsort(self.worker_ids, kind="stable")
        return Batch(
            self.worker_ids[order].tolist(),
            [self.states[i] for i in order],
            self._observation_space,
        )


class ReusedRows:
    """One array that every batch of a ``copy=False`` pool stacks its Box observations
    into (rows ``[:n]`` for a batch of ``n``): no allocation per batch."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._buffer: Any = None

    def rows(self, space: Any, count: int) -> Any:
        """``count`` rows for ``space``'s observations; None unless it is a Box."""
        if not isinstance(space, Box):
            return None
        buffer = self._buffer
        if buffer is None or buffer.shape[1:] != space.shape or buffer.dtype != space.dtype:
            buffer = self._buffer = create_empty_array(space, self._capacity)
        return buffer[:count]

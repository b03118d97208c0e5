"""A vector env of PettingZoo parallel envs, seen as agent lanes.

Behind the vector env, each parallel env is one env whose observation and action are a
batch of one lane per agent (:class:`~aioenv.core._agents.AgentLanesEnv`), so seeds,
masks, autoreset, grouping and pipelining are those of any env. :class:`LaneView` turns
that face into the lanes' at the vector env's boundary: lane ``i * A + j`` is agent ``j``
of env ``i``; a batch of lane actions becomes a batch of env actions, and an env's result
(its :class:`~aioenv.core._agents.LaneStep`) spreads over its lanes, with per-agent infos
merged by lane as gymnasium merges per-env infos.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple
from gymnasium.vector.utils import batch_space, iterate

from ..core._agents import LANES_KEY, LaneStep
from ..env_side._infos import add_info_of
from ._batches import Result

__all__ = ["LaneView"]

#: The spaces gymnasium batches as arrays (their lanes regroup by reshaping).
_ARRAY_SPACES = (Box, Discrete, MultiBinary, MultiDiscrete)
#: The vector infos of the envs that are not spread over lanes as they are.
_ENV_KEYS = frozenset({LANES_KEY, "final_obs", "final_info", "env_id"})


class LaneView:
    """The lanes of envs of ``agents`` agents each, whose single agent spaces are
    ``observation_space`` and ``action_space``."""

    def __init__(self, agents: tuple[Any, ...], observation_space: Any, action_space: Any):
        self.width = len(agents)
        self.observation_space = observation_space
        self.action_space = action_space
        #: One env's observation space: a batch of one agent's per lane.
        self.env_observation_space = batch_space(observation_space, self.width)

    def env_actions(self, actions: Any) -> Any:
        """A batch of lane actions as the batch of env actions (a row per env)."""
        return _regrouped(self.action_space, actions, self.width)

    def env_ids(self, lane_ids: Sequence[int] | Any) -> list[int]:
        """The envs of the lanes ``lane_ids``, which must be whole envs, each env's
        lanes in order: a ValueError otherwise (nothing is sent)."""
        lanes = [int(lane) for lane in lane_ids]
        width = self.width
        envs = [lane // width for lane in lanes[::width]]
        expected = [env * width + j for env in envs for j in range(width)]
        if lanes != expected:
            raise ValueError(
                f"the lanes of an env step together: send() needs each env's {width} lanes "
                f"in order (env i's are i*{width} to i*{width}+{width - 1}), got "
                f"env_id={lanes}; nothing was sent"
            )
        return envs

    def result(self, result: Result) -> Result:
        """An env-level result (a row per env) as its lanes' result."""
        observations, rewards, terminated, truncated, infos = result
        envs = len(rewards)
        lanes = envs * self.width
        out_rewards = np.zeros(lanes, np.float64)
        out_terminated = np.zeros(lanes, np.bool_)
        out_truncated = np.zeros(lanes, np.bool_)
        active = np.zeros(lanes, np.bool_)
        reported = np.zeros(lanes, np.bool_)
        out: dict[str, Any] = {}
        add = add_info_of(lanes)
        steps = _column(infos, LANES_KEY, envs)
        finals = infos.get("final_info")
        final_steps = _column(finals, LANES_KEY, envs) if isinstance(finals, dict) else steps
        ended = infos.get("_final_obs", np.zeros(envs, np.bool_))
        for row in range(envs):
            lo, hi = row * self.width, (row + 1) * self.width
            step = steps[row]
            # The transition the lanes report: under same-step autoreset, the final one.
            moved = final_steps[row] if ended[row] else step
            if moved is not None:
                out_rewards[lo:hi] = moved.rewards
                out_terminated[lo:hi] = moved.terminated
                out_truncated[lo:hi] = moved.truncated
                active[lo:hi] = moved.active
            if truncated[row]:
                # The env was cut short (its time limit, a failure): so was every lane
                # still going.
                going = ~out_terminated[lo:hi] & (active[lo:hi] if moved is not None else True)
                out_truncated[lo:hi] |= going
            if moved is None and step is None and not (terminated[row] or truncated[row]):
                continue  # not in this result (a masked reset)
            reported[lo:hi] = True
            out = self._lane_infos(out, add, infos, row, lo, step, moved if ended[row] else None)
        out["active"], out["_active"] = active, reported
        if "env_id" in infos:
            env_ids = np.asarray(infos["env_id"], np.int64)
            out["env_id"] = (env_ids[:, None] * self.width + np.arange(self.width)).reshape(-1)
        return (
            _lanes_of(self.observation_space, observations, self.width),
            out_rewards,
            out_terminated,
            out_truncated,
            out,
        )

    def _lane_infos(
        self,
        out: dict[str, Any],
        add: Any,
        infos: dict[str, Any],
        row: int,
        lo: int,
        step: LaneStep | None,
        final: LaneStep | None,
    ) -> dict[str, Any]:
        """Add env ``row``'s infos to its lanes': the agents' own, the env's (each lane
        gets them) and, where the env ended under same-step autoreset, each lane's final
        observation and info."""
        shared = _row(infos, row, _ENV_KEYS)
        final_shared = None
        final_obs = None
        if bool(infos.get("_final_obs", np.zeros(row + 1, np.bool_))[row]):
            final_shared = _row(infos.get("final_info", {}), row, _ENV_KEYS)
            final_obs = list(iterate(self.env_observation_space, infos["final_obs"][row]))
        for lane in range(self.width):
            if final_obs is not None:
                agent_final = final.infos[lane] if final is not None else None
                final_entry = {
                    "final_obs": final_obs[lane],
                    "final_info": {**(final_shared or {}), **(agent_final or {})},
                }
                out = add(out, final_entry, lo + lane)
            agent = step.infos[lane] if step is not None else None
            info = {**shared, **agent} if agent else shared
            if info:
                out = add(out, info, lo + lane)
        return out


def _column(infos: dict[str, Any], key: str, envs: int) -> list[Any]:
    """Each of ``envs`` envs' entry of the vector info ``key`` (None where it has none)."""
    values, mask = infos.get(key), infos.get(f"_{key}")
    if values is None or mask is None:
        return [None] * envs
    return [values[row] if mask[row] else None for row in range(envs)]


def _row(infos: dict[str, Any], row: int, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Env ``row``'s own info dict, rebuilt from gymnasium's vector form."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key in skip or (key.startswith("_") and key[1:] in infos):
            continue
        mask = infos.get(f"_{key}")
        if mask is None or not mask[row]:
            continue
        out[key] = _row(value, row) if isinstance(value, dict) else value[row]
    return out


def _lanes_of(space: Any, batch: Any, width: int) -> Any:
    """A batch of envs' lane batches (of one agent's ``space``) as one batch of lanes."""
    if isinstance(space, Dict):
        return {key: _lanes_of(sub, batch[key], width) for key, sub in space.spaces.items()}
    if isinstance(space, Tuple):
        return tuple(
            _lanes_of(sub, part, width) for sub, part in zip(space.spaces, batch, strict=True)
        )
    if isinstance(batch, np.ndarray):
        return batch.reshape(-1, *batch.shape[2:])
    return tuple(item for env in batch for item in env)


def _regrouped(space: Any, batch: Any, width: int) -> Any:
    """A batch of lanes (of one agent's ``space``) as a batch of envs' lane batches."""
    if isinstance(space, Dict):
        return {key: _regrouped(sub, batch[key], width) for key, sub in space.spaces.items()}
    if isinstance(space, Tuple):
        return tuple(
            _regrouped(sub, part, width) for sub, part in zip(space.spaces, batch, strict=True)
        )
    if isinstance(batch, tuple) and not isinstance(space, _ARRAY_SPACES):
        return tuple(batch[lo : lo + width] for lo in range(0, len(batch), width))
    array = np.asarray(batch)
    if array.ndim == 0 or len(array) % width:
        raise ValueError(
            f"a batch of {len(array) if array.ndim else 'no'} lane actions does not split "
            f"into envs of {width} lanes"
        )
    return array.reshape(-1, width, *array.shape[1:])

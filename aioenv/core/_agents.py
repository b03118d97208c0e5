"""PettingZoo's parallel envs on the env's side: in pools, and as a vector env's lanes.

In a pool, a parallel env is a :class:`ParallelEnvironment`: its state is an
:class:`AgentsStep` of the env's own per-agent dicts, and an action is a dict by agent.

For a vector env: a ``pettingzoo.ParallelEnv`` steps a varying set of agents with dicts
keyed by agent, and :class:`AgentLanesEnv` gives it a fixed shape: a gymnasium env whose
observation and action are batches of one lane per agent of ``possible_agents`` (in that
order), an absent agent's lane holding a zero observation. What a lane did this step (its
reward, flags, whether its agent was there, the agent's info) travels in the info as one
:class:`LaneStep`, which :class:`~aioenv.AioVectorEnv` spreads over its lanes. So workers,
grouping, autoreset, seeds and time limits treat a parallel env as any gymnasium env,
with one implementation of each rule; the env is done when its ``agents`` list is empty.

PettingZoo is never imported here: a parallel env is recognised by its shape.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium
import numpy as np
import numpy.typing as npt
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from ._environment import EnvAdapter, EnvSource, describe_source

__all__ = [
    "LANES_KEY",
    "AgentLanesEnv",
    "AgentSpaces",
    "AgentsStep",
    "LaneSource",
    "LaneStep",
    "ParallelEnvironment",
    "AEC_PROBLEM",
    "is_aec_env",
    "is_parallel_env",
]

#: The info key an :class:`AgentLanesEnv` reports its :class:`LaneStep` under.
LANES_KEY = "aioenv.lanes"


def is_parallel_env(obj: object) -> bool:
    """``obj`` is a PettingZoo parallel env (or shaped like one): ``possible_agents``,
    per-agent space methods, ``reset`` and ``step``, and neither a gymnasium env nor an
    AEC env (whose agents take turns: see :func:`is_aec_env`)."""
    if isinstance(obj, (type, gymnasium.Env)) or is_aec_env(obj):
        return False
    if not hasattr(obj, "possible_agents"):
        return False
    methods = ("observation_space", "action_space", "step", "reset")
    return all(callable(getattr(obj, name, None)) for name in methods)


def is_aec_env(obj: object) -> bool:
    """``obj`` is a PettingZoo AEC env: its agents act in turn (``agent_iter``, ``last``)."""
    return callable(getattr(obj, "agent_iter", None)) and callable(getattr(obj, "last", None))


#: What to do with an AEC env, for the errors that refuse one.
AEC_PROBLEM = (
    "a PettingZoo AEC env, whose agents act in turn; aioenv steps parallel envs: convert it "
    "with pettingzoo.utils.conversions.aec_to_parallel (or build the env's parallel_env())"
)


@dataclasses.dataclass(frozen=True)
class LaneStep:
    """One env's lanes after a reset or a step: a row per agent of ``possible_agents``."""

    rewards: npt.NDArray[np.float64]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    #: The lane's agent is in this result (its observation is real, not the zero one).
    active: npt.NDArray[np.bool_]
    #: Each present agent's info (None for an absent one).
    infos: tuple[dict[str, Any] | None, ...]


class AgentLanesEnv(gymnasium.Env[Any, Any]):
    """A parallel env as a gymnasium env of ``len(possible_agents)`` lanes.

    ``step`` takes a batch of one action per lane and hands each present agent its own;
    the observation is the batch of the agents' observations (zeros for an absent one),
    the reward their sum, and the env terminates (or, when an agent's episode was cut
    short at the end, truncates) once ``agents`` is empty. Attributes the adapter lacks
    are the parallel env's (``get_attr``/``call`` reach it)."""

    def __init__(self, env: Any) -> None:
        self.parallel_env = env
        self.lane_agents: tuple[Any, ...] = tuple(env.possible_agents)
        if not self.lane_agents:
            raise ValueError(f"{type(env).__name__} has no possible_agents: it has no lanes")
        self.single_observation_space = _one_space(env, "observation_space", self.lane_agents)
        self.single_action_space = _one_space(env, "action_space", self.lane_agents)
        lanes = len(self.lane_agents)
        self.observation_space = batch_space(self.single_observation_space, lanes)
        self.action_space = batch_space(self.single_action_space, lanes)
        zeros = create_empty_array(self.single_observation_space, 1, fn=np.zeros)
        self._zero = next(iter(iterate(batch_space(self.single_observation_space, 1), zeros)))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)  # np_random_seed: the seed the env was given
        observations, infos = self.parallel_env.reset(seed=seed, options=options)
        return self._lanes((observations, {}, {}, {}, infos))

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        env = self.parallel_env
        present = set(env.agents)
        lanes = zip(self.lane_agents, iterate(self.action_space, action), strict=True)
        actions = {agent: lane_action for agent, lane_action in lanes if agent in present}
        observation, info = self._lanes(env.step(actions))
        step = info[LANES_KEY]
        done = not env.agents
        truncated = done and bool(step.truncated.any())
        terminated = done and not truncated
        return observation, float(step.rewards.sum()), terminated, truncated, info

    # The parallel env's own, which set_attr sets (not copies that would stay behind).
    @property
    def metadata(self) -> dict[str, Any]:  # type: ignore[override]
        return getattr(self.parallel_env, "metadata", None) or {}

    @property
    def render_mode(self) -> Any:  # type: ignore[override]
        return getattr(self.parallel_env, "render_mode", None)

    #: The seed of the env's last seeded reset, as gymnasium envs report it (the vector
    #: env's ``np_random_seed`` reads it), rather than the parallel env's own attribute.
    np_random_seed = gymnasium.Env.np_random_seed

    def render(self) -> Any:
        return self.parallel_env.render()

    def close(self) -> None:
        self.parallel_env.close()

    def get_wrapper_attr(self, name: str) -> Any:
        if name in self.__dict__ or name in type(self).__dict__:
            return getattr(self, name)
        return getattr(self.parallel_env, name)

    def set_wrapper_attr(self, name: str, value: Any, *, force: bool = True) -> bool:
        target = self if name in self.__dict__ else self.parallel_env
        setattr(target, name, value)
        return True

    def _lanes(self, result: tuple[Any, ...]) -> tuple[Any, dict[str, Any]]:
        """The batch of the lanes' observations and the info that carries their
        :class:`LaneStep`, from the parallel env's ``step`` result, its five dicts by agent
        (a reset's with its rewards and flags empty: 0.0 and False for every lane, as for
        an absent agent)."""
        observations, rewards, terminations, truncations, infos = result
        agents = self.lane_agents
        step = LaneStep(
            np.array([float(rewards.get(agent, 0.0)) for agent in agents]),
            np.array([bool(terminations.get(agent, False)) for agent in agents]),
            np.array([bool(truncations.get(agent, False)) for agent in agents]),
            np.array([agent in observations for agent in agents]),
            tuple(infos.get(agent) for agent in agents),
        )
        space = self.single_observation_space
        rows = [observations.get(agent, self._zero) for agent in agents]
        batch = concatenate(space, rows, create_empty_array(space, len(rows)))  # type: ignore[arg-type]
        return batch, {LANES_KEY: step}


def _one_space(env: Any, kind: str, agents: tuple[Any, ...]) -> Any:
    """The ``kind`` every agent shares, or a ValueError naming the agents that differ."""
    spaces = [getattr(env, kind)(agent) for agent in agents]
    first = spaces[0]
    differing = [agent for agent, space in zip(agents, spaces, strict=True) if space != first]
    if differing:
        raise ValueError(
            f"{type(env).__name__}'s agents must share one {kind.replace('_', ' ')} to be "
            f"lanes of a vector env: {', '.join(map(str, differing))} differ from "
            f"{agents[0]}'s {first}"
        )
    return first


@dataclasses.dataclass(frozen=True)
class LaneSource:
    """An env source that builds a parallel env and hands it out as an
    :class:`AgentLanesEnv` (picklable where ``source`` is)."""

    source: EnvSource

    def __call__(self) -> AgentLanesEnv:
        source = self.source
        if callable(source) and not is_parallel_env(source):
            return AgentLanesEnv(source())
        return AgentLanesEnv(source)

    @property
    def description(self) -> str:
        return describe_source(self.source)


@dataclasses.dataclass(frozen=True)
class AgentsStep:
    """A parallel env's state in a pool: what its ``reset`` or ``step`` returned, dicts
    keyed by agent (a reset's rewards and flags are empty), and ``agents``, the agents
    still there (to act next); ``done`` when none is."""

    observations: dict[Any, Any]
    rewards: dict[Any, float]
    terminations: dict[Any, bool]
    truncations: dict[Any, bool]
    infos: dict[Any, dict[str, Any]]
    agents: tuple[Any, ...]

    @property
    def done(self) -> bool:
        return not self.agents


class AgentSpaces(gymnasium.spaces.Dict):
    """The agents' spaces by agent, whose members are dicts of the agents present: a
    parallel env's actions and observations name only the agents still there."""

    def contains(self, x: Any) -> bool:
        spaces = self.spaces
        return isinstance(x, dict) and all(k in spaces and v in spaces[k] for k, v in x.items())


class ParallelEnvironment(EnvAdapter):
    """A PettingZoo parallel env as an :class:`~aioenv.Environment` with
    :class:`AgentsStep` states; an action is a dict of actions by agent, as the env takes
    it. Its spaces are dicts by agent of the agents' own."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        agents = list(env.possible_agents)
        self.observation_space = AgentSpaces({a: env.observation_space(a) for a in agents})
        self.action_space = AgentSpaces({agent: env.action_space(agent) for agent in agents})

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> AgentsStep:
        observations, infos = self.env.reset(seed=seed, options=options)
        return AgentsStep(observations, {}, {}, {}, infos, tuple(self.env.agents))

    def step(self, action: dict[Any, Any]) -> AgentsStep:
        observations, rewards, terminations, truncations, infos = self.env.step(action)
        return AgentsStep(
            observations, rewards, terminations, truncations, infos, tuple(self.env.agents)
        )

    def close(self) -> None:
        self.env.close()

"""Envs over every kind of gymnasium space, for comparing vector envs step by step.

:class:`Echo` observes the action it was given (its observation space is its action
space), so an action that reaches the env in another form shows in the observations. Its
reward, flags and infos follow from the actions and its seed alone, so two vector envs
fed the same actions must answer the same, whichever worker kind steps the env.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces


class Parity(gymnasium.Space[int]):
    """A custom space (no batching of its own in gymnasium): ints, with their parity."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(None, None, seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> int:
        return int(self.np_random.integers(0, 1000))

    def contains(self, x: Any) -> bool:
        return isinstance(x, (int, np.integer))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Parity)

    def __hash__(self) -> int:
        return hash(Parity)


#: Text spaces' charset, as a string: before gymnasium 1.4 a set charset (Text's default)
#: is sampled in the order of the process's string hashes, so the same seed draws other
#: strings in another process (gymnasium's own AsyncVectorEnv differs from SyncVectorEnv
#: there too); a string keeps its order in every process.
CHARSET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def make_space(name: str) -> gymnasium.Space[Any]:
    """The space called ``name``: one of :data:`SPACES`."""
    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    return {
        "Box": lambda: box,
        "Discrete": lambda: spaces.Discrete(5, start=-2),
        "MultiDiscrete": lambda: spaces.MultiDiscrete([3, 4]),
        "MultiBinary": lambda: spaces.MultiBinary(3),
        "Dict": lambda: spaces.Dict({"pos": box, "gear": spaces.Discrete(3)}),
        "Tuple": lambda: spaces.Tuple((spaces.Discrete(4), box, spaces.Text(4, charset=CHARSET))),
        "Text": lambda: spaces.Text(6, charset=CHARSET),
        "Sequence": lambda: spaces.Sequence(spaces.Discrete(4)),
        "Graph": lambda: spaces.Graph(box, spaces.Discrete(3)),
        "OneOf": lambda: spaces.OneOf((spaces.Discrete(3), box)),
        "custom": lambda: Parity(),
        # not in SPACES: a Dict nesting spaces gymnasium batches as a tuple of rows
        "DictOfRows": lambda: spaces.Dict(
            {"pos": box, "seq": spaces.Sequence(spaces.Discrete(4)), "text": make_space("Text")}
        ),
    }[name]()


SPACES = [
    "Box",
    "Discrete",
    "MultiDiscrete",
    "MultiBinary",
    "Dict",
    "Tuple",
    "Text",
    "Sequence",
    "Graph",
    "OneOf",
    "custom",
]


def digest(value: Any) -> int:
    """A stable number from any space's sample (arrays, dicts, tuples, strings, graphs)."""
    return int(hashlib.sha256(_canonical(value).encode()).hexdigest()[:8], 16)


def _canonical(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_canonical(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_canonical(item) for item in value) + ")"
    if isinstance(value, spaces.GraphInstance):
        return _canonical((value.nodes, value.edges, value.edge_links))
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{value.shape}{value.tolist()}"
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return repr(value.item())
    return repr(value)


class Echo(gymnasium.Env[Any, Any]):
    """Observes its last action. Its episodes end on their own (terminated) after
    ``3 + index % 3`` steps, or when the action's digest is 0 mod 7; info holds the
    step count and the action's digest, and a reset's info the seed's draw."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's attribute)

    def __init__(self, space: str, index: int = 0) -> None:
        self.action_space = make_space(space)
        self.observation_space = make_space(space)
        self.index = index
        self.t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        draw = int(self.np_random.integers(0, 2**31))
        self.observation_space.seed(draw)
        self.t = 0
        return self.observation_space.sample(), {"draw": draw}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"{action!r} is not in {self.action_space}")
        self.t += 1
        mark = digest(action)
        ended = self.t >= 3 + self.index % 3 or mark % 7 == 0
        return action, float(mark % 13), ended, False, {"t": self.t, "mark": mark}


def echo(space: str, index: int = 0, max_episode_steps: int | None = 4) -> gymnasium.Env[Any, Any]:
    """:class:`Echo` behind gymnasium's ``TimeLimit`` (episodes also truncated)."""
    env: gymnasium.Env[Any, Any] = Echo(space, index)
    if max_episode_steps is not None:
        env = gymnasium.wrappers.TimeLimit(env, max_episode_steps)
    return env


class AsyncEcho:
    """:func:`echo` as a coroutine env: ``reset``/``step`` are ``async def`` returning
    gymnasium's tuples, yielding to the event loop on each call."""

    def __init__(self, space: str, index: int = 0, max_episode_steps: int | None = 4) -> None:
        self.env = echo(space, index, max_episode_steps)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.metadata = self.env.metadata
        self.render_mode = None

    async def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        await asyncio.sleep(0)
        return self.env.reset(seed=seed, options=options)

    async def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        await asyncio.sleep(0)
        return self.env.step(action)  # type: ignore[return-value]

    def close(self) -> None:
        self.env.close()

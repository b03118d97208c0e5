"""A space whose author registered its own batching with gymnasium, and an env that
uses it. Imported by reference in process workers (not pickled by value, as ``envs``
is), so a child has the registrations as a user's installed package would."""

from __future__ import annotations

import os
from typing import Any

import gymnasium
import numpy as np


class Knob(gymnasium.Space[int]):
    """A custom action space, an int in [0, 10), whose author registered its own
    batching with gymnasium (below): a batch of knobs is a :class:`KnobBatch`, not an
    array or a tuple, so only gymnasium's ``iterate`` and ``concatenate`` split and
    join it."""

    def __init__(self) -> None:
        super().__init__((), np.int64)

    def sample(self, mask: Any = None, probability: Any = None) -> int:
        return int(self.np_random.integers(10))

    def contains(self, x: Any) -> bool:
        return isinstance(x, int | np.integer) and 0 <= int(x) < 10

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Knob)

    def __hash__(self) -> int:
        return hash("Knob")


class KnobBatch:
    """A batch of :class:`Knob` actions in the space author's own form."""

    def __init__(self, values: list[int]) -> None:
        self.values = list(values)


class Knobs(gymnasium.Space[KnobBatch]):
    """``Knob`` batched: what ``batch_space(Knob(), n)`` is."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def contains(self, x: Any) -> bool:
        return isinstance(x, KnobBatch) and len(x.values) == self.n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Knobs) and other.n == self.n

    def __hash__(self) -> int:
        return hash(("Knobs", self.n))


@gymnasium.vector.utils.batch_space.register(Knob)
def _batch_knobs(space: Knob, n: int = 1) -> Knobs:
    return Knobs(n)


@gymnasium.vector.utils.iterate.register(Knobs)
def _iterate_knobs(space: Knobs, items: KnobBatch) -> Any:
    return iter(items.values)


@gymnasium.vector.utils.concatenate.register(Knob)
def _concatenate_knobs(space: Knob, items: Any, out: KnobBatch) -> KnobBatch:
    items = list(items)
    if len(out.values) != len(items):  # as np.stack(..., out=out) refuses a wrong size
        raise ValueError(f"{len(items)} knobs do not fit a batch of {len(out.values)}")
    out.values[:] = [int(item) for item in items]
    return out


@gymnasium.vector.utils.create_empty_array.register(Knob)
def _empty_knobs(space: Knob, n: int = 1, fn: Any = np.zeros) -> KnobBatch:
    return KnobBatch([0] * n)


class KnobEnv(gymnasium.Env[np.ndarray, int]):
    """Observes the last action it was given (a :class:`Knob`) and the pid stepping it;
    its reward is that action; episodes never end."""

    observation_space = gymnasium.spaces.Box(0, np.inf, (2,), np.float64)
    action_space = Knob()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.array([0.0, os.getpid()]), {}

    def step(self, action: int) -> Any:
        if not self.action_space.contains(action):
            raise ValueError(f"KnobEnv: {action!r} is not a knob")
        return np.array([float(action), os.getpid()]), float(action), False, False, {}

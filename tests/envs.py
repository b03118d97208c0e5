"""Small environments for the tests. They are pickled by value (see conftest), so process
workers can build them however the forkserver was started."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import gymnasium
import numpy as np


class Counter:
    """The minimal ``Environment`` protocol. The state records the seed the reset got and a
    draw from the env's own RNG, so tests can see how seeding behaved."""

    def __init__(self, limit: int = 5) -> None:
        self.limit = limit
        self.rng = np.random.default_rng()
        self.resets = 0

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.resets += 1
        self.t = 0
        self.total = 0
        return {
            "t": 0,
            "total": 0,
            "seed": seed,
            "draw": float(self.rng.random()),
            "pid": os.getpid(),
        }

    def step(self, action: Any) -> dict[str, Any]:
        self.t += 1
        self.total += int(np.sum(action))
        return {
            "t": self.t,
            "total": self.total,
            "draw": float(self.rng.random()),
            "pid": os.getpid(),
        }

    def terminated(self, state: dict[str, Any]) -> bool:
        return bool(state["t"] >= self.limit)


class Failing(Counter):
    """Raises ``ValueError(message)`` in ``__init__``, ``reset`` or ``step``."""

    def __init__(self, where: str, message: str = "env exploded on purpose") -> None:
        if where == "init":
            raise ValueError(message)
        super().__init__()
        self.where = where
        self.message = message

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        if self.where == "reset":
            raise ValueError(self.message)
        return super().reset(seed)

    def step(self, action: Any) -> dict[str, Any]:
        if self.where == "step" and action == 13:
            raise ValueError(self.message)
        return super().step(action)


class Gated(Counter):
    """``step`` blocks until the file ``gate`` exists (or 30 s pass): a slow env that the
    test releases when it chooses, with no timing assumptions."""

    def __init__(self, gate: str) -> None:
        super().__init__(limit=10**9)
        self.gate = gate

    def step(self, action: Any) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.002)
        return super().step(action)


class GatedClose(Counter):
    """``close`` blocks until the file ``gate`` exists (or 30 s pass): an env whose close
    the test releases when it chooses."""

    def __init__(self, gate: str) -> None:
        super().__init__()
        self.gate = gate

    def close(self) -> None:
        deadline = time.monotonic() + 30
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.002)


class SlowSteps(Counter):
    """A Counter whose every step takes ``pause`` seconds (slow enough for an actor to step
    it beside others), and whose step ``wait_at`` waits for the file ``gate``."""

    def __init__(self, pause: float, gate: str, wait_at: int | None) -> None:
        super().__init__(limit=10**9)
        self.pause, self.gate, self.wait_at = pause, gate, wait_at

    def step(self, action: Any) -> dict[str, Any]:
        time.sleep(self.pause)
        if self.t + 1 == self.wait_at:
            deadline = time.monotonic() + 30
            while not os.path.exists(self.gate) and time.monotonic() < deadline:
                time.sleep(0.002)
        return super().step(action)


def open_gate(gate: str) -> None:
    Path(gate).touch()


class Rendezvous(gymnasium.Env[np.ndarray, int]):
    """Two envs that meet at every reset and step. The ``"first"`` marks that it has begun
    the call (a file in ``folder``, named after the call's number); the other waits for
    that mark, 10 s at most, and says in ``info["met"]`` and its reward (1.0 or 0.0)
    whether it came. Whatever starts the first env's call before the other's lets them
    meet, with no timing assumptions. ``pause``: seconds each call sleeps first (a slow
    env); ``patience``: how long the other waits; ``thread_safe``: the env's
    ``metadata["thread_safe"]`` (None: not declared)."""

    observation_space = gymnasium.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(
        self,
        folder: str,
        role: str,
        pause: float = 0.0,
        patience: float = 10.0,
        thread_safe: bool | None = None,
    ) -> None:
        self.folder = folder
        self.role = role
        self.calls = 0
        self.pause, self.patience = pause, patience
        if thread_safe is not None:
            self.metadata = {**self.metadata, "thread_safe": thread_safe}

    def _meet(self) -> dict[str, Any]:
        self.calls += 1
        time.sleep(self.pause)
        mark = Path(self.folder, f"call-{self.calls}")
        if self.role == "first":
            mark.touch()
            return {"met": True}
        deadline = time.monotonic() + self.patience
        while not mark.exists():
            if time.monotonic() > deadline:
                return {"met": False}
            time.sleep(0.002)
        return {"met": True}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), self._meet()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        info = self._meet()
        return np.zeros(1, np.float32), float(info["met"]), False, False, info


class Dying(Counter):
    """``step`` with action ``"exit"`` calls ``os._exit(3)``; ``"kill"`` SIGKILLs itself."""

    def step(self, action: Any) -> dict[str, Any]:
        if isinstance(action, str) and action == "exit":
            os._exit(3)
        if isinstance(action, str) and action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(0)


class SlowClose(Counter):
    """``close`` hangs; with ``ignore_sigterm`` the process also ignores SIGTERM."""

    def __init__(self, ignore_sigterm: bool = False) -> None:
        super().__init__()
        if ignore_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def close(self) -> None:
        time.sleep(60)


class MarksClose(Counter):
    """``close`` creates the file ``mark``: a test in another process sees the env closed."""

    def __init__(self, mark: str) -> None:
        super().__init__()
        self.mark = mark

    def close(self) -> None:
        open(self.mark, "w").close()


class BigObservation(gymnasium.Env[np.ndarray, int]):
    """A gymnasium env with a large image observation whose content encodes the step."""

    def __init__(self, shape: tuple[int, ...] = (210, 160, 3, 4)) -> None:
        self.observation_space = gymnasium.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gymnasium.spaces.Discrete(4)
        self.t = 0

    def _obs(self) -> np.ndarray:
        base = np.arange(int(np.prod(self.observation_space.shape)), dtype=np.int64)
        return ((base + self.t) % 251).astype(np.uint8).reshape(self.observation_space.shape)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> Any:
        self.t += 1
        return self._obs(), float(action), self.t >= 3, False, {"t": self.t}


class EndlessBig(BigObservation):
    """:class:`BigObservation` whose episodes never end."""

    def step(self, action: int) -> Any:
        self.t += 1
        return self._obs(), float(action), False, False, {"t": self.t}


def expected_big_observation(t: int, shape: tuple[int, ...] = (210, 160, 3, 4)) -> np.ndarray:
    base = np.arange(int(np.prod(shape)), dtype=np.int64)
    return ((base + t) % 251).astype(np.uint8).reshape(shape)


class DictObservation(gymnasium.Env[dict[str, Any], int]):
    """A gymnasium env with a Dict observation space, for batching."""

    def __init__(self) -> None:
        self.observation_space = gymnasium.spaces.Dict(
            {
                "position": gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32),
                "mode": gymnasium.spaces.Discrete(3),
            }
        )
        self.action_space = gymnasium.spaces.Discrete(3)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return {"position": np.zeros(2, np.float32), "mode": 0}, {}

    def step(self, action: int) -> Any:
        self.t += 1
        obs = {"position": np.full(2, self.t / 10, np.float32), "mode": int(action)}
        return obs, 1.0, self.t >= 4, False, {}


class FourTupleEnv(gymnasium.Env[np.ndarray, int]):
    """Returns the old gym 4-tuple from ``step``: a clear error, not a crash."""

    observation_space = gymnasium.spaces.Box(0, 1, (1,))
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> Any:
        return np.zeros(1, np.float32), 0.0, False, {}


class ObservationOnlyReset(gymnasium.Env[np.ndarray, int]):
    """Returns the old gym API's observation alone from ``reset`` (two values, which
    unpack as a pair): a clear error, not an observation of ``0.0``."""

    observation_space = gymnasium.spaces.Box(0, 1, (2,))
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return np.zeros(2, np.float32)

    def step(self, action: int) -> Any:
        return np.zeros(2, np.float32), 0.0, False, False, {}


class Painted(gymnasium.Env[np.ndarray, int]):
    """Renders a solid ``rgb_array`` frame whose colour is ``shade`` (no pygame needed)."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}  # noqa: RUF012

    def __init__(self, shade: int = 0, render_mode: str | None = "rgb_array") -> None:
        self.observation_space = gymnasium.spaces.Box(0, 1, (1,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.render_mode = render_mode
        self.shade = shade

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> Any:
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.full((20, 30, 3), self.shade, dtype=np.uint8)


class Structured(gymnasium.Env[Any, int]):
    """Seeded random observations in a nested space (Dict of Box, Discrete, MultiBinary,
    MultiDiscrete and a Tuple), a new one every step. ``wrong`` makes the step's image
    disagree with the space ("dtype": float64 for uint8, "shape": one row short,
    "numpy_int": a numpy scalar for the Discrete), to check nothing is converted."""

    def __init__(self, wrong: str | None = None, size: int = 48) -> None:
        spaces = gymnasium.spaces
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (size, size, 3), np.uint8),
                "mode": spaces.Discrete(5),
                "pair": spaces.Tuple((spaces.MultiBinary(3), spaces.MultiDiscrete([2, 3, 4]))),
                "vector": spaces.Box(-1.0, 1.0, (7,), np.float32),
            }
        )
        self.action_space = spaces.Discrete(2)
        self.wrong = wrong

    def _obs(self) -> dict[str, Any]:
        rng = self.np_random
        size = self.observation_space["image"].shape[0]
        image: np.ndarray = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        mode: Any = int(rng.integers(5))
        if self.wrong == "dtype" and self.t:
            image = image.astype(np.float64)
        elif self.wrong == "shape" and self.t:
            image = image[1:]
        elif self.wrong == "numpy_int" and self.t:
            mode = np.int64(mode)
        return {
            "image": image,
            "mode": mode,
            "pair": (
                rng.integers(0, 2, 3, dtype=np.int8),
                rng.integers(0, [2, 3, 4], dtype=np.int64),
            ),
            "vector": rng.uniform(-1, 1, 7).astype(np.float32),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> Any:
        self.t += 1
        return self._obs(), float(action), False, self.t >= 6, {"t": self.t}


class DyingBig(BigObservation):
    """Exits its process on its second step of an episode."""

    def step(self, action: int) -> Any:
        if self.t == 1:
            os._exit(3)
        return super().step(action)


class Walk(gymnasium.Env[np.ndarray, int]):
    """Deterministic given its seed: episodes of 2 to 6 steps (even lengths terminate, odd
    ones truncate); the observation is ``(episode draw, step)`` and the reward is
    ``action + step / 10``. ``steps_taken`` counts every ``step`` call. With ``gate``,
    ``step`` blocks until that file exists (a straggler the test releases); with
    ``explode_at=n`` its ``n``-th step call raises ``ValueError``; ``step_seconds``: each
    step sleeps that long."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float64)
    action_space = gymnasium.spaces.Discrete(3)

    def __init__(
        self, gate: str | None = None, explode_at: int | None = None, step_seconds: float = 0.0
    ) -> None:
        self.gate = gate
        self.explode_at = explode_at
        self.step_seconds = step_seconds
        self.steps_taken = 0
        self.task = "default"  # set per worker by tests of per-worker updates

    def set_task(self, task: str, level: int = 0) -> str:
        """Set the task (garage's env_update); return the previous one."""
        previous, self.task = self.task, f"{task}:{level}"
        return previous

    def _obs(self) -> np.ndarray:
        return np.array([self.draw, self.t], dtype=np.float64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.length = int(self.np_random.integers(2, 7))
        self.draw = float(self.np_random.random())
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> Any:
        if self.gate is not None:
            deadline = time.monotonic() + 30
            while not os.path.exists(self.gate) and time.monotonic() < deadline:
                time.sleep(0.002)
        if self.step_seconds:
            time.sleep(self.step_seconds)
        self.steps_taken += 1
        if self.steps_taken == self.explode_at:
            raise ValueError("Walk exploded on purpose")
        self.t += 1
        done = self.t >= self.length
        even = self.length % 2 == 0
        return self._obs(), float(action) + self.t / 10, done and even, done and not even, {}


class WalkInPlace(Walk):
    """:class:`Walk`, writing every observation into the one array it returns each time (as
    envs backed by a buffer of their own do)."""

    def _obs(self) -> np.ndarray:
        self.buffer = getattr(self, "buffer", np.zeros(2))
        self.buffer[:] = (self.draw, self.t)
        return self.buffer


class GraphInPlace(gymnasium.Env[Any, int]):
    """Observes a Graph of one node whose feature is its step count, written into the
    nodes of the one GraphInstance it returns each time (as :class:`WalkInPlace` does)."""

    def __init__(self) -> None:
        self.observation_space = gymnasium.spaces.Graph(
            gymnasium.spaces.Box(0.0, 100.0, (1,), np.float32), None
        )
        self.action_space = gymnasium.spaces.Discrete(2)
        edges = np.zeros((0, 2), np.int64)
        self.graph = gymnasium.spaces.GraphInstance(np.zeros((1, 1), np.float32), None, edges)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.graph.nodes[:] = 0
        return self.graph, {}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.graph.nodes[:] += 1
        return self.graph, 0.0, False, False, {}


class RaisesOnTwo(gymnasium.Env[np.ndarray, int]):
    """Counts its steps in the observation; action 2 raises ValueError."""

    def __init__(self) -> None:
        self.observation_space = gymnasium.spaces.Box(0, 1000, (1,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(3)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action: int) -> Any:
        if action == 2:
            raise ValueError("action 2 is not allowed here")
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, False, {}


class Misshapen(RaisesOnTwo):
    """:class:`RaisesOnTwo` whose action 2 gives an observation one value too long instead."""

    def step(self, action: int) -> Any:
        if action == 2:
            return np.zeros(2, np.float32), 0.0, False, False, {}
        return super().step(action)


class AsyncCounter(Counter):
    """:class:`Counter` as a coroutine env: ``reset``/``step`` are ``async def``. A step
    awaits ``gate`` (an ``asyncio.Event``) when one is given, or the event keyed by the
    action in ``gates``; it records whether it was cancelled and whether the env closed."""

    def __init__(
        self,
        gate: Any = None,
        gates: dict[Any, Any] | None = None,
        fail_on: Any = None,
        finished: list[Any] | None = None,
        limit: int = 5,
    ) -> None:
        super().__init__(limit=limit)
        self.gate = gate
        self.gates = gates or {}
        self.fail_on = fail_on
        self.finished = finished
        self.cancelled = False
        self.closed = False

    async def reset(self, seed: int | None = None) -> dict[str, Any]:  # type: ignore[override]
        await asyncio.sleep(0)
        return Counter.reset(self, seed)

    async def step(self, action: Any) -> dict[str, Any]:  # type: ignore[override]
        try:
            if self.gate is not None:
                await self.gate.wait()
            if isinstance(action, int) and action in self.gates:
                await self.gates[action].wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.fail_on is not None and action == self.fail_on:
            raise ValueError(f"async step failed on {action!r}")
        if self.finished is not None:
            self.finished.append(action)
        return Counter.step(self, action)

    async def add(self, a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    async def explode(self) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("async method exploded")

    async def close(self) -> None:
        await asyncio.sleep(0)
        self.closed = True


class AsyncCartPole:
    """An async gymnasium env (``reset``/``step`` are coroutine functions returning
    gymnasium's tuples) wrapping CartPole, yielding to the loop on every call."""

    def __init__(self) -> None:
        self.env = gymnasium.make("CartPole-v1")
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.label = "async cartpole"

    async def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        await asyncio.sleep(0)
        return self.env.reset(seed=seed, options=options)

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        await asyncio.sleep(0)
        return self.env.step(action)  # type: ignore[return-value]

    def close(self) -> None:
        self.env.close()


class Touchy(gymnasium.Env[np.ndarray, int]):
    """A tiny gymnasium env that raises ``ValueError`` in ``reset`` when seeded with 13,
    and (when ``fragile``) in ``step`` for action 1."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, fragile: bool = False) -> None:
        self.fragile = fragile

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed == 13:
            raise ValueError("unlucky seed")
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> Any:
        if self.fragile and action == 1:
            raise ValueError("fragile env stepped with 1")
        return np.ones(1, np.float32), 1.0, False, False, {}


def _lost_outside(pid: int) -> None:
    if os.getpid() != pid:
        raise RuntimeError("this object only unpickles in the worker")


class _ChildOnly:
    def __reduce__(self) -> Any:
        return (_lost_outside, (os.getpid(),))


class ChildOnlyReplies(Counter):
    """Its steps return an object that cannot be unpickled outside the worker process."""

    def step(self, action: Any) -> Any:
        return _ChildOnly()

    def terminated(self, state: Any) -> bool:
        return False


class GatedTouchy(Touchy):
    """``step`` blocks until the file ``gate`` exists (or 30 s pass); with ``began`` (a file
    path), it creates that file first, so a test can tell that a step is under way."""

    def __init__(self, gate: str, began: str | None = None) -> None:
        super().__init__()
        self.gate = gate
        self.began = began

    def step(self, action: int) -> Any:
        if self.began is not None:
            Path(self.began).touch()
        deadline = time.monotonic() + 30
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.002)
        return super().step(action)


class LockedState(Counter):
    """``step`` with action ``"lock"`` returns a state holding a lock: it cannot be pickled."""

    def step(self, action: Any) -> dict[str, Any]:
        state = super().step(0)
        if isinstance(action, str) and action == "lock":
            state["lock"] = threading.Lock()
        return state


def choose_walk(observation: np.ndarray) -> int:
    """A deterministic, not constant policy for one :class:`Walk` observation."""
    return int((int(observation[1]) + (observation[0] > 0.5)) % 3)


class RecordingPolicy:
    """:func:`choose_walk`, leaving marks in ``directory``: a file ``unpickled-<pid>-<n>``
    each time a copy is unpickled, and ``called-<pid>-<id>`` for each object called (so a
    test counts copies per process). ``weights``: ballast, so the policy is large."""

    def __init__(self, directory: str, size: int = 1 << 16) -> None:
        self.directory = directory
        self.weights = np.zeros(size)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        fd, _ = tempfile.mkstemp(prefix=f"unpickled-{os.getpid()}-", dir=self.directory)
        os.close(fd)

    def __call__(self, observation: np.ndarray) -> int:
        Path(self.directory, f"called-{os.getpid()}-{id(self)}").touch()
        return choose_walk(observation)


class UnpicklableHere:
    """A policy that pickles in the parent and fails to unpickle anywhere."""

    def __reduce__(self) -> Any:
        return (_refuse, ())

    def __call__(self, observation: Any) -> int:
        return 0


def _refuse() -> Any:
    raise RuntimeError("this policy refuses to be unpickled")


class Chatty(Walk):
    """:class:`Walk` with infos: reset's holds the episode's draw, each step's the step
    number and, on an episode's last step, its length."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        observation, _ = super().reset(seed=seed, options=options)
        return observation, {"draw": self.draw}

    def step(self, action: int) -> Any:
        observation, reward, terminated, truncated, _ = super().step(action)
        info: dict[str, Any] = {"t": self.t}
        if terminated or truncated:
            info["length"] = self.length
        return observation, reward, terminated, truncated, info


class AsyncChatty(Chatty):
    """:class:`Chatty` as an async gymnasium env: ``reset``, ``step`` and ``close`` are
    ``async def``, each yielding to the loop first. ``built`` keeps every instance, so a
    test can check that each was closed (``closed``)."""

    built: ClassVar[list[AsyncChatty]] = []

    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        AsyncChatty.built.append(self)

    async def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        await asyncio.sleep(0)
        return Chatty.reset(self, seed=seed, options=options)

    async def step(self, action: int) -> Any:  # type: ignore[override]
        await asyncio.sleep(0)
        return Chatty.step(self, action)

    async def close(self) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        self.closed = True


class TupleActions(gymnasium.Env[np.ndarray, tuple[int, int]]):
    """Counts its steps and resets (``steps``, ``resets``); its actions are pairs (a
    ``Tuple`` space), its observation the steps taken, its reward the pair's last item;
    episodes never end."""

    observation_space = gymnasium.spaces.Box(0, np.inf, (1,), np.float64)
    action_space = gymnasium.spaces.Tuple((gymnasium.spaces.Discrete(3),) * 2)

    def __init__(self) -> None:
        self.steps = 0
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.resets += 1
        return np.array([self.steps], np.float64), {}

    def step(self, action: tuple[int, int]) -> Any:
        self.steps += 1
        return np.array([self.steps], np.float64), float(action[-1]), False, False, {}


class AsyncTupleActions(TupleActions):
    """:class:`TupleActions` as an async gymnasium env."""

    async def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        await asyncio.sleep(0)
        return TupleActions.reset(self, seed=seed, options=options)

    async def step(self, action: tuple[int, int]) -> Any:  # type: ignore[override]
        await asyncio.sleep(0)
        return TupleActions.step(self, action)


#: The fake libraries in tests/fake_threaded, each recording the thread counts it is given.
FAKE_THREADED = ("torch", "cv2")
#: The variables that bound the native thread pools libraries start as they load.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


class ThreadReport(gymnasium.Env[int, int]):
    """Reports, at each reset (``report``, for ``get_attr``), what bounds its process's
    threads: the native pools threadpoolctl sees, the thread variables, the calls each
    fake library of ``fakes`` (a folder) got, and the threads running that Python did not
    start. The fakes are imported at construction, or
    with ``planted`` put straight into ``sys.modules``, as no import would; not in process
    ``test_pid`` (where AioVectorEnv builds one env for its spaces), whose imports must not
    change."""

    observation_space = gymnasium.spaces.Discrete(1)
    action_space = gymnasium.spaces.Discrete(1)

    def __init__(self, fakes: str | None = None, planted: bool = False, test_pid: int = 0) -> None:
        for name in FAKE_THREADED if fakes is not None and os.getpid() != test_pid else ():
            assert fakes is not None
            if planted:
                location = os.path.join(fakes, f"{name}.py")
                spec = importlib.util.spec_from_file_location(name, location)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.modules[name] = module
            else:
                sys.path.insert(0, fakes)
                importlib.import_module(name)
        self.report: dict[str, Any] = {}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        from threadpoolctl import threadpool_info

        self.report = {
            "pools": {pool["internal_api"]: pool["num_threads"] for pool in threadpool_info()},
            "variables": {name: os.environ.get(name) for name in THREAD_VARIABLES},
            "calls": {
                name: list(sys.modules[name].calls) for name in FAKE_THREADED if name in sys.modules
            },
            # The threads Python did not start: the native pools' (Linux: /proc).
            "native_threads": len(os.listdir("/proc/self/task")) - threading.active_count(),
        }
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        return 0, 0.0, False, False, {}


class InfoZoo(gymnasium.Env[np.ndarray, int]):
    """Infos that vary per env (``index``) and per step over what gymnasium's vector infos
    make of them: Python and numpy scalars, a key that is an int in some envs and a float
    in others, keys only some envs have, arrays whose dtype or shape differs between envs,
    objects (strings, tuples, None, numpy bools), nested dicts, a key that is a dict in one
    env and a number in another. Episodes last ``4 + index`` steps. ``quirks`` adds now and
    then a key that starts with ``_`` and an info's own ``final_info``; ``uniform`` keeps
    only keys that every env has, each of one type in all envs; ``flat`` only scalars."""

    observation_space = gymnasium.spaces.Box(-1e6, 1e6, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, index: int, style: str = "varied") -> None:
        self.index = index
        self.quirks = style == "quirks"
        self.uniform = style in ("uniform", "flat")
        self.flat = style == "flat"
        self.t = 0
        self.episodes = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.index, self.t], np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        self.episodes += 1
        info: dict[str, Any] = {"episodes": self.episodes}
        if self.index % 2 and not self.uniform:
            info["start"] = np.float32(self.index)
        return self._obs(), info

    def step(self, action: int) -> Any:
        self.t += 1
        t, i = self.t, self.index
        info: dict[str, Any] = {"always": t * 0.5, "np64": np.float64(t + i)}
        if self.flat:
            info.update(count=t * 10**10, odd=bool(t % 2), small=np.float32(-t), at=np.int16(i))
            return self._obs(), 1.0, t >= 4 + i, False, info
        if self.uniform:
            info["vector"] = np.full(2, t + i, np.float32)
            info["text"] = f"env {i}"
            info["nested"] = {"a": t * 1.5, "b": {"c": np.int32(t)}}
            if t >= 4 + i:
                info["episode"] = {"r": float(t), "l": t}
            return self._obs(), 1.0, t >= 4 + i, False, info
        if (t + i) % 3 == 0:
            info["sometimes"] = t * 10**11
        # an int in even envs, a float in odd ones: gymnasium's dtype is the first env's
        info["number"] = t if i % 2 == 0 or t % 4 == 0 else t + 0.75
        info["late_float"] = t + 0.25 if i == 0 and t % 2 else t
        info["vector"] = np.full(2, t + i, np.float32 if i < 2 else np.float64)
        info["row"] = np.arange(2, dtype=np.int64 if i % 2 == 0 else np.int32) + t
        info["text"] = f"env {i}" if (t + i) % 2 else (t, i)
        info["flag"] = np.bool_(t % 2)
        # numbers first, then numeric strings (converted), and the other way round
        info["maybe"] = (float(t) if i == 0 else np.float64(t)) if i < 2 else str(t)
        if i < 2:
            info["objects_first"] = None if t % 2 else "x"
        else:
            info["objects_first"] = float(t) if i == 2 else np.float64(t)
        nested: dict[str, Any] = {"a": t * 1.5}
        if i != 1:
            nested["b"] = {"c": t + i, "d": np.int32(t)}
        if t % 3 == 0:
            nested["e"] = "three"
        info["nested"] = nested
        if t % 5 == 0:
            info["shape_shifter"] = {"x": t} if i < 2 else float(t)
        if self.quirks and i == 1 and t % 3 == 1:
            info["_hidden"] = t
        if self.quirks and i == 2 and t % 4 == 2:
            info["final_info"] = {"mine": t}
        terminated = t >= 4 + i
        if terminated:
            info["episode"] = {"r": float(t), "l": t, "final": True}
        return self._obs(), 1.0, terminated, False, info


class Paced(gymnasium.Env[np.ndarray, Any]):
    """A gymnasium env whose calls take as long as asked. An action is a dict: ``sleep``
    (seconds the step takes), ``end`` (the step terminates the episode), ``reset_sleep``
    (seconds the next reset takes, an autoreset's included), ``hang`` (the step waits until
    the test sets ``Paced.released``, at most 30 s: a thread worker's abandoned step then
    returns). ``reset(options={"sleep": s})`` takes ``s``; ``{"hang": True}`` hangs."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)
    released: ClassVar[bool] = False

    def __init__(self) -> None:
        self.reset_sleep = 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        sleep = options.get("sleep", self.reset_sleep)
        self.reset_sleep = 0.0
        _hang_or_sleep(bool(options.get("hang")), sleep)
        return np.zeros(1, np.float32), {"reset_took": sleep}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        _hang_or_sleep(bool(action.get("hang")), action.get("sleep", 0.0))
        self.reset_sleep = action.get("reset_sleep", 0.0)
        return np.ones(1, np.float32), 1.0, bool(action.get("end")), False, {}


def _hang_or_sleep(hang: bool, seconds: float) -> None:
    deadline = time.monotonic() + 30.0
    while hang and not Paced.released and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(seconds)


class AsyncPaced(Paced):
    """:class:`Paced` as a coroutine env: its waits are ``asyncio.sleep``."""

    async def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        options = options or {}
        sleep = options.get("sleep", self.reset_sleep)
        self.reset_sleep = 0.0
        await asyncio.sleep(30.0 if options.get("hang") else sleep)
        return Paced.reset(self, seed=seed, options={"sleep": 0.0})[0], {"reset_took": sleep}

    async def step(  # type: ignore[override]
        self, action: Any
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        await asyncio.sleep(30.0 if action.get("hang") else action.get("sleep", 0.0))
        return Paced.step(self, {**action, "sleep": 0.0, "hang": False})


class Breakable(gymnasium.Env[np.ndarray, int]):
    """Observation ``[t, generation]``: the step count in the episode and how many envs were
    built before this one in its process (a restarted env's is larger, in a process or
    thread worker alike). Action 0 steps (reward 1); 1 raises; 2 ends the process; 3
    hangs for ``hang`` seconds (past any test's step deadline, short enough to end)."""

    built: ClassVar[int] = 0

    def __init__(self, hang: float = 3.0) -> None:
        self.observation_space = gymnasium.spaces.Box(0, 10**6, (2,), np.float64)
        self.action_space = gymnasium.spaces.Discrete(4)
        self.generation = Breakable.built
        Breakable.built += 1
        self.hang = hang
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.generation], np.float64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"reset": True}

    def step(self, action: int) -> Any:
        self._fault(int(action))
        self.t += 1
        return self._obs(), 1.0, False, False, {"t": self.t}

    def _fault(self, action: int) -> None:
        if action == 1:
            raise ValueError("the simulator lost its state")
        if action == 2:
            os._exit(3)
        if action == 3:
            time.sleep(self.hang)


class TextBreakable(Breakable):
    """:class:`Breakable` observing ``"t/generation"``, a Text (which gymnasium batches as
    a tuple with one string per env)."""

    def __init__(self, hang: float = 3.0) -> None:
        super().__init__(hang)
        self.observation_space = gymnasium.spaces.Text(12, charset="0123456789/.")

    def _obs(self) -> Any:
        return f"{self.t}/{self.generation}"


class EndingBreakable(Breakable):
    """:class:`Breakable` whose episodes end (terminated) at their second step."""

    def step(self, action: int) -> Any:
        observation, reward, _, truncated, info = super().step(action)
        return observation, reward, self.t >= 2, truncated, info


class EndsThenFailsToReset(EndingBreakable):
    """:class:`EndingBreakable` whose second reset raises: the autoreset after its first
    episode's end (a restarted env, a new one, starts)."""

    def __init__(self, hang: float = 3.0) -> None:
        super().__init__(hang)
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.resets += 1
        if self.resets == 2:
            raise RuntimeError("the simulator could not start a new episode")
        return super().reset(seed=seed, options=options)


class AsyncEndsThenFailsToReset(EndsThenFailsToReset):
    """:class:`EndsThenFailsToReset` as a coroutine env."""

    async def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        await asyncio.sleep(0)
        return EndsThenFailsToReset.reset(self, seed=seed, options=options)

    async def step(self, action: int) -> Any:  # type: ignore[override]
        return EndsThenFailsToReset.step(self, action)


class AsyncBreakable(Breakable):
    """:class:`Breakable` as a coroutine env (its hang awaits, so the loop goes on)."""

    async def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        await asyncio.sleep(0)
        return Breakable.reset(self, seed=seed, options=options)

    async def step(self, action: int) -> Any:  # type: ignore[override]
        if int(action) == 3:
            await asyncio.sleep(self.hang)
        return Breakable.step(self, 0 if int(action) == 3 else action)


class TaskEnv(gymnasium.Env[np.ndarray, int]):
    """A task-conditioned env, as an agent env is: ``reset(options=task)`` starts task
    ``task["task"]`` (default -1: no options came), whose episodes end after
    ``task["length"]`` steps (default 3). Observation ``[task, t]``; reward ``task + t``.
    ``task["exit_once"]``, a path: the first step of the task (over all processes) creates
    it and ends its process 50 ms after it answered, while the worker is idle."""

    observation_space = gymnasium.spaces.Box(-1, 10**6, (2,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self) -> None:
        self.task: dict[str, Any] = {}
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.task.get("task", -1), self.t], np.float64)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.task, self.t = dict(options or {}), 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        marker = self.task.get("exit_once")
        if marker is not None and not os.path.exists(marker):
            Path(marker).touch()  # the first env of the task to step dies, idle, after it
            threading.Timer(0.05, os._exit, (3,)).start()
        self.t += 1
        reward = float(self.task.get("task", -1) + self.t)
        return self._obs(), reward, self.t >= self.task.get("length", 3), False, {}


class AsyncTaskEnv(TaskEnv):
    """:class:`TaskEnv` as a coroutine env, with faults and gates a test controls through
    class attributes (the envs run in the test's own process). Task options: ``"gate"``
    (each step waits for :attr:`gate`), ``"fail"`` (the first ``fail`` steps of this task,
    over all its envs, raise; with ``"hang"``, they hang instead). :attr:`resets` counts each task's resets."""

    gate: ClassVar[asyncio.Event | None] = None
    failures: ClassVar[dict[int, int]] = {}
    resets: ClassVar[dict[int, int]] = {}

    async def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        await asyncio.sleep(0)
        observation, info = TaskEnv.reset(self, seed=seed, options=options)
        task = self.task.get("task", -1)
        AsyncTaskEnv.resets[task] = AsyncTaskEnv.resets.get(task, 0) + 1
        return observation, info

    async def step(  # type: ignore[override]
        self, action: int
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        task = self.task.get("task", -1)
        if self.task.get("gate"):
            assert AsyncTaskEnv.gate is not None
            await AsyncTaskEnv.gate.wait()
        await asyncio.sleep(0.001)
        failed = AsyncTaskEnv.failures.get(task, 0)
        if failed < self.task.get("fail", 0):
            AsyncTaskEnv.failures[task] = failed + 1
            if self.task.get("hang"):
                await asyncio.sleep(30)  # past any test's step deadline: the env is given up
            raise ValueError(f"the sandbox of task {task} crashed")
        return TaskEnv.step(self, action)


class Tattling(Breakable):
    """:class:`Breakable` whose reset infos carry the pid of the process it runs in."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        observation, info = super().reset(seed=seed, options=options)
        return observation, {**info, "pid": os.getpid(), "options": options}


class Spawning(Tattling):
    """:class:`Tattling` that starts a helper process (as a sandbox would) when built; its
    reset infos carry the helper's pid too."""

    def __init__(self, hang: float = 3.0) -> None:
        super().__init__(hang)
        import subprocess

        self.helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        observation, info = super().reset(seed=seed, options=options)
        return observation, {**info, "helper": self.helper.pid}


class SecondBuildFails(RaisesOnTwo):
    """:class:`RaisesOnTwo` whose second build raises (builds are counted in the file
    ``log``, one line each, across processes): a restart after action 2 fails to build."""

    def __init__(self, log: str) -> None:
        with open(log, "a+") as file:
            file.write("built\n")
            file.seek(0)
            builds = len(file.readlines())
        if builds == 2:
            raise RuntimeError("SecondBuildFails: the second build fails")
        super().__init__()


class ResetFailsAfterEpisode(gymnasium.Env[np.ndarray, int]):
    """Episodes of two steps (terminated); its second reset (the one after its first
    episode) raises. Observation ``[t]``."""

    observation_space = gymnasium.spaces.Box(0, 10, (1,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self) -> None:
        self.resets = 0
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.resets += 1
        if self.resets == 2:
            raise ValueError("ResetFailsAfterEpisode: the reset after the first episode fails")
        self.t = 0
        return np.array([0.0]), {}

    def step(self, action: int) -> Any:
        self.t += 1
        return np.array([float(self.t)]), 1.0, self.t == 2, False, {}


class Steered(gymnasium.Env[np.ndarray, Any]):
    """Its action is a pair (a ``Tuple`` of a gear and a 2-vector): its observation is
    ``[gear, *vector]``; an action outside its space raises ValueError."""

    observation_space = gymnasium.spaces.Box(-10, 10, (3,), np.float64)
    action_space = gymnasium.spaces.Tuple(
        (gymnasium.spaces.Discrete(3), gymnasium.spaces.Box(-1, 1, (2,), np.float32))
    )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(3), {}

    def step(self, action: Any) -> Any:
        if not self.action_space.contains(action):
            raise ValueError(f"Steered: {action!r} is not in {self.action_space}")
        gear, vector = action
        return np.array([gear, *vector], np.float64), 0.0, False, False, {}


class DictSteered(Steered):
    """:class:`Steered` whose pair is a ``Dict`` (``gear``, ``vector``)."""

    action_space = gymnasium.spaces.Dict(
        {"gear": Steered.action_space[0], "vector": Steered.action_space[1]}
    )

    def step(self, action: Any) -> Any:
        if not self.action_space.contains(action):
            raise ValueError(f"DictSteered: {action!r} is not in {self.action_space}")
        observation = np.array([action["gear"], *action["vector"]], np.float64)
        return observation, 0.0, False, False, {}


class CloseRaises(Painted):
    """:class:`Painted` whose ``close`` raises, as a buggy env's teardown may."""

    def close(self) -> None:
        raise RuntimeError("CloseRaises: close failed")

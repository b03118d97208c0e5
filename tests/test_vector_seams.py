"""Where the vector face meets grouping and gymnasium's contract: actions reach each env
exactly as gymnasium hands them over, whatever the space, in the default grouping; envs
whose spaces differ group as they run alone; every failure of a batch is reported as
gymnasium's AsyncVectorEnv reports it; gymnasium's error types and texts."""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from typing import Any

import cloudpickle
import gymnasium
import numpy as np
import pytest
import space_envs
from envs import RaisesOnTwo
from gymnasium.spaces import Box
from gymnasium.vector import SyncVectorEnv
from space_envs import echo

import aioenv

cloudpickle.register_pickle_by_value(space_envs)


@pytest.mark.parametrize("mode", ["process", "thread", "sync"])
def test_text_actions_reach_each_env_whole_in_the_default_grouping(mode: str) -> None:
    words = ("abc", "de", "fghij", "k")
    with aioenv.AioVectorEnv([functools.partial(echo, "Text")] * 4, mode=mode) as envs:
        envs.reset(seed=0)
        observations, *_ = envs.step(words)
        assert observations == words
        assert envs.call("get_wrapper_attr", "t") == (1, 1, 1, 1)


def test_grouped_envs_take_actions_of_every_space_gymnasium_ships() -> None:
    """Grouped two by two, every env gets exactly its own action (Echo observes it)."""
    for space in ("Tuple", "Sequence", "Graph", "OneOf", "custom", "Dict"):
        factories = [functools.partial(echo, space, index) for index in range(4)]
        with aioenv.AioVectorEnv(factories, mode="process", envs_per_worker=2) as envs:
            envs.reset(seed=1)
            envs.action_space.seed(2)
            actions = envs.action_space.sample()
            observations, *_ = envs.step(actions)
            expected = list(gymnasium.vector.utils.iterate(envs.action_space, actions))
            got = list(gymnasium.vector.utils.iterate(envs.observation_space, observations))
            assert [space_envs.digest(a) for a in got] == [space_envs.digest(a) for a in expected]


class _Bounded(gymnasium.Env[np.ndarray, int]):
    """An env whose observation bounds depend on its index (shapes and dtypes equal)."""

    def __init__(self, index: int) -> None:
        self.observation_space = Box(0.0, 1.0 + index, (2,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.index = index

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.full(2, self.index, np.float32), {}

    def step(self, action: int) -> Any:
        return np.full(2, self.index + action, np.float32), 1.0, False, False, {}


cloudpickle.register_pickle_by_value(__import__(__name__))


@pytest.mark.parametrize("envs_per_worker", [None, 2])
def test_envs_whose_observation_spaces_differ_group_as_they_run_alone(
    envs_per_worker: int | None,
) -> None:
    factories = [functools.partial(_Bounded, index) for index in range(4)]
    options = {} if envs_per_worker is None else {"envs_per_worker": envs_per_worker}
    reference = SyncVectorEnv(factories, observation_mode="different")
    with (
        aioenv.AioVectorEnv(
            factories, mode="process", observation_mode="different", **options
        ) as envs,
        contextlib.closing(reference),
    ):
        assert envs.observation_space == reference.observation_space
        np.testing.assert_array_equal(envs.reset(seed=0)[0], reference.reset(seed=0)[0])
        np.testing.assert_array_equal(envs.step([1, 0, 1, 0])[0], reference.step([1, 0, 1, 0])[0])
    with pytest.raises(RuntimeError, match="observation_mode='different'"):
        aioenv.AioVectorEnv(factories, mode="process", **options)


def test_every_failing_env_of_a_batch_is_reported_and_the_last_raised() -> None:
    """Like gymnasium's AsyncVectorEnv: each failure logged with its env and traceback,
    then the last env's own exception raised (one worker steps all four envs here)."""
    with aioenv.AioVectorEnv(RaisesOnTwo, 4, mode="process", envs_per_worker=4) as envs:
        envs.reset(seed=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ValueError, match="action 2 is not allowed") as raised:
                envs.step(np.array([0, 2, 0, 2]))
        logged = [str(warning.message) for warning in caught]
        assert len(logged) == 5, logged
        assert "Received the following error from Worker-1 - Shutting it down" in logged[0]
        assert "ValueError: action 2 is not allowed here" in logged[1]
        assert "Received the following error from Worker-3 - Shutting it down" in logged[2]
        assert "Raising the last exception back to the main process." in logged[4]
        notes = "".join(getattr(raised.value, "__notes__", [])) or str(raised.value.__cause__)
        assert "env 3, one of envs 0-3 (worker 0)" in notes
        assert envs.step(np.array([1, 1, 1, 1]))[0].shape == (4, 1)  # still usable


@pytest.mark.parametrize("mode", ["sync", "process"])
def test_reset_mask_errors_are_gymnasiums(mode: str) -> None:
    with aioenv.AioVectorEnv("CartPole-v1", 3, mode=mode) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=re.escape("must have shape `(3,)`, got (1,)")):
            envs.reset(options={"reset_mask": np.array([True])})
        with pytest.raises(TypeError, match=re.escape("must have `dtype=np.bool_`, got int64")):
            envs.reset(options={"reset_mask": np.array([1, 0, 1])})
        with pytest.raises(TypeError, match="must be a numpy array"):
            envs.reset(options={"reset_mask": [True, False, True]})
        with pytest.raises(ValueError, match="at least one True value"):
            envs.reset(options={"reset_mask": np.zeros(3, np.bool_)})
        assert envs.reset(options={"reset_mask": np.array([True, False, True])})[0].shape == (3, 4)


def test_an_invalid_observation_mode_is_gymnasiums_error() -> None:
    with pytest.raises(ValueError, match=re.escape("Invalid `observation_mode`, expected")):
        aioenv.AioVectorEnv("CartPole-v1", 2, mode="sync", observation_mode="invalid")


class _Wider(_Bounded):
    """:class:`_Bounded` with one action more when ``index`` is 2."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.action_space = gymnasium.spaces.Discrete(3 if index == 2 else 2)


class _Dial(gymnasium.Space[int]):
    """A space of the user's own with no ``__eq__``: two copies are not equal."""

    def sample(self, mask: Any = None, probability: Any = None) -> int:
        return 0


class _Dialed(_Bounded):
    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.action_space = _Dial()


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_an_env_whose_action_space_differs_is_named_and_refused(mode: str) -> None:
    factories = [functools.partial(_Wider, index) for index in range(4)]
    with pytest.raises(RuntimeError, match=r"env 2's action space Discrete\(3\) is not equal"):
        aioenv.AioVectorEnv(factories, mode=mode, observation_mode="different")
    factories = [functools.partial(_Dialed, index) for index in range(2)]
    with pytest.raises(RuntimeError, match="a space class of your own needs an __eq__"):
        aioenv.AioVectorEnv(factories, mode="process", observation_mode="different")

"""AioVectorEnv: a drop-in for gymnasium's SyncVectorEnv/AsyncVectorEnv, checked array by
array against SyncVectorEnv on the same seeded rollout, in each autoreset mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import CloseRaises
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from support import POOL_MODES, steps_from_inside_a_loop

import aioenv

N = 3
AUTORESET = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}


def assert_same_infos(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        if isinstance(value, dict):
            assert_same_infos(ours[key], value)
        elif key == "final_obs":
            for mine, reference in zip(ours[key], value, strict=True):
                np.testing.assert_array_equal(mine, reference)
        else:
            np.testing.assert_array_equal(ours[key], value)


@pytest.mark.parametrize("autoreset", list(AUTORESET))
@pytest.mark.parametrize("mode", list(POOL_MODES))
def test_same_seeded_rollout_as_sync_vector_env(mode: str, autoreset: str) -> None:
    reference = SyncVectorEnv(
        [lambda: gymnasium.make("CartPole-v1")] * N, autoreset_mode=AUTORESET[autoreset]
    )
    ours = aioenv.AioVectorEnv("CartPole-v1", N, mode=POOL_MODES[mode], autoreset=autoreset)
    try:
        assert ours.metadata["autoreset_mode"] == AUTORESET[autoreset]
        assert ours.single_observation_space == reference.single_observation_space
        assert ours.observation_space == reference.observation_space
        assert ours.single_action_space == reference.single_action_space
        assert ours.action_space == reference.action_space
        obs_a, info_a = ours.reset(seed=123)
        obs_b, info_b = reference.reset(seed=123)
        np.testing.assert_array_equal(obs_a, obs_b)
        assert_same_infos(info_a, info_b)
        rng = np.random.default_rng(1)
        ends = 0
        for _ in range(150):
            actions = rng.integers(0, 2, N)
            a = ours.step(actions)
            b = reference.step(actions)
            for mine, theirs in zip(a[:4], b[:4], strict=True):
                np.testing.assert_array_equal(mine, theirs)
                assert mine.dtype == theirs.dtype
            assert_same_infos(a[4], b[4])
            done = b[2] | b[3]
            ends += int(done.sum())
            if autoreset == "disabled" and done.any():
                obs_a, info_a = ours.reset(options={"reset_mask": done})
                obs_b, info_b = reference.reset(options={"reset_mask": done})
                np.testing.assert_array_equal(obs_a, obs_b)
                assert_same_infos(info_a, info_b)
        assert ends >= 5
    finally:
        ours.close()
        reference.close()


def test_make_vec_mirrors_gymnasium_make_vec(tmp_path: Path) -> None:
    seen = tmp_path / "wrapped"  # written by each process that builds an env

    def wrapper(env: gymnasium.Env[Any, Any]) -> gymnasium.Env[Any, Any]:
        with open(seen, "a") as file:
            file.write("wrapped\n")
        return gymnasium.wrappers.TimeLimit(env, max_episode_steps=3)

    venv = aioenv.make_vec(
        "CartPole-v1",
        2,
        vectorization_mode="process",  # pygame's first render is not thread-safe
        vector_kwargs={"autoreset": "same_step"},
        wrappers=[wrapper],
        render_mode="rgb_array",
    )
    try:
        assert venv.render_mode == "rgb_array"
        assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        venv.reset(seed=0)
        for _ in range(3):
            _, _, terminated, truncated, infos = venv.step(np.array([1, 1]))
        assert truncated.all() or terminated.any()
        assert "final_obs" in infos
        frames = venv.render()
        assert frames is not None
        assert len(frames) == 2
        assert frames[0].shape == (400, 600, 3)
        # the probe env (built in a child process of its own) and each worker's env
        assert seen.read_text().split() == ["wrapped"] * 3
    finally:
        venv.close()


@pytest.mark.parametrize("mode", ["auto", "inline", *POOL_MODES])
def test_an_env_whose_close_raises_still_makes_a_vector_env(mode: str) -> None:
    """The probe env read for the spaces is closed at once: what its close raises is
    dropped, as a worker drops it, where it failed the constructor (SyncVectorEnv closes
    no env as it is made)."""
    venv = aioenv.AioVectorEnv(CloseRaises, N, mode=POOL_MODES.get(mode, mode))
    try:
        obs, _ = venv.reset(seed=0)
        assert obs.shape == (N, 1)
        assert venv.step(np.array([0, 1, 0]))[0].shape == (N, 1)
    finally:
        venv.close()


def test_call_get_attr_set_attr_through_the_vector_env() -> None:
    venv = aioenv.AioVectorEnv("CartPole-v1", 2, mode=["thread", "process"])
    try:
        assert venv.get_attr("gravity") == (9.8, 9.8)
        venv.set_attr("gravity", [1.5, 2.5])
        assert venv.get_attr("gravity") == (1.5, 2.5)
        venv.reset(seed=0)
        assert venv.call("action_space") == (gymnasium.spaces.Discrete(2),) * 2
        assert venv.render() is None  # no render_mode, as with gymnasium
    finally:
        venv.close()
        venv.close()  # idempotent


@pytest.mark.parametrize("envs_per_worker", [1, 2])
def test_pool_as_vector_env(envs_per_worker: int) -> None:
    pool = aioenv.make_pool(
        "CartPole-v1", 2, mode="process", autoreset="next_step", envs_per_worker=envs_per_worker
    )
    venv = aioenv.AioVectorEnv.from_pool(pool)
    n = 2 * envs_per_worker
    try:
        assert venv.num_envs == n
        obs, _ = venv.reset(seed=9)
        expected = np.stack([gymnasium.make("CartPole-v1").reset(seed=9 + i)[0] for i in range(n)])
        np.testing.assert_array_equal(obs, expected)
        obs, rewards, *_ = venv.step(np.arange(n) % 2)
        assert obs.shape == (n, 4) and rewards.tolist() == [1.0] * n
        assert venv.get_attr("gravity") == (9.8,) * n
    finally:
        venv.close()


@pytest.mark.loops
async def test_as_vector_env_refuses_a_pool_already_bound_to_a_loop() -> None:
    async with aioenv.make_pool("CartPole-v1", 1, mode="thread") as pool:
        await pool.reset_all()
        with pytest.raises(RuntimeError, match="from_pool"):
            aioenv.AioVectorEnv.from_pool(pool)


@pytest.mark.loops
async def test_vector_env_works_when_called_from_inside_a_running_loop() -> None:
    steps_from_inside_a_loop(aioenv.AioVectorEnv("CartPole-v1", 2, mode="thread"))


def test_a_constructor_that_raised_leaves_nothing_for_the_collector_to_trip_on() -> None:
    """gymnasium's ``VectorEnv.__del__`` (1.1 has one) closes even an env whose constructor
    raised: that close finds nothing to close and raises nothing."""
    import gc
    import sys

    unraisable: list[Any] = []
    previous, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        try:
            # mode="process": the probe env is built in a child, as the default does
            aioenv.AioVectorEnv(lambda: 42, num_envs=2, mode="process")
        except TypeError as error:  # not pytest.raises: its record would keep the env alive
            assert "neither a gymnasium.Env" in str(error)
        else:
            pytest.fail("a factory of ints built a vector env")
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert [hook.exc_value for hook in unraisable] == []

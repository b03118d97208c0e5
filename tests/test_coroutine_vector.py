"""Coroutine envs behind the vector face (``AioVectorEnv(..., mode="coroutine")`` and
``make_vec``), checked against gymnasium's SyncVectorEnv over the same env written plainly;
the ``"coroutine"`` mode name and its old spelling ``"async"``; what plain workers say when
given a coroutine env; and rollouts whose actions are tuples."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import AsyncChatty, AsyncCounter, AsyncTupleActions, Chatty, Counter, TupleActions
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from support import states_or_errors
from test_vector import assert_same_infos

import aioenv
from aioenv.pool._factory import worker_modes

N = 3
AUTORESET = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}


@pytest.fixture
def chatty_envs() -> Iterator[list[AsyncChatty]]:
    """Every AsyncChatty the test builds (the vector env's probe included)."""
    AsyncChatty.built.clear()
    yield AsyncChatty.built
    AsyncChatty.built.clear()


def assert_same_steps(ours: Any, theirs: Any) -> None:
    for mine, reference in zip(ours[:-1], theirs[:-1], strict=True):
        np.testing.assert_array_equal(mine, reference)
        assert mine.dtype == reference.dtype
    assert_same_infos(ours[-1], theirs[-1])


def play_both(ours: gymnasium.vector.VectorEnv, reference: SyncVectorEnv, steps: int) -> int:
    """Step both with the same random actions, comparing every answer; the episodes ended."""
    assert_same_steps(ours.reset(seed=5), reference.reset(seed=5))
    rng = np.random.default_rng(2)
    ends = 0
    for _ in range(steps):
        actions = rng.integers(0, 3, ours.num_envs)
        answer = reference.step(actions)
        assert_same_steps(ours.step(actions), answer)
        done = answer[2] | answer[3]
        ends += int(done.sum())
        if reference.autoreset_mode == AutoresetMode.DISABLED and done.any():
            mask = {"reset_mask": done}
            assert_same_steps(ours.reset(options=mask), reference.reset(options=mask))
    return ends


@pytest.mark.parametrize("autoreset", list(AUTORESET))
def test_coroutine_envs_answer_as_sync_vector_env_does(
    autoreset: str, chatty_envs: list[AsyncChatty]
) -> None:
    reference = SyncVectorEnv([Chatty] * N, autoreset_mode=AUTORESET[autoreset])
    ours = aioenv.AioVectorEnv([AsyncChatty] * N, mode="coroutine", autoreset=autoreset)
    try:
        assert [worker.kind for worker in ours.pool.workers] == ["coroutine"] * N
        assert ours.metadata["autoreset_mode"] == AUTORESET[autoreset]
        assert ours.single_observation_space == reference.single_observation_space
        assert ours.observation_space == reference.observation_space
        assert ours.action_space == reference.action_space
        assert play_both(ours, reference, 60) >= 10
        assert ours.np_random_seed == reference.np_random_seed == (5, 6, 7)
        assert ours.call("set_task", "walk", 2) == ("default",) * N
        assert ours.get_attr("task") == ("walk:2",) * N
        ours.set_attr("task", ["a", "b", "c"])
        assert ours.get_attr("task") == ("a", "b", "c")
    finally:
        ours.close()
        reference.close()
    assert len(chatty_envs) == N + 1  # the probe's env, then one per worker
    assert all(env.closed for env in chatty_envs)  # async close awaited, the probe's too


def test_old_spelling_async_runs_coroutine_envs_behind_the_vector_face(
    chatty_envs: list[AsyncChatty],
) -> None:
    reference = SyncVectorEnv([Chatty] * 2)
    with aioenv.AioVectorEnv([AsyncChatty] * 2, mode="async") as ours:
        assert [worker.kind for worker in ours.pool.workers] == ["coroutine"] * 2
        assert play_both(ours, reference, 20) >= 2
    reference.close()
    assert all(env.closed for env in chatty_envs)


@pytest.mark.loops
async def test_coroutine_envs_behind_the_vector_face_from_inside_a_running_loop(
    chatty_envs: list[AsyncChatty],
) -> None:
    # The probe's env is closed on a loop of its own: this one is running.
    with aioenv.AioVectorEnv([AsyncChatty] * 2, mode="coroutine") as ours:
        observations, infos = ours.reset(seed=1)
        assert observations.shape == (2, 2) and set(infos) == {"draw", "_draw"}
    assert len(chatty_envs) == 3 and all(env.closed for env in chatty_envs)


@pytest.fixture
def async_chatty_id(chatty_envs: list[AsyncChatty]) -> Iterator[str]:
    # gymnasium.make's checker and order wrappers would hide the env's async step.
    gymnasium.register(
        "AsyncChattyTest-v0", entry_point=AsyncChatty, order_enforce=False, disable_env_checker=True
    )
    yield "AsyncChattyTest-v0"
    del gymnasium.registry["AsyncChattyTest-v0"]


def test_make_vec_runs_a_coroutine_env(async_chatty_id: str) -> None:
    reference = SyncVectorEnv([Chatty] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    ours = aioenv.make_vec(
        async_chatty_id,
        2,
        vectorization_mode="coroutine",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    try:
        assert [worker.kind for worker in ours.pool.workers] == ["coroutine"] * 2
        assert play_both(ours, reference, 20) >= 2
        assert ours.spec is not None
        assert ours.spec.kwargs["vectorization_mode"] == "coroutine"
    finally:
        ours.close()
        reference.close()


def test_make_vec_async_in_a_list_keeps_gymnasiums_meaning() -> None:
    with aioenv.make_vec("CartPole-v1", 2, vectorization_mode=["async", "sync"]) as envs:
        assert [worker.kind for worker in envs.pool.workers] == ["process", "sync"]


@pytest.mark.parametrize("mode", ["sync", "thread", "process"])
def test_vector_env_names_the_worker_that_cannot_run_a_coroutine_env(
    mode: str, chatty_envs: list[AsyncChatty]
) -> None:
    with pytest.raises(aioenv.EnvError) as caught:
        aioenv.AioVectorEnv([AsyncChatty] * 2, mode=mode)
    message = str(caught.value)
    assert message.startswith(f"{mode} worker ")
    assert (
        "the env factory AsyncChatty built AsyncChatty, a coroutine env (its step() is async "
        "def), which only coroutine workers can await; pass mode='coroutine'"
    ) in message


@pytest.mark.parametrize("mode", ["coroutine", ["thread", "coroutine"]])
def test_vector_env_refuses_grouping_envs_in_coroutine_workers(mode: Any) -> None:
    with pytest.raises(TypeError, match="coroutine workers step one env each.*envs_per_worker"):
        aioenv.AioVectorEnv([Chatty] * 4, mode=mode, envs_per_worker=2)


async def test_pool_errors_on_envs_read_as_sentences() -> None:
    def not_an_env() -> object:
        return object()

    async with aioenv.make_pool([AsyncCounter, not_an_env], mode="thread") as pool:
        pool.reset()
        errors = await states_or_errors(pool, 2, aioenv.EnvError)
    assert "the env factory AsyncCounter built AsyncCounter, a coroutine env" in str(errors[0])
    assert (
        "the env factory test_pool_errors_on_envs_read_as_sentences.<locals>.not_an_env built "
        "object, which is neither a gymnasium.Env nor an aioenv.Environment"
    ) in str(errors[1])


@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
async def test_ray_worker_names_itself_when_given_a_coroutine_env() -> None:
    async with aioenv.make_pool(AsyncCounter, 1, mode="ray") as pool:
        pool.reset()
        errors = await states_or_errors(pool, 1, aioenv.EnvError)
    message = str(errors[0])
    assert message.startswith("ray worker 0")
    assert "the env factory AsyncCounter built AsyncCounter, a coroutine env" in message


ROLLOUT_CASES = [
    ("async", AsyncTupleActions, (1, 2)),
    ("async", AsyncTupleActions, ("seed", 2)),
    ("sync", TupleActions, ("seed", 2)),
]


@pytest.mark.parametrize(("kind", "env", "action"), ROLLOUT_CASES)
async def test_rollout_steps_with_tuple_actions(kind: str, env: type, action: Any) -> None:
    async with aioenv.make_pool(env, 2, mode=kind) as pool:
        await pool.set_policy(lambda observation: action)
        part = await pool.rollout(3)
        assert await pool.get_attr("steps") == [3, 3]
        assert await pool.get_attr("resets") == [1, 1]
    np.testing.assert_array_equal(part.rewards, [2.0] * 6)
    assert np.asarray(part.actions).tolist() == [np.asarray(action).tolist()] * 6


async def test_coroutine_is_the_mode_name_and_async_its_old_spelling() -> None:
    assert "coroutine" in worker_modes() and "async" not in worker_modes()
    async with aioenv.make_pool(AsyncCounter, 2, mode="coroutine") as pool:
        assert [worker.kind for worker in pool.workers] == ["coroutine"] * 2
        assert pool.workers[0].name.startswith("coroutine worker 0")
        pool.reset()
        assert len((await pool.get_batch(min_size=2)).states) == 2
    pool = aioenv.make_pool(AsyncCounter, 3, mode=["async", "coroutine", "thread"], force_sync=True)
    async with pool:
        assert [worker.kind for worker in pool.workers] == ["coroutine", "coroutine", "sync"]
    with pytest.raises(ValueError, match="'coroutine'"):
        aioenv.make_pool(Counter, 1, mode="fiber")

"""Running a function on chosen envs, in their workers: ``AioVectorEnv.apply`` and
``WorkerPool.apply``. The function gets each env as its factory built it (its outermost
wrapper), and the envs not chosen are not touched."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import Counter
from gymnasium.wrappers import TimeLimit

import aioenv


def make_wrapped() -> gymnasium.Env[Any, Any]:
    return TimeLimit(gymnasium.make("CartPole-v1").unwrapped, max_episode_steps=7)


def mark(env: Any, label: str, *, times: int = 1) -> tuple[str, str]:
    """Leave a mark on ``env``'s outermost wrapper; say which wrapper that was."""
    env.marks = [*getattr(env, "marks", []), label * times]
    return type(env).__name__, label


def marks(env: Any) -> list[str]:
    return list(getattr(env, "marks", []))


@pytest.mark.parametrize(
    "options",
    [{"mode": "inline"}, {"mode": "sync"}, {"mode": "process", "envs_per_worker": 2}],
    ids=["inline", "sync", "process-grouped"],
)
def test_apply_runs_on_the_chosen_envs_only_in_their_order(options: dict[str, Any]) -> None:
    with aioenv.AioVectorEnv([make_wrapped] * 4, **options) as envs:
        envs.reset(seed=0)
        assert envs.apply(mark, "a", env_ids=[-1, 1], times=2) == (
            ("TimeLimit", "a"),
            ("TimeLimit", "a"),
        )
        assert envs.apply(marks) == ([], ["aa"], [], ["aa"])
        assert envs.apply(mark, "b", env_ids=[2]) == (("TimeLimit", "b"),)
        assert envs.apply(marks, env_ids=[3, 2, 0]) == (["aa"], ["b"], [])
        # The envs step on as before.
        observations, *_ = envs.step(np.zeros(4, np.int64))
        assert observations.shape == (4, 4)
        with pytest.raises(IndexError, match="env index 4 is out of range for 4 envs"):
            envs.apply(marks, env_ids=[4])
        with pytest.raises(IndexError, match="env index -5"):
            envs.apply(marks, env_ids=[-5])


async def test_pool_apply_gives_each_worker_its_function_or_none() -> None:
    async with aioenv.make_pool(lambda: Counter(limit=9), 3, mode="thread") as pool:
        chosen = aioenv.PerWorker([mark, None, mark])
        assert await pool.apply(chosen, "x") == [("Counter", "x"), None, ("Counter", "x")]
        assert await pool.apply(marks) == [["x"], [], ["x"]]
        assert await pool.apply(marks, worker_ids=[1]) == [[]]


def divide(env: Any, by: int) -> float:
    return 1 / by


@pytest.mark.parametrize("mode", ["sync", "thread", "process", "async"])
async def test_pool_apply_of_a_function_that_raises_blames_the_function_not_the_env(
    mode: str,
) -> None:
    async with aioenv.make_pool(lambda: Counter(limit=9), 2, mode=mode) as pool:
        by = aioenv.PerWorker([1, 0])
        with pytest.raises(aioenv.EnvError) as raised:
            await pool.apply(divide, by)
        message = str(raised.value).splitlines()[0]
        assert " worker 1 (" in message, message
        assert message.endswith(
            "): the function applied raised ZeroDivisionError during apply: division by zero"
        ), message
        assert await pool.apply(divide, 2) == [0.5, 0.5]  # the envs are untouched

"""A deadline per phase: ``reset_timeout`` for resets beside ``step_timeout`` for steps, and
their sum for a step that also resets (autoreset), for every worker kind that times out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from envs import AsyncPaced, Paced

import aioenv

# Each test here is about what an event loop can change: it runs on every loop in make test.
pytestmark = pytest.mark.loops

KINDS = ["coroutine", "thread", "process"]


@pytest.fixture(autouse=True)
def released() -> Iterator[None]:
    """A step told to hang hangs until the test is done with it."""
    Paced.released = False
    yield
    Paced.released = True


def pool(kind: str, **options: Any) -> aioenv.WorkerPool[Any]:
    env = AsyncPaced if kind == "coroutine" else Paced
    return aioenv.make_pool(env, 1, mode=kind, **options)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_slow_reset_gets_reset_timeout_while_steps_keep_step_timeout(kind: str) -> None:
    async with pool(kind, step_timeout=1.0, reset_timeout=30.0) as envs:
        envs.reset()
        await envs.get_state()  # the start-up, under its own deadline
        envs.send_action(aioenv.Reset(options={"sleep": 1.5}), 0)
        state, _ = await envs.get_state()
        assert state.info["reset_took"] == 1.5  # past step_timeout, within reset_timeout
        envs.send_action({"sleep": 0.0}, 0)
        assert (await envs.get_state())[0].reward == 1.0
        envs.send_action({"hang": True}, 0)
        with pytest.raises(aioenv.WorkerTimeout, match=r"\(step\) ran") as caught:
            await envs.get_state()
        Paced.released = True  # a thread worker's abandoned step returns
        assert caught.value.timeout == 1.0


@pytest.mark.parametrize("kind", KINDS)
async def test_a_reset_past_reset_timeout_times_out_as_a_reset(kind: str) -> None:
    async with pool(kind, step_timeout=30.0, reset_timeout=1.0) as envs:
        envs.reset()
        await envs.get_state()
        envs.send_action({"sleep": 1.5}, 0)  # a slow step is fine: step_timeout is 30
        assert (await envs.get_state())[0].reward == 1.0
        envs.send_action(aioenv.Reset(options={"hang": True}), 0)
        with pytest.raises(aioenv.WorkerTimeout, match=r"\(reset\) ran") as caught:
            await envs.get_state()
        Paced.released = True  # a thread worker's abandoned step returns
        assert caught.value.timeout == 1.0


@pytest.mark.parametrize("kind", KINDS)
async def test_a_same_step_autoreset_gets_step_timeout_plus_reset_timeout(kind: str) -> None:
    # Each phase stays within its own deadline; together they take longer than either.
    async with pool(kind, step_timeout=2.5, reset_timeout=2.5, autoreset="same_step") as envs:
        envs.reset()
        await envs.get_state()
        envs.send_action({"sleep": 1.5, "end": True, "reset_sleep": 1.5}, 0)
        state, _ = await envs.get_state()
        assert state.terminated and state.info["reset_took"] == 1.5


async def test_the_step_after_an_episode_ended_gets_the_sum_under_next_step() -> None:
    async with pool("thread", step_timeout=1.0, reset_timeout=30.0, autoreset="next_step") as envs:
        envs.reset()
        await envs.get_state()
        envs.send_action({"end": True, "reset_sleep": 1.5}, 0)
        assert (await envs.get_state())[0].terminated
        envs.send_action({}, 0)  # ignored: the env resets, taking 1.5 s
        state, _ = await envs.get_state()
        assert state.info["reset_took"] == 1.5 and not state.terminated
        envs.send_action({"hang": True}, 0)  # an episode that goes on: a plain step
        with pytest.raises(aioenv.WorkerTimeout, match=r"\(step\) ran") as caught:
            await envs.get_state()
        Paced.released = True  # a thread worker's abandoned step returns
        assert caught.value.timeout == 1.0


def test_reset_timeout_and_restart_window_are_checked_before_any_worker_starts() -> None:
    for name, bad in (
        ("reset_timeout", 0),
        ("reset_timeout", -1.0),
        ("reset_timeout", "1"),
        ("restart_window", 0.0),
        ("restart_window", True),
    ):
        with pytest.raises(ValueError, match=f"{name} must be None or a number > 0"):
            aioenv.make_pool(Paced, 1, mode="thread", **{name: bad})


async def test_a_workers_own_reset_timeout_wins_over_the_pools() -> None:
    worker = aioenv.ThreadWorker(Paced, reset_timeout=30.0)
    async with aioenv.AsyncWorkerPool([worker], step_timeout=1.0, reset_timeout=1.0) as envs:
        envs.reset()
        await envs.get_state()
        envs.send_action(aioenv.Reset(options={"sleep": 1.5}), 0)
        assert (await envs.get_state())[0].info["reset_took"] == 1.5

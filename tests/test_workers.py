"""The worker interface, the same for every kind: send_action, get_state, aclose."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import Counter, Failing, FourTupleEnv, ObservationOnlyReset
from support import KINDS, WORKERS, worker_processes

import aioenv
from aioenv import CLOSE, RESET


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(kind: str, env: Any, **options: Any) -> aioenv.Worker[Any]:
    return WORKERS[kind](env, **options)


def test_sentinels_are_one_enum_and_not_strings() -> None:
    assert isinstance(RESET, aioenv.Command)
    assert isinstance(CLOSE, aioenv.Command)
    assert RESET is not CLOSE
    assert RESET != "reset"
    assert CLOSE != "close"


async def test_reset_reply_is_a_step_with_zero_reward(kind: str) -> None:
    async with make(kind, "CartPole-v1", seed=3) as worker:
        worker.send_action(RESET)
        step = await worker.get_state()
        assert isinstance(step, aioenv.Step)
        assert step.reward == 0.0
        assert step.terminated is False
        assert step.truncated is False
        assert not step.done
        assert step.observation.shape == (4,)
        assert isinstance(step.info, dict)


async def test_final_step_of_an_episode_is_returned_whole(kind: str) -> None:
    reference = gymnasium.make("CartPole-v1")
    expected_obs, _ = reference.reset(seed=11)
    async with make(kind, "CartPole-v1", seed=11) as worker:
        worker.send_action(RESET)
        step = await worker.get_state()
        np.testing.assert_array_equal(step.observation, expected_obs)
        while True:
            worker.send_action(1)
            step = await worker.get_state()
            expected = reference.step(1)
            np.testing.assert_array_equal(step.observation, expected[0])
            assert step.reward == expected[1]
            if step.done:
                break
        assert step.terminated is True
        assert step.reward == 1.0
        assert step.observation is not None and step.observation.shape == (4,)


async def test_array_and_dict_actions_are_never_compared_with_sentinels(kind: str) -> None:
    async with make(kind, Counter) as worker:
        worker.send_action(RESET)
        await worker.get_state()
        worker.send_action(np.array([[1, 2], [3, 4]]))
        assert (await worker.get_state())["total"] == 10
        worker.send_action({"a": 1})  # np.sum of a dict is not a number: an EnvError, not a crash
        with pytest.raises(aioenv.EnvError):
            await worker.get_state()
        worker.send_action(np.array([5]))
        assert (await worker.get_state())["total"] == 15


async def test_minimal_environment_protocol(kind: str) -> None:
    async with make(kind, lambda: Counter(limit=2), seed=5) as worker:
        worker.send_action(RESET)
        state = await worker.get_state()
        assert state["seed"] == 5
        worker.send_action(1)
        worker_state = await worker.get_state()
        assert worker_state == {**worker_state, "t": 1, "total": 1}


async def test_get_state_with_nothing_in_flight_raises_at_once(kind: str) -> None:
    async with make(kind, Counter) as worker:
        with pytest.raises(aioenv.NoActionInFlight, match="send_action"):
            await worker.get_state()
        worker.send_action(RESET)
        await worker.get_state()
        with pytest.raises(aioenv.NoActionInFlight):
            await worker.get_state()


async def test_second_action_before_state_taken_raises(kind: str) -> None:
    async with make(kind, Counter) as worker:
        worker.send_action(RESET)
        with pytest.raises(aioenv.StateNotTaken, match=f"{worker.kind} worker"):
            worker.send_action(1)
        with pytest.raises(aioenv.StateNotTaken):
            worker.send_action(RESET)
        state = await worker.get_state()
        assert state["t"] == 0  # the first request's answer, untouched


async def test_calls_after_aclose_raise_closed_error(kind: str) -> None:
    worker = make(kind, Counter)
    worker.send_action(RESET)
    await worker.get_state()
    await worker.aclose()
    await worker.aclose()  # idempotent
    with pytest.raises(aioenv.ClosedError):
        worker.send_action(1)
    with pytest.raises(aioenv.ClosedError):
        await worker.get_state()


async def test_close_sentinel_closes_the_worker(kind: str) -> None:
    worker = make(kind, Counter)
    worker.send_action(RESET)
    await worker.get_state()
    worker.send_action(CLOSE)
    assert worker.closed
    with pytest.raises(aioenv.ClosedError):
        worker.send_action(RESET)
    await worker.aclose()


async def test_close_with_a_state_not_taken_is_refused(kind: str) -> None:
    async with make(kind, Counter) as worker:
        worker.send_action(RESET)
        with pytest.raises(aioenv.StateNotTaken, match="aclose"):
            worker.send_action(CLOSE)
        assert (await worker.get_state())["t"] == 0


@pytest.mark.parametrize("where", ["init", "reset", "step"])
async def test_env_exception_raises_env_error_with_remote_traceback(kind: str, where: str) -> None:
    async with make(kind, lambda: Failing(where, "kaboom 42")) as worker:
        worker.send_action(RESET)
        if where != "reset" and where != "init":
            await worker.get_state()
            worker.send_action(13)
        with pytest.raises(aioenv.EnvError) as caught:
            await worker.get_state()
        error = caught.value
        assert "kaboom 42" in str(error)
        assert error.exception_type == "ValueError"
        assert "raise ValueError(message)" in error.remote_traceback or (
            "raise ValueError(self.message)" in error.remote_traceback
        )
        assert "Traceback" in error.remote_traceback
        assert error.during == {"init": "construction", "reset": "reset", "step": "step"}[where]
        assert isinstance(error, aioenv.AioEnvError)
        # The worker survives its env's exception and answers the next request.
        worker.send_action(RESET)
        if where == "step":
            assert (await worker.get_state())["t"] == 0
        else:
            with pytest.raises(aioenv.EnvError, match="kaboom 42"):
                await worker.get_state()


async def test_step_returning_a_four_tuple_is_a_clear_error(kind: str) -> None:
    async with make(kind, FourTupleEnv) as worker:
        worker.send_action(RESET)
        await worker.get_state()
        worker.send_action(0)
        with pytest.raises(aioenv.EnvError, match="4-tuple.*5-tuple"):
            await worker.get_state()


async def test_reset_returning_the_observation_alone_is_a_clear_error(kind: str) -> None:
    async with make(kind, ObservationOnlyReset) as worker:
        worker.send_action(RESET)
        with pytest.raises(aioenv.EnvError, match=r"reset\(\) returned a ndarray.*pair"):
            await worker.get_state()


async def test_factory_returning_a_non_env_is_a_clear_error(kind: str) -> None:
    async with make(kind, lambda: 42) as worker:
        worker.send_action(RESET)
        with pytest.raises(
            aioenv.EnvError, match="neither a gymnasium.Env nor an aioenv.Environment"
        ):
            await worker.get_state()


async def test_a_factory_of_a_non_env_is_refused_without_a_restart(kind: str) -> None:
    """The refusal is the caller's error, raised at once: it was taken for the env's
    failure, so under restart="on_failure" the env was built again until its restart
    budget was spent (11 builds) before the error came and the worker was given up on."""
    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        lambda: 42, 1, mode=kind, restart="on_failure", on_failure=failures.append
    ) as pool:
        pool.reset()
        with pytest.raises(aioenv.EnvError, match="worker 0 ") as raised:
            await pool.get_state()
        assert pool.restarts == 0 and not failures and not pool.removed
        assert "the env source raised NotAnEnvironment during construction" in str(raised.value)


async def test_exception_cause_is_the_original_for_in_process_kinds() -> None:
    for worker in (
        aioenv.SyncWorker(lambda: Failing("reset")),
        aioenv.ThreadWorker(lambda: Failing("reset")),
    ):
        async with worker:
            worker.send_action(RESET)
            with pytest.raises(aioenv.EnvError) as caught:
                await worker.get_state()
            assert isinstance(caught.value.__cause__, ValueError)


def test_bad_arguments_are_rejected() -> None:
    for seed in (-1, True, 1.5, "3"):
        with pytest.raises(ValueError, match="seed must be a non-negative int or None"):
            aioenv.SyncWorker(Counter, seed=seed)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cleanup_time"):
        aioenv.SyncWorker(Counter, cleanup_time=-2)


async def test_seed_zero_is_a_seed_like_any_other() -> None:
    async with aioenv.SyncWorker(Counter, seed=0) as worker:
        worker.send_action(RESET)
        state = await worker.get_state()
        assert state["seed"] == 0


async def test_thread_worker_thread_is_gone_after_aclose() -> None:
    worker = aioenv.ThreadWorker(Counter)
    assert any(t.name.startswith("aioenv-") for t in threading.enumerate())
    worker.send_action(RESET)
    await worker.get_state()
    await worker.aclose()
    assert not any(t.name.startswith("aioenv-") for t in threading.enumerate())


async def test_process_worker_process_is_gone_after_aclose() -> None:
    worker = aioenv.ProcessWorker(Counter)
    worker.send_action(RESET)
    state = await worker.get_state()
    assert state["pid"] == worker.pid
    assert worker.pid in worker_processes()
    await worker.aclose()
    assert worker.pid not in worker_processes()
    assert worker.exitcode == 0


def test_run_uses_uvloop_and_returns_the_result() -> None:
    import uvloop

    async def main() -> str:
        loop = asyncio.get_running_loop()
        async with aioenv.make_pool("CartPole-v1", 2, mode="process") as pool:
            batch = await pool.reset_all(seed=0)
        return f"{type(loop).__module__}:{len(batch)}"

    assert aioenv.run(main()) == f"{uvloop.Loop.__module__}:2"

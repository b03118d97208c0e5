"""Coroutine envs (``mode="coroutine"``, old spelling ``"async"``): async reset/step run as
tasks on the event loop."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import gymnasium
import numpy as np
import pytest
from envs import AsyncCartPole, AsyncCounter, Counter
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from support import states_or_errors

import aioenv
from aioenv import RESET

ROOT = Path(__file__).resolve().parent.parent


class Built:
    """A factory of :class:`AsyncCounter` that keeps every env it built, to look at later."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.envs: list[AsyncCounter] = []

    def __call__(self) -> AsyncCounter:
        env = AsyncCounter(**self.options)
        self.envs.append(env)
        return env


def aioenv_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("aioenv-")]


async def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await asyncio.sleep(0.001)


async def test_200_envs_awaiting_one_event_all_answer_without_threads() -> None:
    threads_before = threading.active_count()
    gate = asyncio.Event()
    async with aioenv.make_pool(lambda: AsyncCounter(gate=gate), 200, mode="async") as pool:
        pool.reset()
        await pool.get_batch(min_size=200)
        for worker_id in range(200):
            pool.send_action(1, worker_id)
        # Every step is now a task awaiting the same event: none can have answered.
        assert len(await pool.get_batch(min_size=1, timeout=0)) == 0
        assert threading.active_count() == threads_before
        gate.set()
        batch = await pool.get_batch(min_size=200)
        assert sorted(batch.worker_ids) == list(range(200))
        assert all(state["t"] == 1 and state["total"] == 1 for state in batch.states)
        assert threading.active_count() == threads_before


async def test_seeds_give_the_same_draws_as_sync_workers_of_the_same_env() -> None:
    draws: dict[str, list[float]] = {}
    for mode, env in (("async", AsyncCounter), ("sync", Counter)):
        async with aioenv.make_pool(env, 3, mode=mode, seed=7) as pool:
            pool.reset()
            first = (await pool.get_batch(min_size=3)).sorted().states
            for worker_id in range(3):
                pool.send_action(2, worker_id)
            later = (await pool.get_batch(min_size=3)).sorted().states
            draws[mode] = [s["draw"] for s in first + later]
    assert draws["async"] == draws["sync"]
    assert len(set(draws["async"])) == 6


async def test_a_plain_gymnasium_env_resets_and_steps_as_in_a_sync_worker() -> None:
    """A coroutine worker steps and resets a plain gymnasium env in line (it blocks the
    loop anyway): plain, seeded and optioned resets and episodes that end answer as a sync
    worker's do."""
    requests: list[Any] = [RESET, 1, 0, aioenv.Reset(seed=5), *[1] * 40]
    requests += [aioenv.Reset(seed=6, options={"low": -0.01, "high": 0.01}), 0, RESET, 1]
    seen: dict[str, list[Any]] = {}
    for mode in ("coroutine", "sync"):
        async with aioenv.make_pool("CartPole-v1", 1, mode=mode, seed=3) as pool:
            states = seen[mode] = []
            for request in requests:
                if (
                    states
                    and states[-1].done
                    and not isinstance(request, (type(RESET), aioenv.Reset))
                ):
                    request = RESET
                pool.send_action(request, 0)
                state, _ = await pool.get_state()  # type: ignore[misc]
                states.append(state)
    assert any(state.done for state in seen["sync"])  # an episode ended on the way
    for got, want in zip(seen["coroutine"], seen["sync"], strict=True):
        assert np.array_equal(got.observation, want.observation)
        assert (got.reward, got.done, got.info) == (want.reward, want.done, want.info)


@pytest.mark.parametrize("autoreset", ["next_step", "same_step", "disabled"])
async def test_async_gymnasium_env_matches_sync_vector_env(autoreset: str) -> None:
    modes = {
        "next_step": AutoresetMode.NEXT_STEP,
        "same_step": AutoresetMode.SAME_STEP,
        "disabled": AutoresetMode.DISABLED,
    }
    reference = SyncVectorEnv(
        [lambda: gymnasium.make("CartPole-v1")] * 2, autoreset_mode=modes[autoreset]
    )
    rng = np.random.default_rng(0)
    async with aioenv.make_pool(AsyncCartPole, 2, mode="async", autoreset=autoreset) as pool:
        expected, _ = reference.reset(seed=5)
        pool.reset(seed=5)
        steps = (await pool.get_batch(min_size=2)).sorted().states
        assert pool.workers[0].observation_space == reference.single_observation_space
        np.testing.assert_array_equal(np.stack([s.observation for s in steps]), expected)
        ended = 0
        for _ in range(60):
            actions = rng.integers(0, 2, size=2)
            obs, rewards, terminated, truncated, _ = reference.step(actions)
            for worker_id in range(2):
                pool.send_action(int(actions[worker_id]), worker_id)
            steps = (await pool.get_batch(min_size=2)).sorted().states
            np.testing.assert_array_equal(np.stack([s.observation for s in steps]), obs)
            assert [s.reward for s in steps] == list(rewards)
            assert [s.terminated for s in steps] == list(terminated)
            for step, done in zip(steps, terminated | truncated, strict=True):
                if done:
                    ended += 1
                    info = step.final_info if autoreset == "same_step" else step.info
                    assert info is not None and "episode" not in info  # aioenv adds no key
            if autoreset == "disabled" and any(terminated | truncated):
                break
        assert ended >= 1
        stats = pool.episode_stats()  # counted by the pool from the states it handed out
        assert sum(s.episodes for s in stats) == ended
        assert all(s.mean_length >= 1 for s in stats if s.episodes)
    reference.close()


@pytest.mark.parametrize("where", ["reset", "step"])
async def test_env_exception_is_an_env_error_with_traceback(where: str) -> None:
    class FailingReset(AsyncCounter):
        async def reset(self, seed: int | None = None) -> dict[str, Any]:
            await asyncio.sleep(0)
            raise ValueError("async reset failed")

    env = FailingReset if where == "reset" else (lambda: AsyncCounter(fail_on=13))
    async with aioenv.AsyncEnvWorker(env) as worker:
        worker.send_action(RESET)
        if where == "step":
            await worker.get_state()
            worker.send_action(13)
        with pytest.raises(aioenv.EnvError) as caught:
            await worker.get_state()
        error = caught.value
        assert f"async {where} failed" in str(error)
        assert error.during == where and error.exception_type == "ValueError"
        assert "Traceback" in error.remote_traceback and "raise ValueError" in (
            error.remote_traceback
        )
        assert "coroutine worker" in str(error)
        if where == "step":  # the worker survives its env's exception
            worker.send_action(1)
            assert (await worker.get_state())["t"] == 1


@pytest.mark.loops
async def test_step_timeout_cancels_the_step_and_closes_the_env() -> None:
    built = Built(gate=asyncio.Event())  # never set: every step hangs
    async with aioenv.make_pool(built, 2, mode="async", step_timeout=0.2) as pool:
        pool.reset()
        await pool.get_batch(min_size=2)
        pool.send_action(1, 0)
        with pytest.raises(aioenv.WorkerTimeout, match="cancelled") as caught:
            await pool.get_state()
        assert caught.value.worker_id == 0
        await wait_for(lambda: built.envs[0].closed)
        assert built.envs[0].cancelled and not built.envs[1].cancelled
        with pytest.raises(aioenv.WorkerRemoved) as removed:  # it failed for good
            pool.send_action(1, 0)
        assert removed.value.__cause__ is caught.value


async def test_timed_out_env_is_restarted_with_a_fresh_env() -> None:
    gate = asyncio.Event()
    built = Built(gates={1: gate})
    async with aioenv.make_pool(
        built, 1, mode="async", seed=3, step_timeout=0.2, restart="on_failure"
    ) as pool:
        pool.reset()
        await pool.get_state()
        pool.send_action(1, 0)  # hangs on the gate, past its deadline
        state, _ = await pool.get_state()  # type: ignore[misc]
        assert state["t"] == 0  # the fresh env's reset answers the step that timed out
        assert pool.restarts == 1 and len(built.envs) == 2
        assert built.envs[0].cancelled and built.envs[0].closed
        pool.send_action(2, 0)
        assert (await pool.get_state())[0]["t"] == 1  # type: ignore[index]


async def test_env_that_raised_is_closed_and_rebuilt_on_restart() -> None:
    built = Built(fail_on=13)
    async with aioenv.make_pool(built, 1, mode="async", seed=5, restart="on_failure") as pool:
        pool.reset()
        await pool.get_state()
        pool.send_action(13, 0)
        state, _ = await pool.get_state()  # type: ignore[misc]
        assert state["t"] == 0  # the rebuilt env's first reset answers in place of the step
        assert pool.restarts == 1 and len(built.envs) == 2
        await wait_for(lambda: built.envs[0].closed)
        assert not built.envs[0].cancelled  # it raised: it was closed, not cancelled
        pool.send_action(2, 0)
        assert (await pool.get_state())[0]["total"] == 2  # type: ignore[index]


@pytest.mark.loops
async def test_a_close_that_hangs_is_cancelled_after_cleanup_time() -> None:
    closing = asyncio.Event()

    class HangingClose(AsyncCounter):
        async def close(self) -> None:
            closing.set()
            await asyncio.Event().wait()  # never set

    worker = aioenv.AsyncEnvWorker(HangingClose, cleanup_time=0.1)
    worker.send_action(RESET)
    await worker.get_state()
    with anyio.fail_after(20):  # cleanup_time, then the cancellation: far under this
        await worker.aclose()
    assert closing.is_set() and aioenv_tasks() == []


@pytest.mark.loops
async def test_closing_the_pool_cancels_steps_in_flight_and_leaves_no_task() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    built = Built(gate=asyncio.Event())
    try:
        started = loop.time()
        with anyio.CancelScope() as scope:
            # A close that waited for the steps instead of cancelling them would take the
            # whole cleanup_time (the steps never end by themselves).
            async with aioenv.make_pool(built, 5, mode="async", cleanup_time=30) as pool:
                pool.reset()
                await pool.get_batch(min_size=5)
                for worker_id in range(5):
                    pool.send_action(1, worker_id)
                await wait_for(lambda: len(aioenv_tasks()) == 5)
                scope.cancel()
                await pool.get_state()
                pytest.fail("cancelled: never reached")
        assert scope.cancel_called and loop.time() - started < 20
        assert all(env.cancelled and env.closed for env in built.envs)
        assert aioenv_tasks() == []
        del pool
        gc.collect()
        await asyncio.sleep(0)
        assert reported == []
    finally:
        loop.set_exception_handler(None)


async def test_call_get_attr_set_attr_await_coroutine_methods() -> None:
    async with aioenv.make_pool(AsyncCounter, 3, mode="async") as pool:
        assert await pool.call("add", 2, b=3) == [5, 5, 5]
        assert await pool.get_attr("limit") == [5, 5, 5]
        await pool.set_attr("limit", [7, 8, 9])
        assert await pool.get_attr("limit") == [7, 8, 9]
        with pytest.raises(aioenv.EnvError, match="async method exploded") as caught:
            await pool.call("explode")
        assert caught.value.exception_type == "RuntimeError"


async def test_async_gymnasium_env_attributes_are_the_wrapped_envs() -> None:
    async with aioenv.make_pool(AsyncCartPole, 2, mode="async") as pool:
        assert await pool.get_attr("label") == ["async cartpole"] * 2
        pool.reset(seed=1)
        states = (await pool.get_batch(min_size=2)).states
        assert all(isinstance(s, aioenv.Step) and s.reward == 0.0 for s in states)


async def test_force_sync_keeps_async_workers_and_gives_send_order() -> None:
    gates = {k: asyncio.Event() for k in range(3)}
    finished: list[int] = []
    pool = aioenv.make_pool(
        lambda: AsyncCounter(gates=gates, finished=finished),
        3,
        mode=["async", "async", "thread"],
        force_sync=True,
    )
    assert isinstance(pool, aioenv.SyncWorkerPool)
    assert [w.kind for w in pool.workers] == ["coroutine", "coroutine", "sync"]
    await pool.aclose()
    pool = aioenv.make_pool(
        lambda: AsyncCounter(gates=gates, finished=finished), 3, mode="async", force_sync=True
    )
    async with pool:
        pool.reset()
        await pool.get_batch(min_size=3)
        for worker_id in range(3):
            pool.send_action(worker_id, worker_id)
        gates[2].set()
        await wait_for(lambda: finished == [2])
        gates[1].set()
        await wait_for(lambda: finished == [2, 1])
        gates[0].set()
        order = [(await pool.get_state())[1] for _ in range(3)]  # type: ignore[index]
        assert finished == [2, 1, 0] and order == [0, 1, 2]


async def test_mixed_pool_hands_out_whichever_kind_is_ready_first() -> None:
    gate = asyncio.Event()
    workers: list[aioenv.Worker[Any]] = [
        aioenv.AsyncEnvWorker(lambda: AsyncCounter(gate=gate)),
        aioenv.ThreadWorker(Counter),
        aioenv.ProcessWorker(Counter),
        aioenv.SyncWorker(Counter),
    ]
    async with aioenv.AsyncWorkerPool(workers) as pool:
        pool.reset()
        await pool.get_batch(min_size=4)
        for worker_id in range(4):
            pool.send_action(3, worker_id)
        first = await pool.get_batch(min_size=3)
        assert sorted(first.worker_ids) == [1, 2, 3]  # the async env still awaits its gate
        gate.set()
        state, worker_id = await pool.get_state()  # type: ignore[misc]
        assert worker_id == 0 and state["total"] == 3


async def test_sync_kinds_refuse_coroutine_envs_with_a_clear_error() -> None:
    async with aioenv.make_pool(AsyncCounter, 2, mode=["thread", "sync"]) as pool:
        pool.reset()
        errors = await states_or_errors(pool, 2, aioenv.EnvError)
        for error in errors.values():
            assert isinstance(error, aioenv.EnvError)
            assert "mode='coroutine'" in str(error)


class _PlainReset(AsyncCartPole):
    """A coroutine env whose reset is a plain def: a coroutine env's reset is async."""

    def reset(  # type: ignore[override]
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return self.env.reset(seed=seed, options=options)


async def test_a_coroutine_env_whose_reset_is_not_async_is_refused_saying_so() -> None:
    refused = r"_PlainReset, whose step\(\) is async def but whose reset\(\) is not"
    async with aioenv.make_pool(_PlainReset, 1, mode="coroutine") as pool:
        pool.reset()
        with pytest.raises(aioenv.EnvError, match=refused):
            await pool.get_state()
    with pytest.raises(TypeError, match=refused):
        aioenv.AioVectorEnv([_PlainReset] * 2)


@pytest.mark.parametrize("force_sync", [False, True])
def test_a_pool_with_a_coroutine_worker_refuses_envs_per_worker(force_sync: bool) -> None:
    # A coroutine worker steps one env (one task): envs_per_worker gives every worker k.
    with pytest.raises(TypeError, match="coroutine workers step one env each.*envs_per_worker"):
        aioenv.make_pool(
            Counter, 2, mode=["process", "coroutine"], envs_per_worker=2, force_sync=force_sync
        )


def test_unknown_mode_lists_async() -> None:
    with pytest.raises(ValueError, match="'async'"):
        aioenv.make_pool(Counter, 1, mode="fiber")


def test_example_runs_against_its_local_server() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "async_env.py"),
            "--envs",
            "8",
            "--seconds",
            "0.5",
        ],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "episodes finished:" in result.stdout


class _Gated(AsyncCartPole):
    """Steps once ``gate`` is set."""

    def __init__(self, gate: asyncio.Event) -> None:
        super().__init__()
        self.gate = gate
        self.entered = 0

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.entered += 1
        await self.gate.wait()
        return await super().step(action)


async def test_an_async_gymnasium_envs_step_is_awaited_by_the_workers_task_itself() -> None:
    """Nothing stands between the worker's task and the env's step coroutine: every
    coroutine between them would be passed through on each resumption of the env."""
    gate = asyncio.Event()
    envs: list[_Gated] = []

    def build() -> _Gated:
        envs.append(_Gated(gate))
        return envs[-1]

    async with aioenv.make_pool(build, 2, mode="coroutine", seed=0) as pool:
        pool.reset()
        await pool.get_batch(min_size=2)
        for worker_id in range(2):
            pool.send_action(0, worker_id)
        await wait_for(lambda: all(env.entered for env in envs))
        awaited = [task.get_coro().cr_await for task in aioenv_tasks()]  # type: ignore[union-attr]
        gate.set()
        await pool.get_batch(min_size=2)
    assert [getattr(coroutine, "cr_code", None) for coroutine in awaited] == [
        _Gated.step.__code__
    ] * 2


class _Odd(AsyncCartPole):
    """Steps as CartPole does, except as told: raise, or return the wrong shape."""

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if action == "raise":
            raise ValueError("the step failed")
        if action == "pair":
            return (1, 2)  # type: ignore[return-value]
        return await super().step(action)


async def test_an_async_gymnasium_envs_step_answers_errors_truncation_and_autoreset() -> None:
    """A step of an async gymnasium env: the env's exception and a result of the wrong
    shape are the step's EnvError (the worker goes on), the time limit truncates, and
    same-step autoreset carries the next episode's first observation."""
    async with aioenv.make_pool(
        _Odd, 1, mode="coroutine", seed=3, max_episode_steps=3, autoreset="same_step"
    ) as pool:
        pool.reset()
        first, _ = await pool.get_state()  # type: ignore[misc]
        for action, expected in (("raise", "the step failed"), ("pair", "a 2-tuple")):
            pool.send_action(action, 0)
            with pytest.raises(aioenv.EnvError) as caught:
                await pool.get_state()
            assert caught.value.during == "step" and expected in str(caught.value)
        steps = []
        for _ in range(3):
            pool.send_action(0, 0)
            steps.append((await pool.get_state())[0])  # type: ignore[index]
    assert [step.truncated for step in steps] == [False, False, True]
    assert steps[-1].final_observation is not None
    assert not np.array_equal(steps[-1].observation, steps[-1].final_observation)
    assert first.observation.shape == (4,)

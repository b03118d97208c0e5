"""Pools under trio: run on a private asyncio loop (the bridge), awaited from trio tasks.

The pool tests over the ``mode`` fixture (and those marked ``trio``) run on trio as well
(see conftest); these cover what is trio's own: leaving nothing behind when the trio run
is cancelled or fails mid-call, the errors of a pool used without its bridge, coroutine
envs, methods forwarded by name, and the synchronous vector env inside a trio run.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import numpy as np
import pytest
import trio
import trio.lowlevel
import trio.testing
from envs import AsyncCounter, Counter, Gated

import aioenv

# Each test here is about what an event loop can change: it runs on every loop in make test.
pytestmark = pytest.mark.loops

BRIDGE_THREAD = "aioenv-trio-bridge"  # the thread running a pool's asyncio loop under trio


def bridge_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == BRIDGE_THREAD]


def test_process_pool_in_a_trio_run_that_fails_mid_call_leaves_nothing(gate: str) -> None:
    seen: dict[str, Any] = {}

    async def wait_for_the_gated_step(pool: Any) -> None:
        try:
            await pool.get_state()  # the env's step blocks until the gate opens: never
        except trio.Cancelled:
            seen["waiter cancelled"] = True
            raise

    async def main() -> None:
        make = aioenv.make_pool
        async with make(lambda: Gated(gate), 2, mode="process", cleanup_time=0.5) as pool:
            seen["bridges"] = len(bridge_threads())
            pool.reset()
            assert len(await pool.get_batch(min_size=2)) == 2
            pool.send_action(1, 0)
            with trio.move_on_after(0.1) as scope:
                await pool.get_state()
            seen["first call cancelled"] = scope.cancelled_caught
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_the_gated_step, pool)
                await trio.testing.wait_all_tasks_blocked()  # it waits in get_state
                raise ValueError("the trio run fails")

    with pytest.raises(Exception) as caught:  # noqa: PT011 (an ExceptionGroup: 3.11+ only)
        trio.run(main)
    assert caught.group_contains(ValueError, match="the trio run fails")
    assert not caught.group_contains(RuntimeError)  # the pool itself raised nothing
    assert seen == {"bridges": 1, "first call cancelled": True, "waiter cancelled": True}
    assert not bridge_threads()  # and no_leaks: no worker process, no aioenv thread


def test_a_pool_made_outside_trio_errors_clearly_without_its_bridge_and_closes() -> None:
    pool = aioenv.make_pool(Counter, 2, mode="process")

    async def main() -> None:
        pool.reset()  # sent: nothing needs a loop yet
        with pytest.raises(RuntimeError, match=r"under trio use the object that `async with pool"):
            await pool.get_state(timeout=1.0)
        with pytest.raises(RuntimeError, match=r"under trio use the object"):
            await pool.get_batch()
        await pool.aclose()  # through a bridge of its own: nothing is left behind

    trio.run(main)
    assert not bridge_threads()


def test_a_wait_with_a_timeout_on_the_pool_itself_under_trio_says_to_use_the_bridge() -> None:
    pool = aioenv.make_pool(Counter, 2, mode="process")

    async def main() -> None:
        pool.reset()
        with pytest.raises(RuntimeError, match=r"under trio use the object that `async with pool"):
            await pool.get_batch(timeout=1.0)
        with pytest.raises(RuntimeError, match=r"under trio use the object"):
            await pool.get_batch(min_size=2, timeout=0)
        await pool.aclose()

    trio.run(main)
    assert not bridge_threads()


def test_a_pool_made_outside_trio_works_in_it_through_async_with() -> None:
    pool = aioenv.make_pool(Counter, 3, mode=["process", "thread", "sync"], seed=5)

    async def main() -> list[int]:
        async with pool as bridged:
            assert isinstance(bridged, aioenv.AsyncWorkerPool)
            assert len(bridged) == 3
            batch = await bridged.reset_all()
            return [state["seed"] for state in batch.states]

    assert trio.run(main) == aioenv.worker_seeds(5, 3)
    assert pool.workers[0].closed


class Extended(aioenv.AsyncWorkerPool[Any]):
    """A pool with methods the bridge has never heard of (as later pool methods are)."""

    async def step_all(self, action: int) -> list[int]:
        for worker_id in self.active_ids:
            self.send_action(action, worker_id)
        batch = await self.get_batch(min_size=len(self))
        return sorted(state["total"] for state in batch.states)

    def first_env_name(self) -> str:
        return self.workers[0].env_name


def test_methods_are_forwarded_by_name_so_new_ones_work_under_trio() -> None:
    async def main() -> tuple[list[int], str]:
        async with Extended([aioenv.ThreadWorker(Counter) for _ in range(2)]) as pool:
            await pool.reset_all()
            await pool.step_all(2)
            return await pool.step_all(3), pool.first_env_name()

    assert trio.run(main) == ([5, 5], "Counter")


class AnyioCounter(Counter):
    """A coroutine env written with anyio: it works on any backend. Action -1 hangs."""

    async def reset(self, seed: int | None = None) -> dict[str, Any]:  # type: ignore[override]
        await anyio.lowlevel.checkpoint()
        return Counter.reset(self, seed)

    async def step(self, action: Any) -> dict[str, Any]:  # type: ignore[override]
        if action == -1:
            await anyio.sleep_forever()
        await anyio.sleep(0.001)
        return Counter.step(self, action)


class TrioCounter(Counter):
    """A coroutine env written with trio's own primitives: under trio its coroutines run in
    the trio run. Action -1 hangs; its async close records that it ran in trio."""

    closed_in_trio: ClassVar[list[bool]] = []

    async def reset(self, seed: int | None = None) -> dict[str, Any]:  # type: ignore[override]
        await trio.lowlevel.checkpoint()
        return Counter.reset(self, seed)

    async def step(self, action: Any) -> dict[str, Any]:  # type: ignore[override]
        if action == -1:
            await trio.sleep_forever()
        await trio.sleep(0.001)
        return Counter.step(self, action)

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()
        TrioCounter.closed_in_trio.append(trio.lowlevel.in_trio_run())


def test_anyio_coroutine_envs_run_under_trio_with_step_timeout() -> None:
    async def main() -> None:
        async with aioenv.make_pool(AnyioCounter, 3, mode="async", step_timeout=0.3) as pool:
            await pool.reset_all()
            pool.send_action(2, 0)
            pool.send_action(-1, 1)
            pool.send_action(4, 2)
            states: dict[int, Any] = {}
            for _ in range(3):
                try:
                    state, worker_id = await pool.get_state()
                    states[worker_id] = state["total"]
                except aioenv.WorkerTimeout as error:
                    states[error.worker_id] = "timed out"
            assert states == {0: 2, 1: "timed out", 2: 4}
            assert await pool.call("terminated", {"t": 9}, worker_ids=[0, 2]) == [True, True]

    trio.run(main)


def test_coroutine_envs_written_with_trio_run_in_the_trio_run() -> None:
    """Steps, a step past ``step_timeout`` (its trio task cancelled, the env closed in trio
    and rebuilt), a coroutine method through ``call``, and closing a step in flight."""
    TrioCounter.closed_in_trio.clear()

    async def main() -> None:
        async with aioenv.make_pool(
            TrioCounter, 3, mode="async", step_timeout=0.3, restart="on_failure", seed=1
        ) as pool:
            await pool.reset_all()
            pool.send_action(2, 0)
            pool.send_action(-1, 1)
            pool.send_action(4, 2)
            states: dict[int, Any] = {}
            for _ in range(3):
                state, worker_id = await pool.get_state()
                states[worker_id] = state["total"]
            assert states == {0: 2, 1: 0, 2: 4}  # worker 1 timed out and was rebuilt
            assert pool.restarts == 1
            assert await pool.call("terminated", {"t": 9}) == [True, True, True]
            pool.send_action(-1, 0)  # in flight when the pool closes: cancelled, closed

    trio.run(main)
    assert TrioCounter.closed_in_trio == [True] * 4  # the timed-out env's close, and 3 more


async def test_a_coroutine_env_using_trio_on_asyncio_fails_with_an_env_error_saying_what_to_do() -> (
    None
):
    async with aioenv.make_pool(TrioCounter, 1, mode="async") as pool:
        pool.reset()
        with pytest.raises(aioenv.EnvError, match="coroutine worker 0") as caught:
            await pool.get_state()
        message = str(caught.value)  # the worker's traceback shows the trio call
        assert "in reset" in message and f"{Path(trio.__file__).parent}" in message
        assert "needs the pool run under trio" in caught.value.args[0]


def test_a_coroutine_env_using_asyncio_under_trio_fails_with_an_env_error_saying_what_to_do() -> (
    None
):
    async def main() -> None:
        async with aioenv.make_pool(AsyncCounter, 1, mode="async") as pool:
            pool.reset()
            with pytest.raises(aioenv.EnvError, match="coroutine worker 0") as caught:
                await pool.get_state()
            assert "env that calls asyncio needs the pool run on asyncio" in caught.value.args[0]

    trio.run(main)


@pytest.mark.parametrize("mode", ["sync", "process"])
def test_aio_vector_env_works_from_sync_code_inside_a_trio_run(mode: str) -> None:
    async def main() -> tuple[Any, Any]:
        with aioenv.AioVectorEnv("CartPole-v1", 2, mode=mode) as env:
            observations, _ = env.reset(seed=3)
            _, rewards, *_ = env.step(np.array([0, 1]))
        return observations, rewards

    observations, rewards = trio.run(main)
    assert observations.shape == (2, 4)
    assert rewards.tolist() == [1.0, 1.0]
    assert not bridge_threads()

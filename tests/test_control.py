"""Remote control (call, get_attr, set_attr, render), pause/resume, seeds, and the checks
a pool makes on spaces and actions: for every worker kind and a mixed pool."""

from __future__ import annotations

import asyncio
import functools
import gc
from typing import Any

import anyio
import gymnasium
import numpy as np
import pytest
from envs import AsyncBreakable, Breakable, Counter, Failing, Gated, Painted, open_gate
from support import WORKERS, a_failed_rebuild_keeps_spaces, modes

import aioenv
from aioenv import RESET


async def test_call_get_attr_set_attr_on_gymnasium_envs(mode: Any) -> None:
    async with aioenv.make_pool("CartPole-v1", 3, mode=modes(mode, 3)) as pool:
        assert await pool.get_attr("gravity") == [9.8, 9.8, 9.8]
        await pool.set_attr("gravity", [1.0, 2.0, 3.0])
        assert await pool.get_attr("gravity") == [1.0, 2.0, 3.0]
        await pool.set_attr("gravity", 4.0, worker_ids=[1])
        assert await pool.get_attr("gravity", worker_ids=[1, 0]) == [4.0, 1.0]
        spaces = await pool.call("action_space")  # not callable: its value
        assert spaces == [gymnasium.spaces.Discrete(2)] * 3
        pool.reset(seed=0)
        await pool.get_batch(min_size=3)
        states = await pool.call("state", worker_ids=[2])
        assert len(states) == 1
        assert np.asarray(states[0]).shape == (4,)


async def test_call_methods_with_arguments_on_protocol_envs(mode: Any) -> None:
    async with aioenv.make_pool(lambda: Counter(limit=9), 2, mode=modes(mode, 2)) as pool:
        assert await pool.call("terminated", {"t": 9}) == [True, True]
        assert await pool.call("terminated", state={"t": 1}) == [False, False]
        assert await pool.get_attr("limit") == [9, 9]


async def test_call_errors_name_the_worker(mode: Any) -> None:
    async with aioenv.make_pool("CartPole-v1", 2, mode=modes(mode, 2)) as pool:
        with pytest.raises(aioenv.EnvError, match=r"worker 0 .*no_such_method") as caught:
            await pool.call("no_such_method")
        assert caught.value.worker_id == 0
        with pytest.raises(aioenv.UnknownWorker):
            await pool.get_attr("gravity", worker_ids=[5])


@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_call_waits_for_the_step_in_flight_and_never_steals_its_state(
    kind: str, gate: str
) -> None:
    worker = {"thread": aioenv.ThreadWorker, "process": aioenv.ProcessWorker}[kind]
    async with aioenv.AsyncWorkerPool([worker(lambda: Gated(gate))]) as pool:
        pool.reset()
        await pool.get_state()
        pool.send_action(5, 0)  # blocked until the gate opens
        results: list[Any] = []
        async with anyio.create_task_group() as group:

            async def ask() -> None:
                results.append(await pool.get_attr("total"))

            group.start_soon(ask)
            # That the call is not answered is watched for a bounded time, 0.1 s: one that
            # did not wait behind the step would be answered in a round trip (microseconds
            # for a thread, a millisecond or so for a process), many times over in 0.1 s.
            await anyio.sleep(0.1)
            assert results == []  # the call waits behind the step
            open_gate(gate)
        assert results == [[5]]  # answered after the step ran
        state, worker_id = await pool.get_state()  # type: ignore[misc]
        assert (worker_id, state["total"]) == (0, 5)  # the step's state is still there


@pytest.mark.parametrize("kind", ["sync", "thread", "process", "async"])
async def test_a_call_while_the_env_awaits_its_restart_raises_at_once_and_works_after_it(
    kind: str,
) -> None:
    # The failed env was dropped and its new one starts with the worker's next request:
    # a call meanwhile has no env to reach. It raises at once, naming the worker (it hung
    # for good where the request went to the dropped env, or reached a stray rebuild).
    env = AsyncBreakable if kind == "async" else Breakable
    async with aioenv.make_pool(env, 2, mode=kind, restart="on_failure") as pool:
        await pool.reset_all()
        pool.send_action(1, 0)  # raises in the env: its episode ends cut short
        cut, _ = await pool.get_state()  # type: ignore[misc]
        assert cut.truncated
        with anyio.fail_after(10), pytest.raises(aioenv.WorkerError, match=r"worker 0 .*new env"):
            await pool.get_attr("generation")
        assert pool.active_ids == [0, 1]  # not given up on
        pool.send_action(0, 0)  # the new env's reset answers (autoreset "next_step")
        await pool.get_state()
        with anyio.fail_after(10):
            first, second = await pool.get_attr("t")
        assert (first, second) == (0, 0)


async def test_pause_keeps_pending_state_and_skips_the_worker(mode: Any) -> None:
    async with aioenv.make_pool(Counter, 3, mode=modes(mode, 3)) as pool:
        pool.reset()
        await pool.get_batch(min_size=3)
        pool.send_action(7, 1)
        pool.pause(1)  # its state is in flight (or ready): nothing is thrown away
        assert pool.num_active == 2
        with pytest.raises(aioenv.NoActionInFlight, match="unpaused"):
            await pool.get_state()
        with pytest.raises(aioenv.WorkerPaused, match="worker 1"):
            pool.send_action(1, 1)
        pool.reset()  # skips the paused worker
        batch = await pool.get_batch(min_size=2)
        assert sorted(batch.worker_ids.tolist()) == [0, 2]
        with pytest.raises(aioenv.NoActionInFlight):
            await pool.get_state()  # the paused worker's state is not handed out
        pool.send_action(1, 0)
        state, worker_id = await pool.get_state()  # type: ignore[misc]
        assert worker_id == 0
        pool.resume(1)
        assert pool.num_active == 3
        state, worker_id = await pool.get_state()  # type: ignore[misc]
        assert (worker_id, state["total"]) == (1, 7)
        assert len(pool) == 3  # ids never shift


@pytest.mark.loops
@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_a_call_cancelled_while_another_env_raised_leaves_no_error_unretrieved(
    kind: str, gate: str
) -> None:
    """``pool.call`` cut short by a timeout while one env's answer is still to come and
    another's raised: that error goes with the call, not to asyncio's "Future exception
    was never retrieved" report (with its traceback) when the garbage collector finds it."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    worker = WORKERS[kind]
    try:
        async with aioenv.AsyncWorkerPool(
            [worker(lambda: Gated(gate)), worker(functools.partial(Failing, "step"))]
        ) as pool:
            await pool.reset_all()
            with anyio.move_on_after(0.3) as scope:
                await pool.call("step", 13)  # waits for the gate in 0, raises in 1
            assert scope.cancelled_caught
            open_gate(gate)
            assert await pool.get_attr("t") == [1, 0]  # the pool goes on
        gc.collect()
        await asyncio.sleep(0)
        assert reported == []
    finally:
        loop.set_exception_handler(None)


@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_pausing_the_worker_a_wait_is_for_ends_the_wait_at_once(kind: str, gate: str) -> None:
    """Tasks wait in ``get_state()``, ``get_state(worker_id=1)`` and ``async for`` for the
    one worker with a step in flight, and another pauses it: each wait ends at once as it
    would have begun (NoActionInFlight, WorkerPaused, the loop's end), not once the paused
    worker's step is done (for good, where that step hangs)."""
    worker = WORKERS[kind]
    async with aioenv.AsyncWorkerPool([worker(Counter), worker(lambda: Gated(gate))]) as pool:
        await pool.reset_all()
        pool.send_action(1, 1)  # blocked until the gate opens, after the waits
        ended: list[str] = []

        async def get_state() -> None:
            with pytest.raises(aioenv.NoActionInFlight, match="unpaused"):
                await pool.get_state()
            ended.append("get_state")

        async def get_its_state() -> None:
            with pytest.raises(aioenv.WorkerPaused, match="worker 1"):
                await pool.get_state(worker_id=1)
            ended.append("get_state(worker_id=1)")

        async def loop() -> None:
            async for _ in pool:
                pytest.fail("the paused worker's state is not handed out")
            ended.append("async for")

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                for wait in (get_state, get_its_state, loop):
                    group.start_soon(wait)
                await anyio.wait_all_tasks_blocked()  # each waits for worker 1's state
                pool.pause(1)
        assert sorted(ended) == ["async for", "get_state", "get_state(worker_id=1)"]
        open_gate(gate)
        pool.resume(1)
        state, worker_id = await pool.get_state()  # type: ignore[misc]
        assert (worker_id, state["total"]) == (1, 1)  # kept while paused


async def test_pause_in_the_sync_pool_keeps_send_order_for_the_rest() -> None:
    async with aioenv.make_pool(Counter, 3, force_sync=True) as pool:
        pool.reset()
        await pool.get_batch(min_size=3)
        for worker_id in (2, 0, 1):
            pool.send_action(worker_id, worker_id)
        pool.pause(2)
        assert [wid async for _, wid in pool] == [0, 1]
        pool.resume()
        assert [wid async for _, wid in pool] == [2]


async def test_set_seeds_and_reset_all(mode: Any) -> None:
    async with aioenv.make_pool(Counter, 3, mode=modes(mode, 3), seed=1) as pool:
        batch = await pool.reset_all()
        assert batch.worker_ids.tolist() == [0, 1, 2]
        assert [s["seed"] for s in batch.states] == aioenv.worker_seeds(1, 3)
        await pool.set_seeds([10, None, 30])
        batch = await pool.reset_all()
        assert [s["seed"] for s in batch.states] == [10, None, 30]
        batch = await pool.reset_all()
        assert [s["seed"] for s in batch.states] == [None, None, None]  # RNG continues
        batch = await pool.reset_all(seed=100)
        assert [s["seed"] for s in batch.states] == [100, 101, 102]
        with pytest.raises(ValueError, match="3 seeds"):
            await pool.set_seeds([1])


async def test_render_tiles_every_env(mode: Any) -> None:
    factories = [functools.partial(Painted, shade) for shade in (10, 20, 30, 40, 50)]
    kinds = modes(mode, 5)
    kinds = [kinds] * 5 if isinstance(kinds, str) else kinds
    workers = [WORKERS[kind](factory) for kind, factory in zip(kinds, factories, strict=True)]
    async with aioenv.AsyncWorkerPool(workers) as pool:
        await pool.reset_all(seed=0)
        frames = await pool.render(tiled=False)
        assert [int(frame[0, 0, 0]) for frame in frames] == [10, 20, 30, 40, 50]
        image = await pool.render()
        assert image.shape == (2 * 20, 3 * 30, 3)  # 5 frames on a 3-wide grid
        assert int(image[20, 30, 0]) == 50  # row 1, column 1 is the fifth frame
        assert int(image[20, 60, 0]) == 0  # an empty cell is black
        pool.pause(0)
        assert len(await pool.render(tiled=False)) == 4  # paused envs are left out
    async with aioenv.make_pool(lambda: Painted(render_mode=None), 1, mode="sync") as pool:
        await pool.reset_all()
        with pytest.raises(TypeError, match="render_mode='rgb_array'"):
            await pool.render()


@pytest.mark.parametrize("kind", ["sync", "thread", "process"])
async def test_render_tiles_every_env_of_workers_that_step_several(kind: str) -> None:
    factories = [functools.partial(Painted, shade) for shade in (10, 20)]
    async with aioenv.make_pool(factories, 2, mode=kind, envs_per_worker=2) as pool:
        await pool.reset_all()
        frames = await pool.render(tiled=False)  # one frame per env, worker by worker
        assert [int(frame[0, 0, 0]) for frame in frames] == [10, 10, 20, 20]
        image = await pool.render()
        assert image.shape == (2 * 20, 2 * 30, 3)  # 4 frames on a 2 x 2 grid
        assert int(image[20, 0, 0]) == 20  # row 1 holds worker 1's envs


async def test_render_gymnasium_envs_in_processes() -> None:
    def env() -> gymnasium.Env[Any, Any]:
        return gymnasium.make("CartPole-v1", render_mode="rgb_array")

    async with aioenv.make_pool(env, 4, mode="process") as pool:
        await pool.reset_all(seed=0)
        image = await pool.render()
        assert image.shape == (2 * 400, 2 * 600, 3)  # a 2 x 2 grid
        assert image.std() > 0  # a real drawing, not a blank frame


async def test_workers_must_share_spaces() -> None:
    workers = [aioenv.ThreadWorker("CartPole-v1"), aioenv.ProcessWorker("MountainCar-v0")]
    async with aioenv.AsyncWorkerPool(workers) as pool:
        pool.reset()
        errors = []
        for _ in range(2):
            try:
                await pool.get_state()
            except aioenv.SpaceMismatch as error:
                errors.append(error)
        assert len(errors) == 1
        assert "space" in str(errors[0])
        assert errors[0].worker_id in (0, 1)


class Regrown(gymnasium.Env[np.ndarray, int]):
    """Counts its builds in ``log`` (one line each); its observations have as many entries
    as ``sizes`` says for that build (the last size for later ones). Any step raises."""

    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, log: str, sizes: tuple[int, ...]) -> None:
        with open(log, "a+") as file:
            file.write("built\n")
            file.seek(0)
            builds = len(file.readlines())
        size = sizes[min(builds, len(sizes)) - 1]
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (size,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action: int) -> Any:
        raise ValueError("Regrown fails every step")


async def test_a_restarted_env_is_held_to_the_pools_spaces(tmp_path: Any) -> None:
    # Same spaces after a restart: the worker keeps the same objects (checked at once).
    # Other spaces: the restart's reset is refused, as a new worker's would be.
    same = functools.partial(Regrown, str(tmp_path / "same"), (2,))
    grown = functools.partial(Regrown, str(tmp_path / "grown"), (2, 3))
    async with aioenv.make_pool([same, grown], mode="process", restart="on_failure") as pool:
        await pool.reset_all()
        spaces = [(worker.observation_space, worker.action_space) for worker in pool.workers]
        for worker_id in (0, 1):
            pool.send_action(1, worker_id)  # fails: the episode comes back cut short
            cut, _ = await pool.get_state(worker_id=worker_id)  # type: ignore[misc]
            assert cut.truncated
        assert pool.restarts == 2
        pool.send_action(RESET, 0)
        await pool.get_state(worker_id=0)  # the new env answers the reset
        same_worker = pool.workers[0]
        assert same_worker.observation_space is spaces[0][0]
        assert same_worker.action_space is spaces[0][1]
        pool.send_action(RESET, 1)
        with pytest.raises(aioenv.SpaceMismatch, match=r"worker 1 .*observation space .*\(3,\)"):
            await pool.get_state(worker_id=1)


async def test_a_restart_whose_build_fails_keeps_the_workers_spaces(tmp_path: Any) -> None:
    worker, spaces = await a_failed_rebuild_keeps_spaces(tmp_path / "builds", "process")
    assert worker.observation_space is spaces[0]  # the same bytes: the same objects
    assert worker.action_space is spaces[1]


async def test_check_actions_rejects_invalid_actions_before_sending(mode: Any) -> None:
    async with aioenv.make_pool("CartPole-v1", 2, mode=modes(mode, 2), check_actions=True) as pool:
        await pool.reset_all()
        with pytest.raises(aioenv.InvalidAction, match="worker 1.*Discrete"):
            pool.send_action(7, 1)
        pool.send_action(1, 1)  # the worker is untouched and takes a valid action
        _, worker_id = await pool.get_state()  # type: ignore[misc]
        assert worker_id == 1
        pool.send_action(RESET, 1)
        await pool.get_state()

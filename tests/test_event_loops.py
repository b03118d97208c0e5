"""The pool under every event loop it may be driven from: asyncio, uvloop, trio (``trio.run``
and ``anyio.run(backend="trio")``, which marks its run as trio in a context variable rather
than in the thread) and ``anyio.run(backend="asyncio")``, for every kind of worker. Each run
enters the pool, resets it, steps it, plays a rollout and leaves; the states are checked
against the same envs stepped by hand, and nothing may be left behind (the autouse
``no_leaks`` fixture: worker processes, ``aioenv-`` threads such as the trio bridge; Ray's
actors through ``ray_local``). Then what is anyio-on-trio's own: anyio's pytest plugin,
cancellation and Ctrl-C with a step in flight, an exception inside ``async with``, and
``collect``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest
import trio
import trio.testing
import uvloop
from envs import Walk, choose_walk, open_gate
from support import worker_processes, worker_threads

import aioenv

# Each test here is about what an event loop can change: it runs on every loop in make test.
pytestmark = pytest.mark.loops

SEED = 21  # env i is reset with seed SEED + i
ROLLOUT_SEED = 500
STEPS = 3
ROLLOUT_STEPS = 4

Row = tuple[Any, ...]


def run_asyncio(main: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(main())  # type: ignore[arg-type]


def run_uvloop(main: Callable[[], Awaitable[Any]]) -> Any:
    return uvloop.run(main())  # type: ignore[arg-type]


def run_anyio_trio(main: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(main, backend="trio")


def run_trio(main: Callable[[], Awaitable[Any]]) -> Any:
    return trio.run(main)


def run_anyio_asyncio(main: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(main, backend="asyncio")


LOOPS: dict[str, Callable[[Callable[[], Awaitable[Any]]], Any]] = {
    "asyncio": run_asyncio,
    "uvloop": run_uvloop,
    "anyio-trio": run_anyio_trio,
    "trio": run_trio,
    "anyio-asyncio": run_anyio_asyncio,
}


class AnyioWalk:
    """:class:`Walk` as a coroutine env written with anyio, so it runs on every loop (under
    trio its calls run in the trio run)."""

    def __init__(self) -> None:
        self.env = Walk()
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space

    async def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        await anyio.lowlevel.checkpoint()
        return self.env.reset(seed=seed, options=options)  # type: ignore[no-any-return]

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        await anyio.lowlevel.checkpoint()
        return self.env.step(action)  # type: ignore[no-any-return]


#: Each kind of worker: how to make its pool (2 envs, or 4 in 2 groups of 2).
KINDS: dict[str, Callable[[], aioenv.WorkerPool[Any]]] = {
    "sync": lambda: aioenv.make_pool(Walk, 2, mode="sync"),
    "thread": lambda: aioenv.make_pool(Walk, 2, mode="thread"),
    "process": lambda: aioenv.make_pool(Walk, 2, mode="process"),
    "process-grouped": lambda: aioenv.make_pool(Walk, 2, mode="process", envs_per_worker=2),
    "coroutine": lambda: aioenv.make_pool(AnyioWalk, 2, mode="async"),
}


def make_ray_pool() -> aioenv.WorkerPool[Any]:
    """One actor of two envs: each actor takes Ray a second or so to start."""
    return aioenv.make_pool(Walk, 1, mode="ray", envs_per_worker=2)


def action(env: int, step: int) -> int:
    return (env + step) % 3


def rows(state: Any) -> list[Row]:
    """One ``(observation, reward, terminated, truncated)`` per env of a worker's state."""
    if isinstance(state, aioenv.Step):
        return [(state.observation.tolist(), state.reward, state.terminated, state.truncated)]
    return [
        (observation.tolist(), float(reward), bool(terminated), bool(truncated))
        for observation, reward, terminated, truncated in zip(
            state.observations, state.rewards, state.terminated, state.truncated, strict=True
        )
    ]


def transitions(part: aioenv.Trajectories) -> list[Row]:
    """The rollout's rows, sorted (their order across a worker's envs is the pool's)."""
    return sorted(
        (
            part.observations[i].tolist(),
            int(part.actions[i]),
            float(part.rewards[i]),
            bool(part.terminated[i]),
            bool(part.truncated[i]),
            part.next_observations[i].tolist(),
        )
        for i in range(len(part))
    )


def by_hand(num_envs: int) -> tuple[list[list[Row]], list[Row]]:
    """What :func:`drive` must see, played on plain envs: per env its reset and stepped
    states, and the rollout's transitions (sorted)."""
    states: list[list[Row]] = []
    played: list[Row] = []
    for env_index in range(num_envs):
        env = Walk()
        observation, _ = env.reset(seed=SEED + env_index)
        mine: list[Row] = [(observation.tolist(), 0.0, False, False)]
        for step in range(STEPS):
            observation, reward, terminated, truncated, _ = env.step(action(env_index, step))
            mine.append((observation.tolist(), reward, terminated, truncated))
        states.append(mine)
        observation, _ = env.reset(seed=ROLLOUT_SEED + env_index)
        for _ in range(ROLLOUT_STEPS):
            chosen = choose_walk(observation)
            after, reward, terminated, truncated, _ = env.step(chosen)
            played.append(
                (observation.tolist(), chosen, reward, terminated, truncated, after.tolist())
            )
            observation = env.reset()[0] if terminated or truncated else after
    return states, sorted(played)


async def take_all(pool: aioenv.WorkerPool[Any], by_batch: bool) -> dict[int, Any]:
    """Every worker's next state, by worker id, in the order they finish."""
    if by_batch:
        batch = await pool.get_batch(min_size=len(pool))
        return dict(zip(batch.worker_ids.tolist(), batch.states, strict=True))
    taken: dict[int, Any] = {}
    for _ in range(len(pool)):
        state, worker_id = await pool.get_state()  # type: ignore[misc]
        taken[worker_id] = state
    return taken


async def drive(make: Callable[[], aioenv.WorkerPool[Any]]) -> tuple[list[list[Row]], list[Row]]:
    """Enter, reset, step (taking states by batch and one at a time), roll out, leave."""
    async with make() as pool:
        sizes = [worker.num_envs for worker in pool.workers]
        first_env = [sum(sizes[:worker_id]) for worker_id in range(len(sizes))]
        states: list[list[Row]] = [[] for _ in range(sum(sizes))]

        def record(taken: dict[int, Any]) -> None:
            for worker_id, state in taken.items():
                for offset, row in enumerate(rows(state)):
                    states[first_env[worker_id] + offset].append(row)

        pool.reset(seed=SEED)
        record(await take_all(pool, by_batch=True))
        for step in range(STEPS):
            for worker_id, size in enumerate(sizes):
                envs = range(first_env[worker_id], first_env[worker_id] + size)
                actions = [action(env, step) for env in envs]
                pool.send_action(actions[0] if size == 1 else np.array(actions), worker_id)
            record(await take_all(pool, by_batch=step % 2 == 1))
        await pool.set_policy(choose_walk)
        part = await pool.rollout(ROLLOUT_STEPS, seed=ROLLOUT_SEED)
    assert len(part) == sum(sizes) * ROLLOUT_STEPS
    return states, transitions(part)


def check(loop: str, make: Callable[[], aioenv.WorkerPool[Any]]) -> None:
    states, played = LOOPS[loop](lambda: drive(make))
    want_states, want_played = by_hand(len(states))
    assert states == want_states
    assert played == want_played


# Every loop, every kind -----------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("loop", LOOPS)
def test_every_kind_of_pool_works_under_every_loop(loop: str, kind: str) -> None:
    check(loop, KINDS[kind])


@pytest.mark.ray
@pytest.mark.parametrize("loop", LOOPS)
def test_a_ray_pool_works_under_every_loop(loop: str, ray_local: None) -> None:
    check(loop, make_ray_pool)


@pytest.mark.parametrize("loop", LOOPS)
def test_aio_vector_env_used_from_sync_code_inside_every_loop(loop: str) -> None:
    # Made in a running loop, it runs its pool (process workers, grouped by default) on a
    # loop in a thread of its own, called from this one.
    async def main() -> tuple[Any, Any]:
        with aioenv.AioVectorEnv(Walk, 4, mode="process") as env:
            observations, _ = env.reset(seed=SEED)
            stepped = env.step(np.array([action(i, 0) for i in range(4)]))
        return observations, stepped

    observations, (after, rewards, terminated, truncated, _) = LOOPS[loop](main)
    want_states, _ = by_hand(4)
    assert observations.tolist() == [mine[0][0] for mine in want_states]
    assert after.tolist() == [mine[1][0] for mine in want_states]
    assert rewards.tolist() == [mine[1][1] for mine in want_states]
    assert not terminated.any() and not truncated.any()  # Walk's episodes last 2 steps or more


def gated_vector_env(gate: str) -> aioenv.AioVectorEnv:
    """Two process workers (of the pool: not the engine's children) with their steps in
    flight, waiting for the gate (never opened here): a close cuts them short after 0.5 s."""
    envs = aioenv.AioVectorEnv(
        lambda: Walk(gate=gate), 2, mode="process", shared_memory=False, cleanup_time=0.5
    )
    envs.reset(seed=SEED)
    envs.step_async(np.array([0, 0]))
    return envs


def ctrl_c_in_close(loop: str, make: Callable[[], aioenv.AioVectorEnv]) -> None:
    """Call ``make()`` (a vector env) and close it inside ``loop``, pressing Ctrl-C once its
    pool's close began; the close must raise KeyboardInterrupt with no worker process or
    aioenv thread left (the pool's loop, a helper thread running it) at that moment."""
    closing = threading.Event()

    def press_ctrl_c_once_closing() -> None:
        if closing.wait(30):
            os.kill(os.getpid(), signal.SIGINT)

    async def main() -> tuple[list[int], list[str]]:
        # As a notebook's kernel has it (asyncio.run's own handler only cancels its task).
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            envs = make()
            aclose = envs.pool.aclose

            async def marked_aclose() -> None:
                closing.set()
                await aclose()

            envs.pool.aclose = marked_aclose  # type: ignore[method-assign]
            presser = threading.Thread(target=press_ctrl_c_once_closing)
            presser.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    envs.close()
                return worker_processes(), [t.name for t in worker_threads()]
            finally:
                presser.join()
        finally:
            signal.signal(signal.SIGINT, previous)

    processes, threads = LOOPS[loop](main)
    assert processes == []  # was: both workers, left running with their steps in flight
    assert threads == []  # was: the thread running the pool's loop, still closing it


@pytest.mark.parametrize("loop", LOOPS)
def test_ctrl_c_in_close_of_an_aio_vector_env_made_inside_a_loop_closes_its_workers_first(
    loop: str, gate: str
) -> None:
    """Made in a running loop (a notebook), its pool runs on a loop in a thread of its own:
    Ctrl-C while close() waits for the workers goes on only once they are closed, as
    outside any loop."""
    ctrl_c_in_close(loop, lambda: gated_vector_env(gate))


@pytest.mark.parametrize("loop", LOOPS)
def test_ctrl_c_in_close_of_an_aio_vector_env_made_before_a_loop_closes_its_workers_first(
    loop: str, gate: str
) -> None:
    """Made outside any loop (a script's), its loop runs in a helper thread for a call made
    inside a running loop: Ctrl-C while close() waits for the workers there goes on only
    once they are closed, as outside any loop."""
    envs = gated_vector_env(gate)
    ctrl_c_in_close(loop, lambda: envs)


# anyio on trio --------------------------------------------------------------------------
@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_every_kind_of_pool_works_under_anyios_pytest_plugin_on_trio(
    kind: str, anyio_backend: str
) -> None:
    states, played = await drive(KINDS[kind])
    assert (states, played) == by_hand(len(states))


@pytest.mark.ray
@pytest.mark.anyio
async def test_a_ray_pool_works_under_anyios_pytest_plugin_on_trio(
    anyio_backend: str, ray_local: None
) -> None:
    states, played = await drive(make_ray_pool)
    assert (states, played) == by_hand(len(states))


def gated_pool(gate: str) -> aioenv.WorkerPool[Any]:
    return aioenv.make_pool(lambda: Walk(gate=gate), 2, mode="process", cleanup_time=0.5)


@pytest.mark.parametrize("loop", ["anyio-trio", "trio"])
def test_an_exception_inside_async_with_closes_the_pool_with_a_step_in_flight(
    loop: str, gate: str
) -> None:
    async def main() -> None:
        async with gated_pool(gate) as pool:
            await pool.reset_all()
            pool.send_action(1, 0)  # its step waits for the gate: never opened here
            raise ValueError("the body fails")

    with pytest.raises(ValueError, match="the body fails"):
        LOOPS[loop](main)


@pytest.mark.parametrize("loop", ["anyio-trio", "trio"])
def test_a_cancelled_wait_loses_nothing_and_the_pool_goes_on(loop: str, gate: str) -> None:
    async def main() -> tuple[bool, Any]:
        async with gated_pool(gate) as pool:
            await pool.reset_all(seed=SEED)
            pool.send_action(1, 0)
            with anyio.move_on_after(0.2) as scope:
                await pool.get_state()
            open_gate(gate)
            state, worker_id = await pool.get_state()
            return scope.cancelled_caught, (worker_id, state.observation.tolist())

    cancelled, (worker_id, observation) = LOOPS[loop](main)
    want_states, _ = by_hand(1)
    assert cancelled
    assert worker_id == 0
    assert observation[0] == want_states[0][0][0][0]  # env 0's episode draw, stepped once
    assert observation[1] == 1


@pytest.mark.parametrize("loop", ["anyio-trio", "trio"])
def test_ctrl_c_while_a_step_is_awaited_closes_the_pool(loop: str, gate: str) -> None:
    interrupted: list[str] = []

    async def press_ctrl_c() -> None:
        await trio.testing.wait_all_tasks_blocked()  # the main task waits for the gated step
        signal.raise_signal(signal.SIGINT)  # trio hands it to the main task where it waits

    async def main() -> None:
        async with gated_pool(gate) as pool:
            await pool.reset_all()
            pool.send_action(1, 0)
            trio.lowlevel.spawn_system_task(press_ctrl_c)
            try:
                await pool.get_state()
            except KeyboardInterrupt:
                interrupted.append("get_state")
                raise

    # Even where SIGINT was inherited ignored (a test run started in the background), trio
    # takes Ctrl-C only over Python's default handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            LOOPS[loop](main)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert interrupted == ["get_state"]


def test_collect_under_anyio_on_trio_with_a_policy_written_with_anyio() -> None:
    async def policy(batch: aioenv.Batch[Any]) -> np.ndarray:
        await anyio.lowlevel.checkpoint()  # it runs on the pool's loop, which is asyncio's
        return np.array([choose_walk(observation) for observation in batch.observations])

    async def main() -> aioenv.Trajectories:
        async with aioenv.make_pool(Walk, 2, mode="process") as pool:
            return await aioenv.collect(pool, policy, num_episodes=3)

    part = run_anyio_trio(main)
    assert part.num_episodes == 3
    # Walk's reward is the action plus a tenth of the step's number in its episode.
    np.testing.assert_allclose(part.rewards, part.actions + (part.step + 1) / 10)

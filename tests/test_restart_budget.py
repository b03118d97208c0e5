"""The default restart budget on real workers: a worker is given up only in a crash loop
(``max_restarts + 1`` failures in a row with no progress between), never for failing often
while it makes progress. The rule itself, and the rate rule that ``restart_window`` asks
for, are tested on a fake clock in ``test_supervision.py``."""

from __future__ import annotations

import functools
import gc
from typing import Any

import anyio
import envs
import pytest
from support import eventually, worker_threads

import aioenv
from aioenv.core._supervision import SUPERVISION_DEFAULTS
from aioenv.workers._thread import _EnvThread

#: Worker kinds, each with its Breakable (action 0 steps, action 1 raises ValueError).
BREAKABLE: dict[str, Any] = {
    "coroutine": envs.AsyncBreakable,
    "thread": envs.Breakable,
    "process": envs.Breakable,
}
MAX_RESTARTS = SUPERVISION_DEFAULTS.max_restarts


class AsyncFailsAtReset(envs.AsyncCounter):
    """A coroutine env whose every reset raises (a server gone for good, say)."""

    async def reset(self, seed: int | None = None) -> dict[str, Any]:  # type: ignore[override]
        raise ConnectionError("the server is gone")


async def step(pool: aioenv.WorkerPool[Any], action: Any) -> Any:
    pool.send_action(action, 0)
    state, _ = await pool.get_state()  # type: ignore[misc]
    return state


@pytest.mark.parametrize("kind", list(BREAKABLE))
async def test_an_env_that_fails_often_but_makes_progress_is_never_given_up(kind: str) -> None:
    with anyio.fail_after(60):
        async with aioenv.make_pool(BREAKABLE[kind], 1, mode=kind, restart="on_failure") as pool:
            await pool.reset_all()
            for _ in range(3 * MAX_RESTARTS):  # within seconds: far past 10 in 10 s
                cut = await step(pool, 1)  # the env raises: restarted, its episode cut short
                assert cut.truncated and "EnvError" in cut.info["aioenv"]["reason"]
                started = await step(pool, aioenv.RESET)  # the new env's reset
                assert started.info["aioenv"]["restarted"]
                stepped = await step(pool, 0)  # a successful step: progress
                assert stepped.reward == 1.0 and not stepped.truncated
            assert pool.restarts == 3 * MAX_RESTARTS
            assert pool.active_ids == [0] and pool.removed == {}


@pytest.mark.parametrize("kind", list(BREAKABLE))
async def test_an_env_that_fails_max_restarts_plus_one_times_in_a_row_is_given_up(
    kind: str,
) -> None:
    with anyio.fail_after(60):
        async with aioenv.make_pool(BREAKABLE[kind], 1, mode=kind, restart="on_failure") as pool:
            await pool.reset_all()
            for _ in range(MAX_RESTARTS):
                assert (await step(pool, 1)).truncated  # restarted
                await step(pool, aioenv.RESET)  # the new env starts: no progress
            pool.send_action(1, 0)
            with pytest.raises(aioenv.EnvError) as raised:  # the 11th failure in a row
                await pool.get_state()
            assert pool.restarts == MAX_RESTARTS
            assert pool.removed == {0: raised.value} and pool.active_ids == []
            with pytest.raises(aioenv.WorkerRemoved) as removed:
                pool.send_action(0, 0)
            assert removed.value.__cause__ is raised.value
            with pytest.raises(aioenv.WorkerRemoved):
                pool.reset()


@pytest.mark.parametrize("kind", ["coroutine", "thread", "process", "sync"])
async def test_a_reset_that_always_raises_gets_its_worker_given_up(kind: str) -> None:
    always: Any = functools.partial(envs.Failing, "reset")
    healthy: Any = envs.Counter
    if kind == "coroutine":
        always, healthy = AsyncFailsAtReset, envs.AsyncCounter
    failures: list[aioenv.WorkerError] = []
    with anyio.fail_after(60):
        async with aioenv.make_pool(
            [always, healthy],
            mode=kind,
            restart="on_failure",
            on_failure=failures.append,
        ) as pool:
            pool.reset()
            states, errors = [], []
            while pool.num_pending:
                try:
                    states.append(await pool.get_state())
                except aioenv.EnvError as error:
                    errors.append(error)
            assert [worker_id for _, worker_id in states] == [1]
            assert len(errors) == 1 and errors[0].worker_id == 0
            assert len(failures) == MAX_RESTARTS + 1 and pool.restarts == MAX_RESTARTS
            assert pool.removed == {0: errors[0]} and pool.active_ids == [1]
            with pytest.raises(aioenv.WorkerRemoved):
                pool.send_action(aioenv.RESET, 0)
            assert (await pool.reset_all()).worker_ids.tolist() == [1]  # the rest go on


async def test_a_thread_worker_restarted_again_and_again_keeps_none_of_its_old_envs() -> None:
    # A long run restarts a flaky env for as long as it makes progress: each restart's
    # thread, once it ended, must not stay behind with its runner (and the last state it
    # answered, an observation that may be a whole frame).
    with anyio.fail_after(60):
        async with aioenv.make_pool(envs.Breakable, 1, mode="thread", restart="on_failure") as pool:
            await pool.reset_all()
            for _ in range(5):
                assert (await step(pool, 1)).truncated  # the env raised: its thread ends
                assert await eventually(lambda: not worker_threads())
                await step(pool, aioenv.RESET)  # a new env, in a new thread
                assert (await step(pool, 0)).reward == 1.0
            gc.collect()
            kept = [each for each in gc.get_objects() if isinstance(each, _EnvThread)]
            assert len(kept) == 1  # the one that serves the env now

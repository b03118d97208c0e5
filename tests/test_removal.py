"""Workers given up on: a worker that fails for good (restarts off or spent) raises its
last error once, then leaves the pool (``active_ids``, ``removed``); calls naming it raise
``WorkerRemoved`` with that error as cause, and pool-wide calls go on with the rest."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
from typing import Any

import envs
import numpy as np
import pytest
from support import KINDS

import aioenv

N = 4
GONE = 1  # the worker that fails for good in these tests


class Quits(envs.Counter):
    """A :class:`~envs.Counter` whose step with action ``"quit"`` ends its worker
    (``SystemExit``: every kind treats it as the worker's death, a failure for good)."""

    def step(self, action: Any) -> dict[str, Any]:
        if isinstance(action, str) and action == "quit":
            raise SystemExit(3)
        return super().step(action)


class AsyncQuits(envs.AsyncCounter):
    """:class:`Quits` as a coroutine env."""

    async def step(self, action: Any) -> dict[str, Any]:  # type: ignore[override]
        if isinstance(action, str) and action == "quit":
            raise SystemExit(3)
        return await super().step(action)


class QuitWalk(envs.Walk):
    """A :class:`~envs.Walk` whose ``quit_at``-th step call ends its worker."""

    def __init__(self, quit_at: int | None = None) -> None:
        super().__init__()
        self.quit_at = quit_at

    def step(self, action: int) -> Any:
        if self.quit_at is not None and self.steps_taken + 1 == self.quit_at:
            raise SystemExit(3)
        return super().step(action)


#: Every kind alone, and a pool mixing them (its worker GONE a process worker).
POOLS = [*KINDS, "mixed"]
MIXED = ["async", "process", "thread", "sync"]
#: POOLS, run on trio as well where no env calls asyncio (AsyncCounter sleeps with it).
ON_TRIO_TOO = [
    pytest.param(kind, marks=pytest.mark.trio) if kind in ("sync", "thread", "process") else kind
    for kind in POOLS
]


def quits_pool(kind: str, n: int = N, **options: Any) -> aioenv.WorkerPool[Any]:
    if kind == "mixed":
        mixed = MIXED[:n]
        sources = [AsyncQuits if mode == "async" else Quits for mode in mixed]
        return aioenv.make_pool(sources, mode=mixed, **options)
    env = AsyncQuits if kind == "async" else Quits
    return aioenv.make_pool(env, n, mode=kind, **options)


async def give_up(pool: aioenv.WorkerPool[Any], gone: set[int]) -> dict[int, Any]:
    """Step every worker once, those in ``gone`` with ``"quit"``; the outcomes by id."""
    for worker_id in pool.active_ids:
        pool.send_action("quit" if worker_id in gone else 0, worker_id)
    outcomes: dict[int, Any] = {}
    while pool.num_pending:
        try:
            state, worker_id = await pool.get_state()  # type: ignore[misc]
            outcomes[worker_id] = state
        except aioenv.WorkerDied as error:
            assert error.worker_id is not None
            outcomes[error.worker_id] = error
    return outcomes


def check_removed(error: BaseException, cause: BaseException, worker_id: int) -> None:
    assert isinstance(error, aioenv.WorkerRemoved)
    assert isinstance(error, aioenv.AioEnvError) and not isinstance(error, aioenv.WorkerError)
    assert error.worker_id == worker_id
    assert error.__cause__ is cause
    assert f"worker {worker_id} " in str(error) and "given up on" in str(error)
    assert "WorkerDied" in str(error)  # why


@pytest.mark.parametrize("kind", ON_TRIO_TOO)
async def test_the_last_error_is_raised_once_then_the_worker_leaves_the_pool(kind: str) -> None:
    async with quits_pool(kind) as pool:
        await pool.reset_all()
        assert pool.removed == {} and pool.active_ids == [0, 1, 2, 3]
        outcomes = await give_up(pool, {GONE})
        error = outcomes[GONE]
        assert isinstance(error, aioenv.WorkerDied)
        assert pool.active_ids == [0, 2, 3] and pool.num_active == 3
        assert pool.removed == {GONE: error} and pool.removed[GONE] is error
        # Every call naming it: WorkerRemoved, its cause the last error, never that again.
        with pytest.raises(aioenv.WorkerRemoved) as raised:
            pool.send_action(0, GONE)
        check_removed(raised.value, error, GONE)
        with pytest.raises(aioenv.WorkerRemoved) as raised:
            await pool.get_state(worker_id=GONE)
        check_removed(raised.value, error, GONE)
        with pytest.raises(aioenv.WorkerRemoved) as raised:
            await pool.call("terminated", {"t": 0}, worker_ids=[0, GONE])
        check_removed(raised.value, error, GONE)
        with pytest.raises(aioenv.WorkerRemoved) as raised:
            await pool.get_attr("t", worker_ids=[GONE])
        check_removed(raised.value, error, GONE)
        with pytest.raises(aioenv.WorkerRemoved) as raised:
            await pool.set_attr("limit", 9, worker_ids=[GONE])
        check_removed(raised.value, error, GONE)
        with pytest.raises(aioenv.WorkerRemoved) as raised:
            pool.pause(GONE)
        check_removed(raised.value, error, GONE)
        # Pool-wide calls go on with the rest.
        batch = await pool.reset_all(seed=100)
        assert batch.worker_ids.tolist() == [0, 2, 3]
        assert [state["seed"] for state in batch.states] == [100, 102, 103]  # ids never shift
        for worker_id in pool.active_ids:
            pool.send_action(1, worker_id)
        steps = [(state["t"], worker_id) async for state, worker_id in pool]
        assert sorted(steps) == [(1, 0), (1, 2), (1, 3)]
        for worker_id in pool.active_ids:
            pool.send_action(1, worker_id)
        drained = await pool.drain()
        assert [(state["t"], worker_id) for state, worker_id in drained] == [(2, 0), (2, 2), (2, 3)]
        pool.reset()
        batch = await pool.get_batch(min_size=3)
        assert sorted(batch.worker_ids.tolist()) == [0, 2, 3]
        await pool.set_seeds([5, 6, 7, 8])  # one per worker, the removed one's unused
        assert pool.removed == {GONE: error}


@pytest.mark.parametrize("kind", POOLS)
async def test_call_and_get_attr_say_which_worker_answered(kind: str) -> None:
    async with quits_pool(kind) as pool:
        await pool.reset_all()
        await pool.set_attr("limit", [10, 11, 12, 13])
        await give_up(pool, {GONE})
        limits = await pool.get_attr("limit")
        assert limits == [10, 12, 13]
        assert limits.worker_ids == (0, 2, 3)
        assert limits.by_id() == {0: 10, 2: 12, 3: 13}
        answers = await pool.call("terminated", {"t": 11})
        assert answers.by_id() == {0: True, 2: False, 3: False}
        assert (await pool.call("terminated", {"t": 12}, worker_ids=[3, 2])).by_id() == {
            3: False,
            2: True,
        }
        with pytest.raises(ValueError, match=r"for 3 workers \(\[0, 2, 3\]\).*given up on"):
            await pool.set_attr("limit", [1, 2, 3, 4])
        await pool.set_attr("limit", [20, 22, 23])
        assert (await pool.get_attr("limit")).by_id() == {0: 20, 2: 22, 3: 23}
        per_worker = await pool.call("terminated", aioenv.PerWorker([{"t": 20}] * 3))
        assert per_worker.by_id() == {0: True, 2: False, 3: False}


@pytest.mark.parametrize("kind", POOLS)
async def test_a_pool_with_no_worker_left_says_so(kind: str) -> None:
    async with quits_pool(kind, n=2) as pool:
        await pool.reset_all()
        outcomes = await give_up(pool, {0, 1})
        assert all(isinstance(outcome, aioenv.WorkerDied) for outcome in outcomes.values())
        assert pool.active_ids == [] and sorted(pool.removed) == [0, 1]
        with pytest.raises(aioenv.WorkerRemoved, match="every worker") as raised:
            pool.reset()
        assert raised.value.worker_id is None
        assert raised.value.__cause__ in outcomes.values()
        with pytest.raises(aioenv.WorkerRemoved, match="every worker"):
            await pool.get_state()
        with pytest.raises(aioenv.WorkerRemoved, match="every worker"):
            await pool.get_batch()
        with pytest.raises(aioenv.WorkerRemoved, match="every worker"):
            async for _ in pool:
                pass
        with pytest.raises(aioenv.WorkerRemoved, match=r"collect\(\): every worker"):
            await aioenv.Collector(pool, lambda batch: [0] * len(batch)).collect(num_steps=1)
        assert await pool.drain() == []
        assert await pool.get_attr("t") == []


async def test_workers_the_user_closed_are_not_left_to_do_a_pool_wide_call() -> None:
    # The rest of a pool the user closed worker by worker is nothing to go on with: once
    # the last open worker is given up, a pool-wide call says no worker is left. A pool
    # whose workers were all closed and none given up has nothing to say so of.
    async with quits_pool("sync", n=2) as pool:
        await pool.reset_all()
        pool.send_action(aioenv.CLOSE, 1)
        await give_up(pool, {0})
        assert pool.active_ids == [] and sorted(pool.removed) == [0]
        with pytest.raises(aioenv.WorkerRemoved, match="every worker"):
            pool.reset()
    async with quits_pool("sync", n=2) as pool:
        await pool.reset_all()
        for worker_id in (0, 1):
            pool.send_action(aioenv.CLOSE, worker_id)
        assert pool.active_ids == [] and not pool.removed
        pool.reset()  # resets the open workers: there are none
        assert pool.num_pending == 0


async def test_the_error_of_a_worker_that_died_while_idle_answers_the_next_reset() -> None:
    async with aioenv.make_pool(envs.Counter, N, mode="process") as pool:
        batch = await pool.reset_all()
        os.kill(batch.states[GONE]["pid"], signal.SIGKILL)
        worker = pool.workers[GONE]
        for _ in range(1000):  # the parent notices the death on its own (its socket ends)
            if worker.failure is not None:
                break
            await asyncio.sleep(0.01)
        assert isinstance(worker.failure, aioenv.WorkerDied)
        assert pool.active_ids == [0, 1, 2, 3]  # not handed out yet
        pool.reset()
        outcomes: dict[int, Any] = {}
        while pool.num_pending:
            try:
                state, worker_id = await pool.get_state()  # type: ignore[misc]
                outcomes[worker_id] = state
            except aioenv.WorkerDied as error:
                outcomes[GONE] = error
        assert outcomes[GONE] is worker.failure  # raised once, in place of its reset state
        assert sorted(outcomes) == [0, 1, 2, 3]
        assert pool.active_ids == [0, 2, 3] and pool.removed == {GONE: worker.failure}
        assert (await pool.reset_all()).worker_ids.tolist() == [0, 2, 3]


async def test_an_action_to_a_worker_that_died_while_idle_raises_its_error_once() -> None:
    async with aioenv.make_pool(envs.Counter, 2, mode="process") as pool:
        batch = await pool.reset_all()
        os.kill(batch.states[GONE]["pid"], signal.SIGKILL)
        worker = pool.workers[GONE]
        for _ in range(1000):
            if worker.failure is not None:
                break
            await asyncio.sleep(0.01)
        with pytest.raises(aioenv.WorkerDied) as raised:
            pool.send_action(0, GONE)
        assert raised.value is worker.failure
        with pytest.raises(aioenv.WorkerRemoved) as removed:
            pool.send_action(0, GONE)
        assert removed.value.__cause__ is worker.failure and pool.active_ids == [0]


async def test_a_spent_restart_budget_gives_a_hung_worker_up() -> None:
    hang = asyncio.Event()  # never set: a step given it hangs until its deadline

    def make(worker_id: int) -> Any:
        return lambda: envs.AsyncCounter(gates={7: hang} if worker_id == GONE else {}, limit=10**6)

    pool = aioenv.make_pool(
        [make(i) for i in range(N)],
        mode="coroutine",
        step_timeout=0.2,
        restart="on_failure",
        max_restarts=1,
    )
    async with pool:
        await pool.reset_all()
        errors = []
        for _ in range(2):  # the first hang is restarted, the second is the last
            for worker_id in pool.active_ids:
                pool.send_action(7, worker_id)
            while pool.num_pending:
                try:
                    await pool.get_state()
                except aioenv.WorkerTimeout as error:
                    errors.append(error)
        assert len(errors) == 1 and errors[0].worker_id == GONE and pool.restarts == 1
        assert pool.active_ids == [0, 2, 3] and pool.removed == {GONE: errors[0]}
        with pytest.raises(aioenv.WorkerRemoved, match="WorkerTimeout") as raised:
            pool.send_action(0, GONE)
        assert raised.value.__cause__ is errors[0]
        assert (await pool.reset_all()).worker_ids.tolist() == [0, 2, 3]


@pytest.mark.parametrize("kind", ["sync", "thread", "process"])
async def test_a_drained_error_hands_the_worker_out(kind: str) -> None:
    async with quits_pool(kind) as pool:
        await pool.reset_all()
        for worker_id in range(N):
            pool.send_action("quit" if worker_id == GONE else 0, worker_id)
        drained = await pool.drain()
        error = drained[GONE][0]
        assert isinstance(error, aioenv.WorkerDied)
        assert pool.removed == {GONE: error} and pool.active_ids == [0, 2, 3]


@pytest.mark.parametrize("kind", ["sync", "thread", "process"])
async def test_collect_goes_on_with_the_rest(kind: str) -> None:
    pool = aioenv.make_pool(
        [lambda i=i: QuitWalk(quit_at=3 if i == GONE else None) for i in range(N)],
        mode=kind,
        seed=3,
    )
    async with pool:
        collector = aioenv.Collector(pool, lambda batch: np.zeros(len(batch), np.int64))
        with pytest.raises(aioenv.WorkerDied) as raised:  # it cannot finish 5 episodes
            await collector.collect(num_episodes=5, per_worker=True)
        assert raised.value.worker_id == GONE and pool.removed == {GONE: raised.value}
        rows = await collector.collect(num_steps=40)
        assert len(rows) >= 40
        # Its two steps before it quit are kept, the episode cut there; nothing after.
        gone_rows = rows.worker_id == GONE
        assert gone_rows.sum() == 2 and rows.truncated[gone_rows][-1]
        per_worker = await collector.collect(num_episodes=2, per_worker=True)
        assert sorted(set(per_worker.worker_id.tolist())) == [0, 2, 3]


@pytest.mark.parametrize("kind", ["sync", "thread", "process"])
async def test_rollout_goes_on_with_the_rest(kind: str) -> None:
    pool = aioenv.make_pool(
        [lambda i=i: QuitWalk(quit_at=3 if i == GONE else None) for i in range(N)], mode=kind
    )
    async with pool:
        await pool.set_policy(envs.choose_walk)
        with pytest.raises(aioenv.WorkerDied) as raised:
            await pool.rollout(5)
        assert raised.value.worker_id == GONE and pool.removed == {GONE: raised.value}
        others = raised.value.trajectories  # type: ignore[attr-defined]
        assert sorted(set(others.worker_id.tolist())) == [0, 2, 3]
        rows = await pool.rollout(5)
        assert sorted(set(rows.worker_id.tolist())) == [0, 2, 3] and len(rows) == 15
        with pytest.raises(aioenv.WorkerRemoved) as removed:
            await pool.rollout(5, worker_ids=[GONE])
        assert removed.value.__cause__ is raised.value
        await pool.set_policy(envs.choose_walk)  # the others take it


def _exit_here() -> None:
    os._exit(3)


class ExitsWhereUnpickled:
    """A policy whose unpickling ends the process that unpickles it: a worker's child."""

    def __reduce__(self) -> Any:
        return (_exit_here, ())

    def __call__(self, observation: Any) -> int:
        return 0


async def test_a_worker_that_dies_taking_a_policy_raises_its_error_once() -> None:
    async with aioenv.make_pool(envs.Walk, 2, mode=["process", "thread"]) as pool:
        with pytest.raises(aioenv.WorkerDied) as raised:
            await pool.set_policy(ExitsWhereUnpickled())
        assert raised.value.worker_id == 0
        assert pool.removed == {0: raised.value} and pool.active_ids == [1]
        batch = await pool.reset_all()  # the other goes on; that error is not raised again
        assert batch.worker_ids.tolist() == [1]


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_the_vector_env_cannot_go_on_without_an_env(kind: str) -> None:
    envs_ = aioenv.AioVectorEnv(
        [lambda i=i: QuitWalk(quit_at=2 if i == GONE else None) for i in range(3)],
        mode=kind,
        envs_per_worker=1,
    )
    with envs_:
        envs_.reset(seed=0)
        envs_.step(np.zeros(3, np.int64))
        with pytest.raises(aioenv.WorkerDied) as raised:
            envs_.step(np.zeros(3, np.int64))  # the last error, once
        for again in (
            lambda: envs_.step(np.zeros(3, np.int64)),
            lambda: envs_.reset(),
            lambda: envs_.get_attr("steps_taken"),
            lambda: envs_.async_reset(),
        ):
            with pytest.raises(aioenv.WorkerRemoved) as removed:
                again()
            message = str(removed.value)
            assert f"env {GONE} of the AioVectorEnv" in message
            assert "cannot go on without it" in message and "async_reset" not in message
            assert removed.value.__cause__ is raised.value


def test_worker_removed_pickles_with_its_worker_id() -> None:
    error = aioenv.WorkerRemoved("worker 3 was given up on", 3)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is aioenv.WorkerRemoved
    assert str(copy) == str(error) and copy.worker_id == 3


def test_worker_results_is_the_list_of_its_results() -> None:
    results = aioenv.WorkerResults(["a", "c"], [0, 2])
    assert results == ["a", "c"] and results.worker_ids == (0, 2)
    assert results.by_id() == {0: "a", 2: "c"}
    copy = pickle.loads(pickle.dumps(results))
    assert copy == results and copy.worker_ids == (0, 2)
    with pytest.raises(ValueError, match="2 results for 1 worker ids"):
        aioenv.WorkerResults(["a", "c"], [0])

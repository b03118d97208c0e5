"""The fault suite: every fault, for thread, process and mixed pools, with restarts off and
on. Invariants: the right error or restart, no state lost or duplicated among the healthy
workers, no hang (hard timeouts), nothing leaked."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from faulty_env import PROCESS_ONLY, FaultyEnv
from leaks import memory_files, new_fds, open_fds
from support import WORKERS, eventually, wait_until, worker_threads

import aioenv
from aioenv import RESET

pytestmark = pytest.mark.usefixtures("no_fd_or_memfd_leaks")

EXPECTED: dict[str, tuple[type[aioenv.WorkerError], int | None]] = {
    "raise": (aioenv.EnvError, None),
    "garbage": (aioenv.EnvError, None),
    "exit": (aioenv.WorkerDied, 7),
    "sigkill": (aioenv.WorkerDied, -signal.SIGKILL),
    "sigsegv": (aioenv.WorkerDied, -signal.SIGSEGV),
    "hang": (aioenv.WorkerTimeout, None),
    "gated_hang": (aioenv.WorkerTimeout, None),
}
ENV_GONE = {"exit", "sigkill", "sigsegv", "hang", "gated_hang"}


def step_deadline(fault: str) -> float:
    """A short deadline where a hang is the fault under test; a long one for the others,
    whose child must not be timed out first while it dies slowly (on a busy machine, or
    under coverage, which writes its data in ``os._exit``)."""
    return 0.5 if fault in ("hang", "gated_hang") else 30.0


FAULTS = ["raise", "garbage", "exit", "sigkill", "sigsegv", "hang"]
POOLS = ["thread", "process", "mixed"]


def cases() -> list[tuple[str, str]]:
    """Every fault for every pool it can happen in (a thread cannot die on its own)."""
    return [
        (fault, pool)
        for fault in FAULTS
        for pool in POOLS
        if not (fault in PROCESS_ONLY and fault != "hang" and pool == "thread")
    ]


def kinds_for(pool: str, fault: str) -> list[str]:
    """Worker 0 is the faulty one; the others stay healthy."""
    if pool != "mixed":
        return [pool] * 3
    faulty = "process" if fault in PROCESS_ONLY else "thread"
    return [faulty, *[k for k in ("thread", "process", "sync") if k != faulty]]


def env_factory(**kwargs: Any) -> Callable[[], FaultyEnv]:
    return lambda: FaultyEnv(**kwargs)


def build(kinds: list[str], faulty: Callable[[], FaultyEnv], **pool_options: Any) -> Any:
    workers = [WORKERS[kinds[0]](faulty, seed=10)]
    workers += [WORKERS[kind](FaultyEnv, seed=11 + i) for i, kind in enumerate(kinds[1:])]
    return aioenv.AsyncWorkerPool(workers, cleanup_time=1.0, **pool_options)


class Driver:
    """Sends one action per worker per round and checks the healthy workers' invariants:
    each action answered exactly once, by its own state, with the step count going up by one."""

    def __init__(self, pool: aioenv.WorkerPool[Any], faulty: int = 0) -> None:
        self.pool = pool
        self.faulty = faulty
        self.next_id = 0
        self.t = dict.fromkeys(range(len(pool)), 0)

    async def reset(self) -> dict[int, Any]:
        return await self.round(dict.fromkeys(range(len(self.pool)), RESET))

    async def round(self, actions: dict[int, Any]) -> dict[int, Any]:
        for worker_id, action in actions.items():
            if action is not RESET and "id" not in action:
                action["id"] = self.next_id
                self.next_id += 1
            self.pool.send_action(action, worker_id)
        results: dict[int, Any] = {}
        with anyio.fail_after(60):
            for _ in actions:
                try:
                    step, worker_id = await self.pool.get_state()
                except aioenv.WorkerError as error:
                    worker_id, step = error.worker_id, error
                assert worker_id not in results, f"worker {worker_id} answered twice"
                results[worker_id] = step
        assert set(results) == set(actions), "a state was lost"
        for worker_id, step in results.items():
            if isinstance(step, aioenv.Step):
                restarted = step.info.get("aioenv", {}).get("restarted", False)
                if restarted and step.truncated:
                    pass  # its env failed: the episode ends at its last observation
                elif actions[worker_id] is RESET or restarted:
                    self.t[worker_id] = 0
                else:
                    self.t[worker_id] += 1
                    assert step.observation[1] == actions[worker_id]["id"]
                assert step.observation[0] == self.t[worker_id]
            elif worker_id != self.faulty:
                raise AssertionError(f"healthy worker {worker_id} failed: {step!r}")
            elif isinstance(step, aioenv.EnvError) and step.during == "step":
                self.t[worker_id] += 1  # the env counted the step before it raised
        return results

    def healthy(self, **extra: Any) -> dict[int, Any]:
        return {wid: dict(extra) for wid in range(len(self.pool)) if wid != self.faulty}


def running(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def check_error(error: Any, fault: str) -> None:
    error_class, exitcode = EXPECTED[fault]
    assert isinstance(error, error_class), f"expected {error_class.__name__}, got {error!r}"
    assert error.worker_id == 0
    assert "worker 0" in str(error)
    if exitcode is not None:
        assert error.exitcode == exitcode


@pytest.mark.parametrize(("fault", "pool_kind"), cases())
async def test_step_fault_with_restarts_off_raises_and_spares_the_others(
    fault: str, pool_kind: str, release: str
) -> None:
    kinds = kinds_for(pool_kind, fault)
    if fault == "hang" and kinds[0] == "thread":
        fault = "gated_hang"
    async with build(kinds, env_factory(gate=release), step_timeout=step_deadline(fault)) as pool:
        driver = Driver(pool)
        await driver.reset()
        await driver.round({0: {}, **driver.healthy()})
        results = await driver.round({0: {"fault": fault}, **driver.healthy()})
        check_error(results[0], fault)
        assert pool.failures == 1
        assert pool.restarts == 0
        if fault in ENV_GONE:  # the env is gone: the worker was given up on, and says so
            assert pool.removed == {0: results[0]} and 0 not in pool.active_ids
            with pytest.raises(aioenv.WorkerRemoved, match="worker 0") as removed:
                pool.send_action({"id": 999}, 0)
            assert removed.value.__cause__ is results[0]
            await driver.round(driver.healthy())
        else:  # the env raised but lives on, as in the core
            results = await driver.round({0: {}, **driver.healthy()})
            assert results[0].observation[0] == 3
        await driver.round(driver.healthy())
        Path(release).touch()  # an abandoned thread can finish now


@pytest.mark.parametrize(("fault", "pool_kind"), cases())
async def test_step_fault_with_restarts_on_restarts_that_worker_only(
    fault: str, pool_kind: str, release: str
) -> None:
    kinds = kinds_for(pool_kind, fault)
    if fault == "hang" and kinds[0] == "thread":
        fault = "gated_hang"
    reports: list[aioenv.WorkerError] = []
    async with build(
        kinds,
        env_factory(gate=release),
        step_timeout=step_deadline(fault),
        restart="on_failure",
        on_failure=reports.append,
    ) as pool:
        driver = Driver(pool)
        await driver.reset()
        results = await driver.round({0: {"fault": fault}, **driver.healthy()})
        step = results[0]
        assert isinstance(step, aioenv.Step), f"expected the episode cut short, got {step!r}"
        marker = step.info["aioenv"]
        assert marker["restarted"] is True
        assert EXPECTED[fault][0].__name__ in marker["reason"]
        assert step.reward == 0.0
        assert step.truncated and not step.terminated
        assert step.observation[0] == 0  # the last observation seen: the reset's
        assert len(reports) == 1
        check_error(reports[0], fault)
        assert (pool.failures, pool.restarts) == (1, 1)
        results = await driver.round({0: {}, **driver.healthy()})
        assert results[0].info["aioenv"]["restarted"] and not results[0].done  # the new reset
        for _ in range(2):  # the restarted worker is healthy again, and so are the others
            results = await driver.round({0: {}, **driver.healthy()})
        assert results[0].observation[0] == 2
        Path(release).touch()  # an abandoned thread can finish now


@pytest.mark.parametrize("pool_kind", POOLS)
@pytest.mark.parametrize("restart", ["never", "on_failure"])
async def test_reset_fault(pool_kind: str, restart: str) -> None:
    async with build(kinds_for(pool_kind, "raise"), FaultyEnv, restart=restart) as pool:
        driver = Driver(pool)
        await driver.reset()
        await driver.round({0: {"arm_reset_fault": "raise"}, **driver.healthy()})
        results = await driver.round(dict.fromkeys(range(3), RESET))
        if restart == "never":
            assert isinstance(results[0], aioenv.EnvError)
            assert results[0].during == "reset"
        else:
            assert results[0].info["aioenv"]["restarted"] is True
            assert pool.restarts == 1
        await driver.round({0: RESET, **driver.healthy()})


@pytest.mark.parametrize("pool_kind", POOLS)
async def test_construction_fault_restarts_into_a_healthy_env(pool_kind: str, once: str) -> None:
    kinds = kinds_for(pool_kind, "raise")
    faulty = env_factory(init_fault="raise", once=once)
    async with build(kinds, faulty, restart="on_failure") as pool:
        driver = Driver(pool)
        results = await driver.reset()
        assert results[0].info["aioenv"]["restarted"] is True
        assert "construction" in results[0].info["aioenv"]["reason"]
        await driver.round({0: {}, **driver.healthy()})
    async with build(kinds, env_factory(init_fault="raise")) as pool:
        results = await Driver(pool).reset()
        assert isinstance(results[0], aioenv.EnvError)
        assert results[0].during == "construction"


@pytest.mark.parametrize("pool_kind", POOLS)
async def test_restarts_stop_at_max_restarts_and_then_raise(pool_kind: str) -> None:
    kinds = kinds_for(pool_kind, "raise")
    faulty = env_factory(init_fault="raise")  # every build fails
    async with build(kinds, faulty, restart="on_failure", max_restarts=2) as pool:
        results = await Driver(pool).reset()
        assert isinstance(results[0], aioenv.EnvError)
        assert (pool.restarts, pool.failures) == (2, 3)


async def test_restart_backoff_and_deterministic_reseeding() -> None:
    async def restarted_draws() -> tuple[float, float]:
        worker = aioenv.ThreadWorker(FaultyEnv, seed=77)
        async with aioenv.AsyncWorkerPool(
            [worker], restart="on_failure", restart_backoff=0.05
        ) as pool:
            driver = Driver(pool, faulty=-1)
            first = (await driver.reset())[0].observation[2]
            pool.send_action({"fault": "raise"}, 0)
            step, _ = await pool.get_state()
            assert step.truncated and step.info["aioenv"]["restarted"]  # the episode ends
            pool.send_action({}, 0)
            step, _ = await pool.get_state()  # the new env's reset
            assert step.info["aioenv"]["restarted"] and not step.truncated
            return first, step.observation[2]

    first_a, restarted_a = await restarted_draws()
    first_b, restarted_b = await restarted_draws()
    assert (first_a, restarted_a) == (first_b, restarted_b)  # deterministic
    assert first_a != restarted_a  # a new child of the worker's seed sequence
    assert aioenv.worker_seeds(77, 1) != [77]


async def test_late_reply_of_an_abandoned_thread_is_never_taken(release: str) -> None:
    worker = aioenv.ThreadWorker(env_factory(gate=release))
    # The worker's hook for every reply of an env thread, watched: ``late`` gets the
    # request number of each reply that comes from a thread the worker abandoned.
    late: list[int] = []
    on_thread_reply = worker._on_thread_reply

    def watched(env_thread: Any, seq: int, result: Any) -> None:
        if env_thread is not worker._current:
            late.append(seq)
        on_thread_reply(env_thread, seq, result)

    worker._on_thread_reply = watched  # type: ignore[method-assign]
    async with aioenv.AsyncWorkerPool([worker], step_timeout=0.3, restart="on_failure") as pool:
        driver = Driver(pool, faulty=-1)
        await driver.reset()
        pool.send_action({"id": 5, "fault": "gated_hang"}, 0)
        step, _ = await pool.get_state()
        assert step.truncated and step.info["aioenv"]["restarted"]
        results = await driver.round({0: {"id": 6}})  # the new env's reset
        assert results[0].info["aioenv"]["restarted"] and not results[0].truncated
        results = await driver.round({0: {"id": 6}})
        assert results[0].observation[1] == 6
        Path(release).touch()  # the abandoned thread finishes its step and replies late
        assert await eventually(lambda: len(late) == 1), "the late reply never reached the loop"
        assert await eventually(lambda: len(worker_threads()) == 1)
        with pytest.raises(aioenv.NoActionInFlight):
            await pool.get_state(timeout=0)  # it was dropped, not delivered
        results = await driver.round({0: {"id": 7}})
        assert results[0].observation[1] == 7


@pytest.mark.loops
async def test_worker_step_timeout_overrides_the_pool(release: str) -> None:
    slow = aioenv.ThreadWorker(env_factory(gate=release), step_timeout=0.3)
    async with aioenv.AsyncWorkerPool([slow, aioenv.ThreadWorker(FaultyEnv)]) as pool:
        driver = Driver(pool)
        await driver.reset()
        results = await driver.round({0: {"fault": "gated_hang"}, 1: {}})
        assert isinstance(results[0], aioenv.WorkerTimeout)
        assert results[0].timeout == 0.3
        assert results[0].elapsed >= 0.3 - 0.01  # uvloop timers have 1 ms granularity
        assert results[0].seq > 0
        Path(release).touch()


@pytest.mark.loops
@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_start_timeout_applies_to_construction_and_first_reset(kind: str) -> None:
    slow_start = env_factory(init_fault="sleep")  # sleeps 0 s: fine

    class SlowStart(FaultyEnv):
        def __init__(self) -> None:
            super().__init__()
            import time

            time.sleep(1.0)

    worker = WORKERS[kind](SlowStart)
    async with aioenv.AsyncWorkerPool([worker], step_timeout=0.2, start_timeout=0.4) as pool:
        pool.reset()
        with pytest.raises(aioenv.WorkerTimeout, match="start-up"):
            await pool.get_state()
    # The default start deadline is generous (max(step_timeout, 60 s)): slow starts pass.
    async with aioenv.AsyncWorkerPool([WORKERS[kind](SlowStart)], step_timeout=0.2) as pool:
        pool.reset()
        assert (await pool.get_state()) is not None
    del slow_start


@pytest.mark.loops
async def test_sync_workers_report_a_step_past_its_deadline() -> None:
    worker = aioenv.SyncWorker(FaultyEnv)
    async with aioenv.SyncWorkerPool([worker], step_timeout=0.1) as pool:
        driver = Driver(pool)
        await driver.reset()
        results = await driver.round({0: {"fault": "sleep", "arg": 0.3}})
        assert isinstance(results[0], aioenv.WorkerTimeout)


# Cancellation ------------------------------------------------------------------------------
@pytest.mark.loops
@pytest.mark.parametrize("pool_kind", POOLS)
async def test_cancelling_get_state_and_get_batch_anywhere_loses_nothing(pool_kind: str) -> None:
    kinds = [*kinds_for(pool_kind, "raise"), "thread"]
    workers = [WORKERS[kind](FaultyEnv) for kind in kinds]
    rng = np.random.default_rng(0)
    async with aioenv.AsyncWorkerPool(workers) as pool:
        pool.reset()
        owed = set(range(len(pool)))
        received: list[int] = []
        next_id = 0
        sent_ids: dict[int, int] = {}
        for _ in range(400):
            timeout = float(rng.choice([0.0, 0.0005, 0.002]))
            got: list[tuple[Any, int]] = []
            with anyio.move_on_after(timeout):
                if rng.random() < 0.5:
                    got = [await pool.get_state()]
                else:
                    batch = await pool.get_batch(min_size=int(rng.integers(1, 3)))
                    got = list(batch)
            for step, worker_id in got:
                assert worker_id in owed, f"worker {worker_id} answered twice"
                owed.discard(worker_id)
                if worker_id in sent_ids:
                    assert step.observation[1] == sent_ids.pop(worker_id)
                    received.append(worker_id)
            for worker_id in set(range(len(pool))) - owed:
                action = {"id": next_id, "fault": "sleep", "arg": float(rng.random() * 0.002)}
                sent_ids[worker_id] = next_id
                next_id += 1
                pool.send_action(action, worker_id)
                owed.add(worker_id)
        async for step, worker_id in pool:
            owed.discard(worker_id)
            assert step.observation[1] == sent_ids.pop(worker_id)
            received.append(worker_id)
        assert not owed
        assert not sent_ids
        assert len(received) == next_id  # every state that was sent for arrived exactly once


# Shutdown under faults ----------------------------------------------------------------------
@pytest.mark.parametrize("situation", ["hung", "hung_ignoring_sigterm", "dead"])
async def test_aclose_is_bounded_whatever_the_workers_are_doing(situation: str) -> None:
    worker = aioenv.ProcessWorker(
        env_factory(ignore_sigterm=situation == "hung_ignoring_sigterm"), cleanup_time=0.3
    )
    pool = aioenv.AsyncWorkerPool([worker, aioenv.ThreadWorker(FaultyEnv)], cleanup_time=0.3)
    driver = Driver(pool, faulty=0)
    await driver.reset()
    if situation == "dead":
        os.kill(worker.pid, signal.SIGKILL)
        assert wait_until(lambda: not running(worker.pid))
    else:
        pool.send_action({"fault": "hang"}, 0)
    with anyio.fail_after(0.3 + 1.0 + 5.0):  # cleanup_time + SIGTERM grace + slack
        await pool.aclose()
    expected = {
        "hung": -signal.SIGTERM,
        "hung_ignoring_sigterm": -signal.SIGKILL,
        "dead": -signal.SIGKILL,
    }
    assert worker.exitcode == expected[situation]


async def test_fds_are_released_after_faults() -> None:
    async def run_faulty_pool() -> None:
        async with build(
            ["process", "thread", "process"],
            FaultyEnv,
            restart="on_failure",
            max_restarts=10,
            step_timeout=0.5,
        ) as pool:
            driver = Driver(pool)
            await driver.reset()
            for fault in ("sigkill", "raise", "hang", "exit"):
                await driver.round({0: {"fault": fault}, **driver.healthy()})
                await driver.round({0: {}, **driver.healthy()})  # the new env's reset
            assert pool.restarts == 4

    await run_faulty_pool()  # warm up: the forkserver and loop machinery open their fds once
    before = len(os.listdir("/proc/self/fd"))
    await run_faulty_pool()
    assert len(os.listdir("/proc/self/fd")) == before


def test_the_leak_check_sees_a_memory_file_left_open() -> None:
    before = open_fds()
    fd = os.memfd_create("aioenv-observations", os.MFD_CLOEXEC)
    try:
        after = open_fds()
        assert memory_files(after) == ["/memfd:aioenv-observations (deleted)"]
        assert new_fds(before, after) == ["/memfd:aioenv-observations (deleted)"]
    finally:
        os.close(fd)
    assert not new_fds(before, open_fds())


# Bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("pool_kind", POOLS)
async def test_bad_input_gives_one_clear_error_and_the_pool_stays_usable(pool_kind: str) -> None:
    kinds = kinds_for(pool_kind, "raise")
    workers = [WORKERS[kind]("CartPole-v1") for kind in kinds]
    async with aioenv.AsyncWorkerPool(workers) as pool:
        pool.reset()
        await pool.get_batch(min_size=3)
        pool.send_action("left", 0)  # the wrong type for CartPole's Discrete(2)
        with pytest.raises(aioenv.EnvError, match="worker 0.*during step") as caught:
            await pool.get_state()
        assert caught.value.worker_id == 0
        pool.send_action(np.zeros((3, 3)), 1)  # the wrong shape
        with pytest.raises(aioenv.EnvError, match="worker 1"):
            await pool.get_state()
        for worker_id in range(3):  # every worker still answers
            pool.send_action(RESET, worker_id)
        batch = await pool.get_batch(min_size=3)
        assert sorted(batch.worker_ids.tolist()) == [0, 1, 2]

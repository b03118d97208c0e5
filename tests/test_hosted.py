"""Several envs per process (envs_per_process): each env is still its own worker, with the
same semantics; a failure of one env touches its siblings only when the process goes."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import cloudpickle
import numpy as np
import pytest
from envs import Counter, Gated, open_gate
from support import states_or_errors, worker_processes

import aioenv
from aioenv import CLOSE, RESET

sys.path.insert(0, str(Path(__file__).parent / "faults"))
import faulty_env
from faulty_env import FaultyEnv

cloudpickle.register_pickle_by_value(faulty_env)  # the workers need not import it


async def trajectories(pool: aioenv.WorkerPool[Any], rounds: int) -> dict[int, list[Any]]:
    result: dict[int, list[Any]] = {i: [] for i in range(len(pool))}
    for r in range(rounds):
        for worker_id in range(len(pool)):
            pool.send_action(RESET if r % 6 == 0 else worker_id + r, worker_id)
        batch = await pool.get_batch(min_size=len(pool))
        for state, worker_id in batch:
            result[worker_id].append({k: v for k, v in state.items() if k != "pid"})
    return result


async def test_same_results_as_one_env_per_process() -> None:
    async with aioenv.make_pool(Counter, 6, mode="process", seed=3, envs_per_process=3) as pool:
        pids = [w.pid for w in pool.workers]  # type: ignore[attr-defined]
        assert pids[0] == pids[1] == pids[2] != pids[3] == pids[4] == pids[5]
        assert "slot 2" in pool.workers[2].name
        hosted = await trajectories(pool, 20)
    async with aioenv.make_pool(Counter, 6, mode="process", seed=3) as pool:
        single = await trajectories(pool, 20)
    assert hosted == single
    assert not worker_processes()


async def test_mixed_pool_groups_only_the_process_workers() -> None:
    modes = ["process", "thread", "process", "process", "sync"]
    async with aioenv.make_pool("CartPole-v1", 5, mode=modes, envs_per_process=2, seed=0) as pool:
        process_pids = [w.pid for w in pool.workers if w.kind == "process"]  # type: ignore[attr-defined]
        assert process_pids[0] == process_pids[1] != process_pids[2]
        batch = await pool.reset_all(seed=5)
        for step, worker_id in batch:
            import gymnasium

            expected, _ = gymnasium.make("CartPole-v1").reset(seed=5 + worker_id)
            np.testing.assert_array_equal(step.observation, expected)
        assert await pool.get_attr("gravity") == [9.8] * 5
    with pytest.raises(TypeError, match="envs_per_process.*process"):
        aioenv.make_pool(Counter, 2, mode="thread", envs_per_process=2)
    with pytest.raises(ValueError, match="envs_per_process"):
        aioenv.make_pool(Counter, 2, mode="process", envs_per_process=0)


async def test_first_ready_across_processes(gate: str) -> None:
    workers = aioenv.ProcessWorker.hosted(lambda: Gated(gate), [None, None], 2)
    workers += aioenv.ProcessWorker.hosted(Counter, [None, None], 2)
    async with aioenv.AsyncWorkerPool(workers) as pool:
        await pool.reset_all()
        for worker_id in range(4):
            pool.send_action(1, worker_id)
        seen = set()
        with anyio.fail_after(30):
            for _ in range(40):
                _, worker_id = await pool.get_state()  # type: ignore[misc]
                assert worker_id in (2, 3)  # the gated process holds both of its envs
                seen.add(worker_id)
                pool.send_action(1, worker_id)
        assert seen == {2, 3}
        open_gate(gate)
        with anyio.fail_after(30):
            assert sorted([wid async for _, wid in pool]) == [0, 1, 2, 3]


@pytest.mark.trio
@pytest.mark.parametrize("restart", ["never", "on_failure"])
async def test_an_env_exception_touches_only_its_own_slot(restart: str) -> None:
    workers = aioenv.ProcessWorker.hosted(FaultyEnv, [1, 2, 3], 3)
    async with aioenv.AsyncWorkerPool(workers, restart=restart) as pool:
        pid = workers[0].pid
        await pool.reset_all()
        for worker_id, action in enumerate([{"id": 0}, {"id": 1, "fault": "raise"}, {"id": 2}]):
            pool.send_action(action, worker_id)
        results = await states_or_errors(pool, 3, aioenv.EnvError)
        assert results[0].observation[0] == 1
        assert results[2].observation[0] == 1
        if restart == "never":
            assert isinstance(results[1], aioenv.EnvError)
        else:  # its episode ends, truncated at its last observation (the reset's)
            assert results[1].truncated and results[1].observation[0] == 0
            assert results[1].info["aioenv"]["restarted"] is True
        assert {w.pid for w in workers} == {pid}  # the process lives on
        for worker_id in range(3):
            pool.send_action({"id": 10 + worker_id}, worker_id)
        batch = (await pool.get_batch(min_size=3)).sorted()
        counts = [int(step.observation[0]) for step in batch.states]
        # Siblings kept their episode; a restarted env answers with its reset.
        assert counts == [2, 2 if restart == "never" else 0, 2]


@pytest.mark.trio  # restarts, step_timeout and deaths under trio too
# One parameter, not two: each pair asserts its own, and make test's cover keeps each value
# of a parameter once, not each pair (tests/matrix.py).
@pytest.mark.parametrize(
    "fault_restart",
    [("sigkill", "never"), ("hang", "never"), ("sigkill", "on_failure"), ("hang", "on_failure")],
    ids="-".join,
)
async def test_when_the_process_goes_every_env_in_it_fails_or_restarts(
    fault_restart: tuple[str, str],
) -> None:
    fault, restart = fault_restart
    workers = aioenv.ProcessWorker.hosted(FaultyEnv, [1, 2, 3], 2)  # 2 + 1: two processes
    async with aioenv.AsyncWorkerPool(workers, restart=restart, step_timeout=0.5) as pool:
        await pool.reset_all()
        old_pid = workers[0].pid
        pool.send_action({"id": 0, "fault": fault}, 0)
        results: dict[int, Any] = {}
        try:
            pool.send_action({"id": 1}, 1)
        except aioenv.WorkerDied as died:
            # Under trio every call crosses to the pool's own thread, whose loop may have
            # seen the process die in between: worker 1 was idle then, and with no restart
            # its death is raised at its next action instead of by get_state.
            assert (restart, fault) == ("never", "sigkill")
            results[1] = died
        pool.send_action({"id": 2}, 2)
        with anyio.fail_after(30):
            results |= await states_or_errors(pool, 3 - len(results), aioenv.WorkerError)
        assert results[2].observation[0] == 1  # another process: untouched
        if restart == "never":
            expected = aioenv.WorkerTimeout if fault == "hang" else aioenv.WorkerDied
            assert isinstance(results[0], expected)
            if fault == "hang":  # worker 1 waits behind the hung env in the same process
                assert isinstance(results[1], (aioenv.WorkerTimeout, aioenv.WorkerDied))
                with pytest.raises(aioenv.WorkerRemoved, match="process worker 1") as removed:
                    pool.send_action({"id": 5}, 1)  # given up on: its error was handed out
                assert removed.value.__cause__ is results[1]
            else:
                assert isinstance(results[1], aioenv.WorkerDied)
        else:
            assert results[0].truncated and results[0].info["aioenv"]["restarted"] is True
            pool.send_action({"id": 7}, 0)
            step, _ = await pool.get_state()  # type: ignore[misc]
            assert step.observation[1] == -1 and not step.truncated  # the new env's reset
            pool.send_action({"id": 7}, 0)
            step, _ = await pool.get_state()  # type: ignore[misc]
            assert step.observation[1] == 7
            if not isinstance(results[1], aioenv.Step) or "aioenv" not in results[1].info:
                pool.send_action({"id": 8}, 1)  # if it was idle when the process died ...
                results[1], _ = await pool.get_state()  # type: ignore[misc]
            # ... its episode ends at its next action, as it would have in flight
            assert results[1].truncated and results[1].info["aioenv"]["restarted"] is True
            pool.send_action({"id": 9}, 1)
            step, _ = await pool.get_state()  # type: ignore[misc]
            assert step.observation[1] == -1 and not step.truncated  # its new env's reset
            assert workers[0].pid == workers[1].pid != old_pid
    assert not worker_processes()


async def test_a_process_killed_from_outside_is_no_siblings_fault(gate: str) -> None:
    workers = aioenv.ProcessWorker.hosted(lambda: Gated(gate), [None, None, None], 3)
    async with aioenv.AsyncWorkerPool(workers) as pool:
        await pool.reset_all()
        for worker_id in range(3):
            pool.send_action(1, worker_id)  # in flight, held by the gate
        os.kill(workers[0].pid, signal.SIGKILL)
        with anyio.fail_after(30):
            results = await states_or_errors(pool, 3, aioenv.WorkerDied)
    for worker_id, died in results.items():
        assert isinstance(died, aioenv.WorkerDied)
        assert f"process worker {worker_id} " in str(died)
        assert "killed by SIGKILL" in str(died)
        assert "killed because" not in str(died)  # no env of its failed: it was killed
    assert not worker_processes()


async def test_closing_one_env_leaves_its_siblings_working() -> None:
    workers = aioenv.ProcessWorker.hosted(Counter, [None] * 3, 3)
    async with aioenv.AsyncWorkerPool(workers) as pool:
        await pool.reset_all()
        pool.send_action(CLOSE, 1)
        await workers[1].aclose()
        assert workers[1].exitcode is None  # the process still serves slots 0 and 2
        for worker_id in (0, 2):
            pool.send_action(4, worker_id)
        batch = await pool.get_batch(min_size=2)
        assert sorted(batch.worker_ids.tolist()) == [0, 2]
    assert workers[0].exitcode == 0


def test_hosted_refuses_a_list_of_envs_that_is_not_one_per_seed() -> None:
    # Before any worker is built, naming the call, where zip() said "argument 2 is longer".
    for envs in ([Counter, Counter], [Counter] * 4):
        with pytest.raises(ValueError, match=rf"hosted\(\) got {len(envs)} env sources for 3 "):
            aioenv.ProcessWorker.hosted(envs, [1, 2, 3], 1)

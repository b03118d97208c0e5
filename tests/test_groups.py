"""collect_groups(): G rollouts per task, each group out as soon as its last member ends,
members scheduled first-ready, failed members retried a bounded number of times, the rest
marked; and the reset options a restarted env starts with."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import envs
import numpy as np
import pytest
from support import eventually, process_running

import aioenv
from aioenv.core._restarts import failure_note


@pytest.fixture(autouse=True)
def fresh_task_env() -> Iterator[None]:
    envs.AsyncTaskEnv.gate = None
    envs.AsyncTaskEnv.failures = {}
    envs.AsyncTaskEnv.resets = {}
    yield
    envs.AsyncTaskEnv.gate = None


async def policy(batch: aioenv.Batch[Any]) -> list[int]:
    await asyncio.sleep(0)  # an async policy, as an inference server is
    return [0] * len(batch)


def check_members_played(group: aioenv.Group, length: int = 3) -> None:
    """Every episode of ``group`` is a whole episode of its own task."""
    data = group.trajectories
    assert data.num_episodes == len(group.members)
    assert (data.observations[:, 0] == group.task["task"]).all(), data.observations
    for part in data.episode_slices():
        assert data.step[part].tolist() == list(range(length))
        assert data.rewards[part].tolist() == [group.task["task"] + t for t in (1, 2, 3)][:length]
        assert data.terminated[part][-1] and not data.terminated[part][:-1].any()


async def test_each_task_is_played_group_size_times_with_its_options() -> None:
    tasks = [{"task": task} for task in range(5)]
    async with aioenv.make_pool(envs.AsyncTaskEnv, 3, mode="coroutine") as pool:
        groups = [g async for g in aioenv.collect_groups(pool, policy, tasks, group_size=4)]
        assert not any(pool.has_pending(w) for w in range(3))  # nothing left in flight
    assert sorted(g.task_id for g in groups) == list(range(5))
    for group in groups:
        assert group.task == {"task": group.task_id} and group.task is tasks[group.task_id]
        assert group.complete and group.failed == {} and group.retried == ()
        assert group.members == (0, 1, 2, 3)
        check_members_played(group)
        np.testing.assert_array_equal(group.returns(), [3 * group.task_id + 6] * 4)
    assert envs.AsyncTaskEnv.resets == {task: 4 for task in range(5)}


async def test_a_group_comes_out_as_soon_as_it_ends_while_others_still_run() -> None:
    # Task 0's steps wait for a gate: task 1's group must come out first, played by the one
    # worker that task 0's members leave free (no lockstep, no task order).
    envs.AsyncTaskEnv.gate = gate = asyncio.Event()
    tasks = [{"task": 0, "gate": True}, {"task": 1}, {"task": 2}]
    async with aioenv.make_pool(envs.AsyncTaskEnv, 3, mode="coroutine") as pool:
        groups = aioenv.collect_groups(pool, policy, tasks, group_size=2)
        first = await asyncio.wait_for(groups.__anext__(), 30)
        second = await asyncio.wait_for(groups.__anext__(), 30)
        assert (first.task_id, second.task_id) == (1, 2)
        assert not gate.is_set()  # task 0's members are still at their first step
        with pytest.raises(asyncio.TimeoutError):  # a cancelled wait loses nothing
            await asyncio.wait_for(groups.__anext__(), 0.2)
        gate.set()
        rest = [g async for g in groups]
    assert [g.task_id for g in rest] == [0]
    for group in (first, second, *rest):
        check_members_played(group)
        assert group.complete


async def test_a_stream_of_tasks_is_taken_lazily() -> None:
    taken: list[int] = []

    def stream() -> Iterator[dict[str, int]]:
        for task in range(1000):
            taken.append(task)
            yield {"task": task}

    async with aioenv.make_pool(envs.AsyncTaskEnv, 2, mode="coroutine") as pool:
        groups = aioenv.collect_groups(pool, policy, stream(), group_size=2)
        got = [await groups.__anext__() for _ in range(3)]
        await groups.aclose()
        assert not any(pool.has_pending(w) for w in range(2))  # the pool is idle again
        with pytest.raises(StopAsyncIteration):
            await groups.__anext__()
    assert sorted(g.task_id for g in got) == [0, 1, 2]
    assert len(taken) <= 5  # only what free workers needed, never the whole stream


@pytest.mark.parametrize("restart", ["never", "on_failure"])
async def test_a_failed_member_is_played_again_and_its_group_is_complete(restart: str) -> None:
    # Task 1's first step crashes once; its member is played again (under restarts, on a
    # rebuilt env whose reset still gets the task's options).
    tasks = [{"task": 0}, {"task": 1, "fail": 1}]
    async with aioenv.make_pool(envs.AsyncTaskEnv, 2, mode="coroutine", restart=restart) as pool:
        groups = [g async for g in aioenv.collect_groups(pool, policy, tasks, group_size=2)]
        assert pool.active_ids == [0, 1]
    by_task = {g.task_id: g for g in groups}
    assert by_task[1].complete and by_task[1].members == (0, 1)
    [(member, reason)] = by_task[1].retried
    assert member in (0, 1) and "EnvError" in reason and "task 1 crashed" in reason
    check_members_played(by_task[1])
    assert envs.AsyncTaskEnv.resets[1] == 3  # two members, one played twice


@pytest.mark.parametrize("restart", ["never", "on_failure"])
async def test_retries_are_bounded_and_a_group_out_of_them_is_marked_incomplete(
    restart: str,
) -> None:
    # Three crashes of task 0, two members, one retry each: one member fails twice and is
    # given up on, the other finishes on its first or second attempt.
    tasks = [{"task": 0, "fail": 3}, {"task": 1}]
    async with aioenv.make_pool(envs.AsyncTaskEnv, 2, mode="coroutine", restart=restart) as pool:
        collector = aioenv.collect_groups(pool, policy, tasks, group_size=2, max_retries=1)
        groups = {g.task_id: g async for g in collector}
    group = groups[0]
    assert not group.complete and "incomplete" in repr(group)
    [(given_up, reason)] = group.failed.items()
    assert "task 0 crashed" in reason
    assert group.members == (1 - given_up,)  # the finished one alone, its rows whole
    check_members_played(group)
    assert len(group.retried) == 2 and all("task 0 crashed" in r for _, r in group.retried)
    assert envs.AsyncTaskEnv.resets[0] == 4  # 2 members x (1 + max_retries): no more
    assert groups[1].complete


async def test_no_retries_marks_the_member_at_its_first_failure() -> None:
    tasks = [{"task": 0, "fail": 1}]
    async with aioenv.make_pool(envs.AsyncTaskEnv, 1, mode="coroutine") as pool:
        [group] = [
            g async for g in aioenv.collect_groups(pool, policy, tasks, group_size=1, max_retries=0)
        ]
    assert group.failed.keys() == {0} and group.members == () and group.retried == ()
    assert len(group.trajectories) == 0


async def test_a_member_whose_worker_is_given_up_on_is_played_on_another() -> None:
    # A step that hangs past its deadline, restarts off: that worker leaves the pool, the
    # other plays everything.
    tasks = [{"task": 0, "fail": 1, "hang": True}, {"task": 1}]
    async with aioenv.make_pool(envs.AsyncTaskEnv, 2, mode="coroutine", step_timeout=0.5) as pool:
        groups = [g async for g in aioenv.collect_groups(pool, policy, tasks, group_size=2)]
        assert len(pool.removed) == 1 and len(pool.active_ids) == 1
    assert all(g.complete for g in groups) and len(groups) == 2
    for group in groups:
        check_members_played(group)


async def test_once_every_worker_is_given_up_on_it_says_so() -> None:
    tasks = [{"task": 0, "fail": 10, "hang": True}]
    async with aioenv.make_pool(envs.AsyncTaskEnv, 2, mode="coroutine", step_timeout=0.2) as pool:
        with pytest.raises(aioenv.WorkerRemoved, match="every worker"):
            [
                g
                async for g in aioenv.collect_groups(
                    pool, policy, tasks, group_size=2, max_retries=5
                )
            ]


async def test_an_episode_cut_by_its_time_limit_is_a_finished_member() -> None:
    tasks = [{"task": 0, "length": 10}]
    async with aioenv.make_pool(
        envs.AsyncTaskEnv, 2, mode="coroutine", max_episode_steps=2
    ) as pool:
        [group] = [g async for g in aioenv.collect_groups(pool, policy, tasks, group_size=2)]
    assert group.complete and group.members == (0, 1)
    assert group.trajectories.truncated.tolist() == [False, True] * 2


def test_an_episode_out_of_its_budget_ended_as_it_should_and_a_failure_did_not() -> None:
    observation = np.zeros(2)

    def cut(reason: str) -> aioenv.Step[Any]:
        return aioenv.Step(
            observation, 0.0, False, True, {"aioenv": {"restarted": True, "reason": reason}}
        )

    assert failure_note(cut("episode_timeout")) is None
    assert failure_note(cut("EnvError: boom")) == "EnvError: boom"
    assert failure_note(aioenv.Step(observation, 1.0, False, True, {})) is None
    same_step = aioenv.Step(
        observation,
        0.0,
        False,
        True,
        {"aioenv": {"restarted": True, "reason": "WorkerDied: x"}},
        final_observation=observation,
        final_info={"aioenv": {"restarted": True, "reason": "WorkerDied: x"}},
    )
    assert failure_note(same_step) == "WorkerDied: x"
    # same_step: the cut-short episode's marker is in its final info, whatever the
    # next reset's info says
    reset_info = {"aioenv": {"restarted": True, "reason": "episode_timeout"}}
    for info in ({}, reset_info):
        cut_then_reset = dataclasses.replace(same_step, info=info)
        assert failure_note(cut_then_reset) == "WorkerDied: x"
    # same_step, an episode that ended by its time limit: no marker in its final info
    timed_out = aioenv.Step(
        observation, 1.0, False, True, {}, final_observation=observation, final_info={"x": 1}
    )
    assert failure_note(timed_out) is None
    # a restarted env's first state ends no episode, although it carries the marker
    restarted = aioenv.Step(observation, 0.0, False, False, cut("EnvError: boom").info)
    assert failure_note(restarted) is None


async def test_process_workers_play_groups_and_leave_nothing_behind() -> None:
    # A sync policy, process workers whose observations are views of shared memory (kept
    # as copies): the conftest checks no process is left.
    tasks = [{"task": task} for task in range(3)]
    async with aioenv.make_pool(
        envs.TaskEnv, 2, mode="process", copy=False, shared_memory=True
    ) as pool:
        collector = aioenv.collect_groups(pool, lambda batch: [1] * len(batch), tasks, group_size=2)
        collector.policy_version = 3
        groups = [g async for g in collector]
    assert sorted(g.task_id for g in groups) == [0, 1, 2]
    for group in groups:
        check_members_played(group)
        assert (group.trajectories.policy_version == 3).all()
        assert (group.trajectories.actions == 1).all()


async def test_a_worker_that_died_idle_gives_its_member_to_another(tmp_path: Path) -> None:
    # Restarts off: the death is raised when the member's next action is sent; that
    # worker is given up on and its member played again on the other.
    died = tmp_path / "died"
    tasks = [{"task": 0, "exit_once": str(died)}]
    pids: set[int] = set()  # the processes of the workers whose states the policy saw

    async def policy_once_it_died(batch: aioenv.Batch[Any]) -> list[int]:
        pids.update(pool.workers[worker_id].pid for worker_id in batch.worker_ids)
        if died.exists():  # the task's first step ran: its process ends 50 ms after it
            # The actions go out once that process is gone: to a worker that died idle.
            assert await eventually(lambda: not all(process_running(pid) for pid in pids))
        return [0] * len(batch)

    async with aioenv.make_pool(envs.TaskEnv, 2, mode="process") as pool:
        collector = aioenv.collect_groups(pool, policy_once_it_died, tasks, group_size=1)
        [group] = [g async for g in collector]
        assert list(pool.removed) == [0] and pool.active_ids == [1]
    assert group.complete and group.members == (0,)
    [(member, reason)] = group.retried
    assert member == 0 and "WorkerDied" in reason
    check_members_played(group)


async def test_a_restarted_env_starts_with_the_options_of_the_reset_it_answers() -> None:
    async with aioenv.make_pool(
        envs.AsyncTaskEnv, 1, mode="coroutine", restart="on_failure"
    ) as pool:
        pool.send_action(aioenv.Reset(options={"task": 7, "fail": 1}), 0)
        await pool.get_state()
        pool.send_action(0, 0)
        cut, _ = await pool.get_state()  # the step crashed: the episode ends cut short
        assert cut.truncated and failure_note(cut) is not None
        pool.send_action(aioenv.Reset(options={"task": 8}), 0)  # starts the new env
        first, _ = await pool.get_state()
        assert first.info["aioenv"]["restarted"]
        assert first.observation.tolist() == [8, 0]  # not [-1, 0]: the options came


async def test_bad_input_is_refused_at_once() -> None:
    async with aioenv.make_pool(envs.AsyncTaskEnv, 1, mode="coroutine") as pool:
        tasks = [{"task": 0}]
        for size in (0, -1, 1.5, True, None):
            with pytest.raises(ValueError, match="group_size must be an int >= 1"):
                aioenv.collect_groups(pool, policy, tasks, group_size=size)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_retries must be an int >= 0"):
            aioenv.collect_groups(pool, policy, tasks, group_size=1, max_retries=-1)
        numpy_counts = aioenv.collect_groups(
            pool, policy, tasks, group_size=np.int64(2), max_retries=np.int64(0)
        )  # numpy's ints are counts too, taken as ints
        assert (numpy_counts.group_size, numpy_counts.max_retries) == (2, 0)
        assert type(numpy_counts.group_size) is int
        with pytest.raises(ValueError, match="tasks is empty"):
            aioenv.collect_groups(pool, policy, [], group_size=1)
        with pytest.raises(ValueError, match="tasks is empty"):
            aioenv.collect_groups(pool, policy, iter(()), group_size=1)
        with pytest.raises(TypeError, match="iterable of dicts"):
            aioenv.collect_groups(pool, policy, {"task": 0}, group_size=1)
        with pytest.raises(TypeError, match="task 0 is a int"):
            aioenv.collect_groups(pool, policy, [3], group_size=1)
        with pytest.raises(TypeError, match="callable policy"):
            aioenv.collect_groups(pool, "greedy", tasks, group_size=1)  # type: ignore[arg-type]
        later_bad = aioenv.collect_groups(pool, policy, [{"task": 0}, "oops"], group_size=1)  # type: ignore[list-item]
        await later_bad.__anext__()
        with pytest.raises(TypeError, match="task 1 is a str"):
            await later_bad.__anext__()
    async with aioenv.make_pool(
        envs.AsyncTaskEnv, 1, mode="coroutine", autoreset="next_step"
    ) as pool:
        with pytest.raises(ValueError, match="autoreset='disabled'"):
            aioenv.collect_groups(pool, policy, tasks, group_size=1)
    async with aioenv.make_pool(envs.AsyncTaskEnv, 1, mode="coroutine") as pool:
        pool.reset()  # a state not taken: the collector would lose it
        with pytest.raises(aioenv.StateNotTaken, match="worker 0"):
            await aioenv.collect_groups(pool, policy, tasks, group_size=1).__anext__()
        await pool.drain()

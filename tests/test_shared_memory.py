"""Observations in shared memory: the layout, exact round trips, the lifetime of what the
pool hands out, restarts, fallbacks and leaks."""

from __future__ import annotations

import contextlib
import copy
import gc
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from envs import BigObservation, DyingBig, Structured, expected_big_observation
from gymnasium import spaces
from support import mapped, wait_until

import aioenv
from aioenv.wire._shared_memory import Layout, memory_file

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd_create (Linux)"),
]

MEMORY_NAME = "memfd:aioenv-steps"


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types, all the way down (no silent conversion)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def mapped_in(pid: int) -> int:
    """How many of aioenv's memory files process ``pid`` maps."""
    return Path(f"/proc/{pid}/maps").read_text().count(MEMORY_NAME)


def open_memory_files(name: str = "aioenv") -> int:
    """How many of aioenv's memory files (those whose name starts with ``name``) this
    process has open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(f"/memfd:{name}")
    return count


@pytest.fixture(autouse=True)
def nothing_mapped_after() -> Any:
    # A test here counts the memory files this process has open: what an earlier test in
    # the same pytest-xdist worker left for the garbage collector must not count.
    gc.collect()
    assert open_memory_files() == 0, "an earlier test left a memory file descriptor open"
    yield
    gc.collect()
    assert mapped_in(os.getpid()) == 0, "a memory file is still mapped after the test"
    assert open_memory_files() == 0, "a memory file descriptor is still open"


async def trajectory(env: Any, n: int, steps: int, **options: Any) -> list[list[Any]]:
    """Per worker, every observation of ``steps`` actions (taken with get_state)."""
    seen: list[list[Any]] = [[] for _ in range(n)]
    async with aioenv.make_pool(env, n, seed=7, **options) as pool:
        pool.reset()
        for _ in range(n * (steps + 1)):
            item = await pool.get_state()
            assert item is not None
            step, worker_id = item
            seen[worker_id].append(step.observation)
            if len(seen[worker_id]) <= steps:
                pool.send_action(len(seen[worker_id]) % 2, worker_id)
    return seen


# The layout --------------------------------------------------------------------------------
def test_layout_of_every_fixed_space_and_none_for_the_rest() -> None:
    nested = Structured().observation_space
    layout = Layout.of(nested)
    assert layout is not None
    assert layout.nbytes >= 48 * 48 * 3 + 8 + 3 + 3 * 8 + 7 * 4
    for space in (
        spaces.Box(0, 1, (3, 4), np.float32),
        spaces.Discrete(3),
        spaces.MultiBinary(5),
        spaces.MultiDiscrete([2, 2]),
    ):
        assert Layout.of(space) is not None, space
    for space in (
        spaces.Text(5),
        spaces.Sequence(spaces.Discrete(2)),
        spaces.Dict({"a": spaces.Box(0, 1, (2,)), "b": spaces.Text(3)}),
    ):
        assert Layout.of(space) is None, space


def test_write_then_read_is_exact_and_refuses_what_does_not_fit() -> None:
    env = Structured()
    observation, _ = env.reset(seed=3)
    layout = Layout.of(env.observation_space)
    assert layout is not None
    fd = memory_file(layout.nbytes, "aioenv-test")
    try:
        memory = mapped(layout, fd)
        assert memory.write(observation)
        assert same(memory.read(), observation)
        # A view, not a copy: the next write shows through.
        view = memory.read()["image"]
        following = env.step(0)[0]
        assert memory.write(following)
        assert np.array_equal(view, following["image"])
        for wrong in (
            {**following, "image": following["image"].astype(np.float64)},
            {**following, "image": following["image"][1:]},
            {**following, "mode": np.int64(1)},
            {**following, "extra": 1},
            {key: value for key, value in following.items() if key != "mode"},
            [following],
        ):
            assert not memory.write(wrong)
        assert same(memory.read(), following)  # a refused write changed nothing
    finally:
        os.close(fd)


# Through process workers -------------------------------------------------------------------
@pytest.mark.parametrize("envs_per_process", [1, 2])
async def test_observations_through_shared_memory_equal_the_socket_path(
    envs_per_process: int,
) -> None:
    options = {"mode": "process", "envs_per_process": envs_per_process}
    through_memory = await trajectory(Structured, 3, 8, shared_memory=True, **options)
    through_socket = await trajectory(Structured, 3, 8, shared_memory=False, **options)
    in_line = await trajectory(Structured, 3, 8, mode="sync")
    for a, b, c in zip(through_memory, through_socket, in_line, strict=True):
        assert len(a) == len(b) == len(c) == 9
        for x, y, z in zip(a, b, c, strict=True):
            assert same(x, y) and same(x, z)


async def lane_states(pool: aioenv.AsyncWorkerPool[Any], steps: int) -> tuple[list[Any], Any]:
    """Worker 0's states: its reset's, then one per action (0, 1, 0, ...), each with its
    observation copied as it came (a view of the lane's row changes with the next step);
    and its lane (None: it has none, or is no process worker)."""
    pool.send_action(aioenv.RESET, 0)
    states = []
    for t in range(steps + 1):
        state, _ = await pool.get_state()  # type: ignore[misc]
        states.append((state, copy.deepcopy(state.observation)))
        if t < steps:
            pool.send_action(t % 2, 0)
    worker = pool.workers[0]
    if not isinstance(worker, aioenv.ProcessWorker):
        return states, None
    return states, worker._host.lanes.get(worker._slot)  # type: ignore[union-attr]


async def test_nested_observations_are_answered_in_the_lane() -> None:
    """A Dict observation (a Discrete among its arrays, a Tuple inside) is laid out in the
    lane's row too: its steps are answered there, with the types the env gave."""
    options: dict[str, Any] = {"seed": 3, "copy": False}
    in_child = {"mode": "process", "shared_memory": True}
    async with aioenv.make_pool(Structured, 1, **in_child, **options) as pool:
        states, lane = await lane_states(pool, 4)
        assert lane is not None
        answered = int(lane.buffer.seqs[0])
        pool.send_action(1, 0)
        state, _ = await pool.get_state()  # type: ignore[misc]
        states.append((state, copy.deepcopy(state.observation)))
        assert int(lane.buffer.seqs[0]) == answered + 1  # answered in the lane's row
        assert np.shares_memory(state.observation["image"], lane.observations.views["image"])
        assert type(state.observation["mode"]) is int
    async with aioenv.make_pool(Structured, 1, mode="sync", **options) as pool:
        expected, _ = await lane_states(pool, 5)
    assert all(same(got, want) for (_, got), (_, want) in zip(states, expected, strict=True))


async def test_an_answer_on_the_socket_leaves_its_observation_in_the_lane() -> None:
    """A step with a final observation (autoreset in the same step) takes the socket, but
    its observation is written in the lane's row, the worker's one shared memory."""
    options: dict[str, Any] = {"seed": 3, "copy": False, "autoreset": "same_step"}
    in_child = {"mode": "process", "shared_memory": True}
    async with aioenv.make_pool(Structured, 1, **in_child, **options) as pool:
        states, lane = await lane_states(pool, 6)  # the sixth step ends the episode
        (last, observation) = states[-1]
        assert lane is not None and last.final_observation is not None
        assert np.shares_memory(last.observation["image"], lane.observations.views["image"])
    async with aioenv.make_pool(Structured, 1, mode="sync", **options) as pool:
        expected, _ = await lane_states(pool, 6)
    assert same(observation, expected[-1][1])
    assert same(last.final_observation, expected[-1][0].final_observation)


async def test_the_child_writes_into_memory_the_parent_mapped() -> None:
    async with aioenv.make_pool(BigObservation, 2, mode="process") as pool:  # "auto": 400 KB
        await pool.reset_all()
        for worker in pool.workers:
            assert isinstance(worker, aioenv.ProcessWorker)
            # The child maps the lane's memory when it reads the LANE message, which the
            # parent sends once the env reported its space: maybe after the first reset.
            assert wait_until(lambda pid=worker.pid: mapped_in(pid) == 1)
        assert mapped_in(os.getpid()) == 2
    async with aioenv.make_pool(BigObservation, 1, mode="process", shared_memory=False) as pool:
        await pool.reset_all()
        assert mapped_in(pool.workers[0].pid) == 0  # type: ignore[attr-defined]


async def test_small_observations_are_copies_under_auto() -> None:
    """Under "auto", an observation below AUTO_THRESHOLD is handed out as a copy of the
    lane's row, even with copy=False: no view of it changes under the caller."""
    make = lambda: BigObservation((8, 8))  # noqa: E731
    async with aioenv.make_pool(make, 1, mode="process", copy=False) as pool:
        pool.reset()
        await pool.get_state()  # may come before the lane is in place
        pool.send_action(0, 0)
        first, _ = await pool.get_state()  # type: ignore[misc]
        assert wait_until(lambda: mapped_in(pool.workers[0].pid) == 1)  # type: ignore[attr-defined]
        pool.send_action(0, 0)
        second, _ = await pool.get_state()  # type: ignore[misc]
        assert first.observation.flags.owndata and second.observation.flags.owndata
        assert np.array_equal(first.observation, expected_big_observation(1, (8, 8)))
        assert np.array_equal(second.observation, expected_big_observation(2, (8, 8)))


@pytest.mark.parametrize("wrong", ["dtype", "shape", "numpy_int"])
async def test_an_observation_that_does_not_fit_travels_unchanged(wrong: str) -> None:
    expected = await trajectory(lambda: Structured(wrong), 1, 3, mode="sync")
    seen = await trajectory(lambda: Structured(wrong), 1, 3, mode="process", shared_memory=True)
    assert all(same(x, y) for x, y in zip(seen[0], expected[0], strict=True))
    assert seen[0][1]["image"].dtype == expected[0][1]["image"].dtype


async def test_states_handed_out_are_copies_by_default() -> None:
    async with aioenv.make_pool(BigObservation, 1, mode="process") as pool:
        pool.reset()
        first, _ = await pool.get_state()  # type: ignore[misc]
        pool.send_action(0, 0)
        second, _ = await pool.get_state()  # type: ignore[misc]
        assert first.observation.flags.owndata and first.observation.flags.writeable
        assert np.array_equal(first.observation, expected_big_observation(0))
        assert np.array_equal(second.observation, expected_big_observation(1))
        first.observation[...] = 0  # the caller owns it
        pool.send_action(0, 0)
        third, _ = await pool.get_state()  # type: ignore[misc]
        assert np.array_equal(third.observation, expected_big_observation(2))
        assert np.array_equal(second.observation, expected_big_observation(1))


async def test_copy_false_hands_out_views_until_the_next_action() -> None:
    async with aioenv.make_pool(BigObservation, 1, mode="process", copy=False) as pool:
        pool.reset()
        await pool.get_state()  # may come before the memory is in place (see below)
        pool.send_action(0, 0)
        first, _ = await pool.get_state()  # type: ignore[misc]
        assert not first.observation.flags.owndata
        assert np.array_equal(first.observation, expected_big_observation(1))
        kept = first.observation.copy()
        pool.send_action(0, 0)
        second, _ = await pool.get_state()  # type: ignore[misc]
        assert np.shares_memory(first.observation, second.observation)  # the documented cost
        assert np.array_equal(second.observation, expected_big_observation(2))
        assert np.array_equal(kept, expected_big_observation(1))


async def test_batches_stack_straight_from_memory_and_own_their_rows() -> None:
    async with aioenv.make_pool(BigObservation, 3, mode="process", seed=1) as pool:
        await pool.reset_all()  # may come before the memory is in place
        for worker_id in range(3):
            pool.send_action(1, worker_id)
        batch = await pool.get_batch(min_size=3)
        assert batch.observations.shape == (3, 210, 160, 3, 4)
        for row, (step, _) in enumerate(batch):
            assert np.shares_memory(step.observation, batch.observations[row])
            assert np.array_equal(batch.observations[row], expected_big_observation(1))
        for worker_id in range(3):
            pool.send_action(1, worker_id)
        following = await pool.get_batch(min_size=3)
        assert np.array_equal(following.observations[0], expected_big_observation(2))
        assert np.array_equal(batch.observations[0], expected_big_observation(1))  # untouched
        assert np.array_equal(batch.states[0].observation, expected_big_observation(1))


async def test_batches_keep_the_states_scalar_observations_arrays() -> None:
    # A Box of shape (): each state's observation stays the 0-d array the env gave, not
    # the numpy scalar that indexing the stacked rows gives.
    async with aioenv.make_pool(
        lambda: BigObservation(()), 2, mode="process", shared_memory=True
    ) as pool:
        await pool.reset_all()  # may come before the memory is in place
        for worker_id in range(2):
            pool.send_action(1, worker_id)
        batch = await pool.get_batch(min_size=2)
        assert batch.observations.shape == (2,)
        for step, _ in batch:
            assert type(step.observation) is np.ndarray
            assert same(step.observation, expected_big_observation(1, ()))


async def test_copy_false_batches_reuse_one_array() -> None:
    async with aioenv.make_pool(BigObservation, 2, mode="process", copy=False) as pool:
        pool.reset()
        first = await pool.get_batch(min_size=2)
        first_observations = first.observations
        for worker_id in range(2):
            pool.send_action(0, worker_id)
        second = await pool.get_batch(min_size=2)
        assert np.shares_memory(first_observations, second.observations)
        assert np.array_equal(second.observations[1], expected_big_observation(1))


async def test_restarted_processes_get_fresh_memory() -> None:
    async with aioenv.make_pool(
        DyingBig, 2, mode="process", envs_per_process=2, restart="on_failure"
    ) as pool:
        await pool.reset_all()
        old = pool.workers[0].pid  # type: ignore[attr-defined]
        old_host = pool.workers[0]._host  # type: ignore[attr-defined]
        for worker_id in range(2):
            pool.send_action(0, worker_id)
        await pool.get_batch(min_size=2)
        pool.send_action(0, 0)  # worker 0's env dies: its host (and worker 1) restarts
        cut, _ = await pool.get_state()  # type: ignore[misc]
        # Its episode ends at the last observation, kept though the memory is replaced.
        assert cut.truncated and cut.info["aioenv"]["restarted"]
        assert np.array_equal(cut.observation, expected_big_observation(1))
        pool.send_action(0, 0)
        restarted, _ = await pool.get_state()  # type: ignore[misc]
        assert restarted.info["aioenv"]["restarted"] and not restarted.truncated
        assert np.array_equal(restarted.observation, expected_big_observation(0))
        new = pool.workers[0].pid  # type: ignore[attr-defined]
        assert new != old
        # The old process's lanes (one per env: their memory and wakes) are released at
        # once (no cycle left for the collector): what is mapped is the new one's.
        new_host = pool.workers[0]._host  # type: ignore[attr-defined]
        lanes = len(new_host.lanes) + len(new_host._offered)
        assert lanes >= 1 and mapped_in(os.getpid()) == lanes
        assert open_memory_files("aioenv-steps") == 2 * lanes  # its descriptor, its mapping's
        assert not old_host.lanes and not old_host._offered
        pool.send_action(0, 0)
        step, _ = await pool.get_state()  # type: ignore[misc]
        assert np.array_equal(step.observation, expected_big_observation(1))
        # The new child maps its lane as it reads the offer, which the restart's READY
        # brings after the reset it answers: read in order before this step, at the latest.
        assert mapped_in(new) >= 1


def test_shared_memory_option_is_checked() -> None:
    with pytest.raises(ValueError, match="shared_memory must be"):
        aioenv.ProcessWorker(BigObservation, shared_memory="yes", _start=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, 1])
def test_shared_memory_takes_a_bool_not_a_number(value: int) -> None:
    # 0 (off, as a config file may say it) was taken, and the steps still took the lane.
    with pytest.raises(
        ValueError, match=rf"^shared_memory must be True, False or 'auto', got {value}$"
    ):
        aioenv.ProcessWorker(BigObservation, shared_memory=value, _start=False)  # type: ignore[arg-type]
    # A vector env's process children (the engine's, whose buffer is shared memory) too.
    with pytest.raises(ValueError, match=r"shared_memory must be True, False or 'auto'"):
        aioenv.AioVectorEnv(BigObservation, 2, mode="process", shared_memory=value)  # type: ignore[arg-type]

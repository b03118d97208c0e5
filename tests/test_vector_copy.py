"""AioVectorEnv's ``copy`` (gymnasium's): with ``copy=True`` each call returns
observations of its own, copied once from what the workers gave (a view of their shared
memory); with ``copy=False`` arrays the vector env reuses, or the view itself, valid until
the next call."""

from __future__ import annotations

import mmap
import os
import tracemalloc
from typing import Any

import numpy as np
import pytest
from envs import BigObservation, EndlessBig, expected_big_observation
from support import mapped

import aioenv
from aioenv.core._environment import VectorSource
from aioenv.env_side._vector_runner import VectorRunner
from aioenv.wire import _shared_memory as shared_memory
from aioenv.wire._frames import HEADER, decode_batch_step, encode_batch_step
from aioenv.wire._shared_memory import Layout, memory_file

N = 4
HEADER_SIZE = HEADER.size
SHAPE = (96, 96, 4)  # above shared memory's automatic threshold
ZEROS = np.zeros(N, np.int64)


def big() -> BigObservation:
    return BigObservation(SHAPE)


def in_shared_memory(array: Any) -> bool:
    """Whether ``array`` views a memory mapping (a worker's shared memory)."""
    while array is not None:
        if isinstance(array, mmap.mmap):
            return True
        array = getattr(array, "base", None)
    return False


def expected(t: int) -> np.ndarray:
    return np.stack([expected_big_observation(t, SHAPE)] * N)


@pytest.mark.parametrize("per_worker", [N, N // 2])
def test_copy_true_returns_arrays_of_its_own(per_worker: int) -> None:
    with aioenv.AioVectorEnv(
        [big] * N, mode="process", envs_per_worker=per_worker, autoreset_mode="same_step"
    ) as envs:
        first, _ = envs.reset(seed=0)
        second = envs.step(ZEROS)[0]
        third = envs.step(ZEROS)[0]
        np.testing.assert_array_equal(first, expected(0))
        np.testing.assert_array_equal(second, expected(1))
        np.testing.assert_array_equal(third, expected(2))
        for one in (first, second, third):
            assert not in_shared_memory(one)
            assert one.flags.writeable and one.flags.owndata
        assert not np.shares_memory(second, third)


def endless() -> EndlessBig:
    return EndlessBig(SHAPE)


@pytest.mark.parametrize("per_worker", [N, N // 2, 1])
def test_copy_true_copies_the_observations_once(per_worker: int) -> None:
    """A step allocates one batch of observations in the parent: the copy it returns (the
    workers' views are not copied on the way first)."""
    batch_bytes = N * int(np.prod(SHAPE))
    with aioenv.AioVectorEnv([endless] * N, mode="process", envs_per_worker=per_worker) as envs:
        envs.reset(seed=0)
        kept = [envs.step(ZEROS)[0] for _ in range(2)]  # one-time allocations made
        tracemalloc.start()
        try:
            for step in range(3, 6):
                before, _ = tracemalloc.get_traced_memory()
                tracemalloc.reset_peak()
                kept.append(envs.step(ZEROS)[0])
                _, peak = tracemalloc.get_traced_memory()
                assert batch_bytes <= peak - before < 1.5 * batch_bytes, step
        finally:
            tracemalloc.stop()
        for t, observations in enumerate(kept, 1):
            np.testing.assert_array_equal(observations, expected(t))


def test_copy_false_hands_out_a_view_of_shared_memory() -> None:
    with aioenv.AioVectorEnv(
        [big] * N, mode="process", envs_per_worker=N, copy=False, autoreset_mode="same_step"
    ) as envs:
        envs.reset(seed=0)
        second = envs.step(ZEROS)[0]
        np.testing.assert_array_equal(second, expected(1))
        third = envs.step(ZEROS)[0]
        assert in_shared_memory(second) and in_shared_memory(third)
        assert np.shares_memory(second, third)  # valid until the next step, as documented
        np.testing.assert_array_equal(third, expected(2))


@pytest.mark.parametrize(
    ("options", "shared"),
    [
        # The engine's buffer holds both children's rows: zero copies across workers too.
        ({}, True),
        # A pool option: the pool's process workers, copied into one array reused.
        ({"shared_memory": False}, False),
    ],
    ids=["engine", "pool"],
)
def test_copy_false_reuses_one_array_across_workers(options: dict[str, Any], shared: bool) -> None:
    with aioenv.AioVectorEnv(
        [big] * N,
        mode="process",
        envs_per_worker=N // 2,
        copy=False,
        autoreset_mode="same_step",
        **options,
    ) as envs:
        envs.reset(seed=0)
        second = envs.step(ZEROS)[0]
        np.testing.assert_array_equal(second, expected(1))
        third = envs.step(ZEROS)[0]
        assert np.shares_memory(second, third)
        assert in_shared_memory(third) is shared
        np.testing.assert_array_equal(third, expected(2))


@pytest.mark.parametrize("copy", [True, False])
def test_a_masked_reset_keeps_the_other_envs_observations(copy: bool) -> None:
    """The envs not reset keep their last observation, read from their worker's memory."""
    with aioenv.AioVectorEnv(
        [big] * N, mode="process", envs_per_worker=N // 2, copy=copy, autoreset_mode="disabled"
    ) as envs:
        envs.reset(seed=0)
        envs.step(ZEROS)
        envs.step(ZEROS)
        mask = np.array([True, True, False, False])
        observations, _ = envs.reset(options={"reset_mask": mask})
        np.testing.assert_array_equal(observations[:2], expected(0)[:2])
        np.testing.assert_array_equal(observations[2:], expected(2)[2:])


@pytest.mark.parametrize("copy", [True, False])
def test_recv_returns_the_rows_of_the_workers_that_finished(copy: bool) -> None:
    with aioenv.AioVectorEnv(
        [big] * N,
        mode="process",
        envs_per_worker=N // 2,
        batch_size=N // 2,
        copy=copy,
        autoreset_mode="next_step",
    ) as envs:
        envs.async_reset(seed=0)
        seen: dict[int, int] = {}
        for _ in range(4):
            observations, _, _, _, infos = envs.recv()
            for row, env in enumerate(infos["env_id"].tolist()):
                t = seen.get(env, -1) + 1
                np.testing.assert_array_equal(observations[row], expected_big_observation(t, SHAPE))
                seen[env] = t
            if copy:
                assert not in_shared_memory(observations)
            envs.send(np.zeros(N // 2, np.int64))
        envs.recv()


class _Rows(BigObservation):
    """Observations of another dtype once ``t`` reaches 2 (they must not be converted)."""

    def step(self, action: int) -> Any:
        observation, *rest = super().step(action)
        return (observation.astype(np.int16) if self.t >= 2 else observation, *rest)


def rows() -> _Rows:
    return _Rows(SHAPE)


def test_a_child_stacks_its_envs_observations_straight_into_shared_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker's envs' observations are stacked into its shared memory, and the reply
    points there: no stack first, no copy of it (a row that does not fit the layout
    exactly travels through the socket, unconverted)."""

    runner = VectorRunner(VectorSource((big, rows)), 0, None)
    runner.reset()
    layout = Layout.of(runner.spaces[0])
    assert layout is not None
    fd = memory_file(layout.nbytes, "aioenv-test")
    try:
        shared = mapped(layout, fd)
    finally:
        os.close(fd)
    runner.stack_into = shared.views

    def no_copy(*args: Any) -> None:
        raise AssertionError("the stacked observations were copied into shared memory")

    monkeypatch.setattr(shared_memory, "_copy_into", no_copy)
    batch = runner.step([0, 0])
    assert batch.observations is shared.views
    frame = encode_batch_step(1, batch, 0, shared)
    decoded = decode_batch_step(memoryview(frame)[HEADER_SIZE:], shared)
    assert decoded.observations is shared.views
    np.testing.assert_array_equal(shared.views, np.stack([expected_big_observation(1, SHAPE)] * 2))

    monkeypatch.undo()
    batch = runner.step([0, 0])  # env 1's observation is int16 now
    assert batch.observations is not shared.views
    assert batch.observations.dtype == np.int16
    decoded = decode_batch_step(
        memoryview(encode_batch_step(2, batch, 0, shared))[HEADER_SIZE:], shared
    )
    assert decoded.observations.dtype == np.int16
    np.testing.assert_array_equal(decoded.observations[1], expected_big_observation(2, SHAPE))

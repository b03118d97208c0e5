"""AioVectorEnv's ``copy`` (gymnasium's): with ``copy=True`` each call returns
observations of its own, copied once from what the workers gave (a view of their shared
memory); with ``copy=False`` arrays the vector env reuses, or the view itself, valid until
the next call."""

from __future__ import annotations

import mmap
import tracemalloc
from typing import Any

import numpy as np
import pytest
from envs import BigObservation, EndlessBig, expected_big_observation

import aioenv

N = 4
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


def test_copy_false_reuses_one_array_across_workers() -> None:
    with aioenv.AioVectorEnv(
        [big] * N, mode="process", envs_per_worker=N // 2, copy=False, autoreset_mode="same_step"
    ) as envs:
        envs.reset(seed=0)
        second = envs.step(ZEROS)[0]
        np.testing.assert_array_equal(second, expected(1))
        third = envs.step(ZEROS)[0]
        assert np.shares_memory(second, third)
        assert not in_shared_memory(third)
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

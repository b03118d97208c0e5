"""Every process aioenv starts for envs caps its native thread pools (``threads_per_env``,
default 1) before the envs are built, leaving the parent's alone: as seen from inside the
env, for process workers however envs are placed, and for Ray actors."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from envs import FAKE_THREADED, THREAD_VARIABLES, ThreadReport
from threadpoolctl import threadpool_info

import aioenv

# Serial (alone, after the parallel part of make test): it counts the threads each child starts.
pytestmark = pytest.mark.serial

FAKES = str(Path(__file__).parent / "fake_threaded")
TEST_PID = os.getpid()
#: How envs are placed in processes: one each, grouped in one worker, several per process.
PLACEMENTS = {
    "one-per-process": {"envs_per_worker": 1},
    "grouped": {"envs_per_worker": 2},
    "per-process": {"envs_per_worker": 1, "envs_per_process": 2},
}
DEFAULT = object()  # threads_per_env left out


def parent_threads() -> dict[str, Any]:
    """What bounds this process's threads, and what could have capped them."""
    return {
        "pools": {pool["internal_api"]: pool["num_threads"] for pool in threadpool_info()},
        "variables": {name: os.environ.get(name) for name in THREAD_VARIABLES},
        "imported": [name for name in FAKE_THREADED if name in sys.modules],
        "finders": list(sys.meta_path),
    }


@pytest.fixture
def parent_untouched() -> Iterator[dict[str, Any]]:
    """The parent's own thread pools, variables and imports, checked unchanged after the
    test."""
    before = parent_threads()
    yield before
    after = parent_threads()
    # Only the pools loaded before: starting Ray here may load libraries of its own.
    after["pools"] = {api: after["pools"].get(api) for api in before["pools"]}
    assert after == before


def reports(threads: Any = DEFAULT, **options: Any) -> list[dict[str, Any]]:
    """Each env's :class:`ThreadReport` after a reset, two envs in process workers."""
    if threads is not DEFAULT:
        options["threads_per_env"] = threads
    factory = options.pop("factory", lambda: ThreadReport(FAKES, test_pid=TEST_PID))
    options.setdefault("mode", "process")  # the default would step these cheap envs inline
    with aioenv.AioVectorEnv(factory, 2, **options) as envs:
        envs.reset(seed=0)
        return list(envs.get_attr("report"))


def fake_calls(threads: int) -> dict[str, list[tuple[str, int]]]:
    return {
        "torch": [("set_num_threads", threads), ("set_num_interop_threads", threads)],
        "cv2": [("setNumThreads", threads)],
    }


@pytest.mark.parametrize("placement", PLACEMENTS.values(), ids=PLACEMENTS.keys())
@pytest.mark.parametrize("threads", [DEFAULT, 2], ids=["default", "two"])
def test_each_env_process_caps_its_pools_before_the_env_is_built(
    placement: dict[str, int], threads: Any, parent_untouched: dict[str, Any]
) -> None:
    expected = 1 if threads is DEFAULT else threads
    for report in reports(threads, **placement):
        assert report["pools"], "numpy's BLAS is loaded in every env process"
        assert report["pools"] == dict.fromkeys(report["pools"], expected)
        assert report["variables"] == dict.fromkeys(THREAD_VARIABLES, str(expected))
        assert report["calls"] == fake_calls(expected)  # as the env imported them
        # OpenBLAS (numpy's BLAS here) starts its threads again in a forked child once its
        # count is set: those the cap lets it use (the caller is one), and none more, each
        # of which would spin 0.1 s of CPU at every child's start and then sit idle.
        assert report["native_threads"] == min(expected, len(os.sched_getaffinity(0))) - 1


@pytest.mark.parametrize("placement", PLACEMENTS.values(), ids=PLACEMENTS.keys())
def test_none_leaves_every_pool_as_the_libraries_set_it(
    placement: dict[str, int], parent_untouched: dict[str, Any]
) -> None:
    for report in reports(None, **placement):
        parent_pools = parent_untouched["pools"]
        assert report["pools"] == {api: parent_pools[api] for api in report["pools"]}
        assert report["variables"] == parent_untouched["variables"]
        assert report["calls"] == {"torch": [], "cv2": []}


def test_torch_and_cv2_are_capped_only_where_the_env_has_them(
    parent_untouched: dict[str, Any],
) -> None:
    planted = reports(factory=lambda: ThreadReport(FAKES, planted=True, test_pid=TEST_PID))
    absent = reports(factory=ThreadReport)
    assert [report["calls"] for report in planted] == [fake_calls(1)] * 2
    # Never imported for the caps: an env process without them stays without them.
    assert [report["calls"] for report in absent] == [{}, {}]
    assert all(report["pools"] == dict.fromkeys(report["pools"], 1) for report in absent)


def test_a_thread_variable_set_in_the_parent_keeps_its_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    # spawn: a forkserver started now would pass these variables to every later test's child
    for report in reports(context="spawn", envs_per_worker=1):
        expected = dict.fromkeys(THREAD_VARIABLES, "1")
        assert report["variables"] == {
            **expected,
            "OMP_NUM_THREADS": "3",
            "OPENBLAS_NUM_THREADS": "2",
        }
        assert report["pools"]["openblas"] == 2
        assert report["calls"]["torch"] == [("set_num_threads", 3), ("set_num_interop_threads", 1)]
        assert report["calls"]["cv2"] == [("setNumThreads", 1)]


def test_make_pool_and_make_vec_take_threads_per_env(parent_untouched: dict[str, Any]) -> None:
    gymnasium.register("aioenv-test/ThreadReport-v0", entry_point=ThreadReport)
    try:
        with aioenv.make_vec(
            "aioenv-test/ThreadReport-v0", 2, vector_kwargs={"threads_per_env": 2}
        ) as envs:
            envs.reset(seed=0)
            found = envs.call("get_wrapper_attr", "report")
    finally:
        del gymnasium.registry["aioenv-test/ThreadReport-v0"]
    assert [report["variables"]["OMP_NUM_THREADS"] for report in found] == ["2", "2"]


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_a_bad_threads_per_env_says_what_is_allowed(value: Any) -> None:
    with pytest.raises(
        ValueError, match=r"process worker \(ThreadReport\): threads_per_env must be an int >= 1"
    ):
        aioenv.make_pool(ThreadReport, 1, threads_per_env=value)
    with pytest.raises(ValueError, match=r"threads_per_env must be an int >= 1 .* or None"):
        aioenv.ProcessWorker(ThreadReport, threads_per_env=value)


def test_threads_per_env_is_for_workers_with_processes() -> None:
    with pytest.raises(TypeError, match="'threads_per_env' applies to process and ray workers"):
        aioenv.make_pool(ThreadReport, 1, mode="thread", threads_per_env=1)


@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("threads", [DEFAULT, 2, None], ids=["default", "two", "none"])
def test_ray_actors_cap_their_pools(threads: Any, parent_untouched: dict[str, Any]) -> None:
    found = reports(threads, mode="ray", num_cpus=0, envs_per_actor=2)
    if threads is None:
        assert [report["calls"] for report in found] == [{"torch": [], "cv2": []}] * 2
        return
    expected = 1 if threads is DEFAULT else threads
    for report in found:
        assert report["pools"] == dict.fromkeys(report["pools"], expected)
        assert report["variables"] == dict.fromkeys(THREAD_VARIABLES, str(expected))
        assert report["calls"] == fake_calls(expected)

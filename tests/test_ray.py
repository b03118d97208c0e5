"""Ray workers on the shared local Ray instance (see ray_support): behind the same interface
as every other kind, mixable with them, failing the same way, leaving nothing behind."""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import types
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import envs
import numpy as np
import pytest
from envs import (
    BigObservation,
    Counter,
    Dying,
    Failing,
    Gated,
    LockedState,
    MarksClose,
    Rendezvous,
    expected_big_observation,
)
from ray_support import actor_state, on_direct_connections
from support import (
    a_failed_rebuild_keeps_spaces,
    eventually,
    process_running,
    steps_from_inside_a_loop,
    wait_until,
)

import aioenv
import aioenv.workers.ray._actor as actor_module
from aioenv.core import _pickling as pickling
from aioenv.core._commands import RESET
from aioenv.core._environment import BatchStep
from aioenv.core._messages import EpisodeOptions
from aioenv.core._registry import snapshot as registry_snapshot
from aioenv.core._seeds import restart_seed
from aioenv.wire._requests import Request
from aioenv.workers.ray._actor import TIMED_REQUESTS

F = TypeVar("F", bound=Callable[..., Any])


def ray_test(function: F) -> F:
    """Needs Ray (skipped where it cannot be imported) and runs on the shared instance."""
    return pytest.mark.ray(pytest.mark.usefixtures("ray_local")(function))  # type: ignore[no-any-return]


OFF_CPU = {"num_cpus": 0}
ACTOR_NAME = "aioenv-test-actor"  # the test instance has 2 CPUs; these actors reserve none
# Tests of a short step deadline keep the start-up deadline long: starting an actor beside
# the rest of the suite, on two busy cores and the oldest Ray allowed, has taken over 30 s.
START_TIMEOUT = 120.0
# Seconds Ray's state API may take to report a killed actor DEAD, on the same busy machine.
DEATH_REPORT = 60.0


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=50,
    )


def test_importing_aioenv_never_imports_ray() -> None:
    result = run_python(
        """
        import sys
        import aioenv
        pool = aioenv.make_pool("CartPole-v1", 1, mode="sync")
        assert "ray" not in sys.modules, "import aioenv imported ray"
        assert aioenv.RayWorker.kind == "ray"
        assert "ray" not in sys.modules, "importing RayWorker imported ray"
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_ray_worker_without_ray_says_what_to_install() -> None:
    result = run_python(
        """
        import sys
        sys.modules["ray"] = None  # as if ray were not installed
        import aioenv
        try:
            aioenv.make_pool("CartPole-v1", 2, mode="ray")
        except ImportError as error:
            print(error)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'aioenv[ray]'" in result.stdout


@pytest.mark.ray
@pytest.mark.parametrize("option", ["num_cpus", "num_gpus"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_ray_workers_resource_that_is_no_count_is_refused_before_ray_starts(
    option: str, value: str
) -> None:
    result = run_python(
        f"""
        import ray
        import aioenv
        try:
            aioenv.make_pool("CartPole-v1", 1, mode="ray", {option}=float("{value}"))
        except ValueError as error:
            print(error)
        print("ray started:", ray.is_initialized())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{option} must be a finite number >= 0, got {value}",
        "ray started: False",
    ]


@ray_test
@pytest.mark.trio  # Ray workers through the trio bridge too
async def test_a_mixed_pool_returns_whichever_state_is_ready_first(gate: str) -> None:
    workers: list[aioenv.Worker[Any]] = [
        aioenv.RayWorker(lambda: Gated(gate), **OFF_CPU),
        aioenv.ProcessWorker(Counter),
        aioenv.ThreadWorker(Counter),
    ]
    async with aioenv.get_worker_pool(workers) as pool:
        for worker_id in range(3):
            pool.send_action(aioenv.RESET, worker_id)
        assert sorted([(await pool.get_state())[1] for _ in range(3)]) == [0, 1, 2]
        for worker_id in range(3):
            pool.send_action(1, worker_id)
        # The Ray worker's step waits at its gate; the local ones go on meanwhile.
        for _ in range(10):
            state, worker_id = await pool.get_state()
            assert worker_id in (1, 2)
            pool.send_action(1, worker_id)
        envs.open_gate(gate)
        seen: dict[int, Any] = {}
        while 0 not in seen:
            state, worker_id = await pool.get_state()
            seen[worker_id] = state
        assert seen[0]["t"] == 1


@ray_test
async def test_force_sync_over_ray_workers_returns_states_in_send_order(gate: str) -> None:
    workers = [
        aioenv.RayWorker(Counter, **OFF_CPU),
        aioenv.RayWorker(Counter, **OFF_CPU),
        aioenv.RayWorker(lambda: Gated(gate), **OFF_CPU),
    ]
    async with aioenv.get_worker_pool(workers, force_sync=True) as pool:
        for worker_id in (2, 1, 0):
            pool.send_action(aioenv.RESET, worker_id)
        assert [(await pool.get_state())[1] for _ in range(3)] == [2, 1, 0]
        for worker_id in (2, 1, 0):
            pool.send_action(1, worker_id)
        # Worker 2 is gated: the others answer first, yet its state comes first.
        asyncio.get_running_loop().call_later(0.5, envs.open_gate, gate)
        order = [(await pool.get_state())[1] for _ in range(3)]
        assert order == [2, 1, 0]


@ray_test
async def test_a_vector_env_of_ray_workers_made_inside_a_running_loop_steps() -> None:
    """Made inside a running loop, a vector env drives its workers from a loop of its own,
    in another thread, while its calls hold up the loop it was made on: each actor, once
    created, is sent what waits for it from the loop that watches its host, where it waited
    for the loop it was made on, and the vector env's start hung."""
    steps_from_inside_a_loop(aioenv.AioVectorEnv("CartPole-v1", 2, mode="ray", **OFF_CPU))


@ray_test
async def test_an_env_exception_is_an_env_error_with_the_actors_traceback() -> None:
    async with aioenv.make_pool(
        lambda: Failing("step"), 2, mode="ray", envs_per_actor=2, **OFF_CPU
    ) as pool:
        for worker_id in range(2):
            pool.send_action(aioenv.RESET, worker_id)
            await pool.get_state()
        pool.send_action(13, 1)
        with pytest.raises(aioenv.EnvError) as caught:
            await pool.get_state()
        error = caught.value
        assert error.worker_id == 1
        assert "ray worker 1" in str(error) and "slot 1" in str(error)
        assert "env exploded on purpose" in error.remote_traceback
        assert "in step" in error.remote_traceback
        assert isinstance(error.__cause__, ValueError)
        pool.send_action(0, 0)  # its sibling in the same actor is unharmed
        state, worker_id = await pool.get_state()
        assert worker_id == 0 and state["t"] == 1


@pytest.mark.loops
@ray_test
async def test_a_step_past_its_deadline_is_a_timeout_and_the_actor_is_killed(gate: str) -> None:
    worker: aioenv.RayWorker[Any] = aioenv.RayWorker(
        lambda: Gated(gate), step_timeout=1.0, start_timeout=START_TIMEOUT, **OFF_CPU
    )
    async with worker:
        worker.send_action(aioenv.RESET)
        await worker.get_state()
        actor = worker.actor_id
        worker.send_action(1)
        with pytest.raises(aioenv.WorkerTimeout, match="killed"):
            await worker.get_state()
        assert wait_until(lambda: actor_state(actor) == "DEAD", DEATH_REPORT)
        with pytest.raises(aioenv.WorkerTimeout):
            worker.send_action(1)  # without restarts it failed for good


@ray_test
async def test_a_dead_actor_restarts_with_a_deterministic_seed_for_every_env_it_served() -> None:
    seeds = aioenv.worker_seeds(7, 2)
    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        Dying,
        2,
        mode="ray",
        seed=7,
        envs_per_actor=2,
        restart="on_failure",
        on_failure=failures.append,
        **OFF_CPU,
    ) as pool:
        for worker_id in range(2):
            pool.send_action(aioenv.RESET, worker_id)
            state, _ = await pool.get_state()
        first = pool.workers[0].actor_id  # type: ignore[attr-defined]
        pool.send_action("kill", 0)  # SIGKILLs the actor's process
        state, worker_id = await pool.get_state()
        assert worker_id == 0
        assert state["t"] == 0 and state["seed"] == restart_seed(seeds[0], 1)
        assert pool.workers[0].restarts == 1
        # Its sibling was idle in the same actor: its next action meets a fresh env too.
        pool.send_action(1, 1)
        state, worker_id = await pool.get_state()
        assert worker_id == 1
        assert state["t"] == 0 and state["seed"] == restart_seed(seeds[1], 1)
        second = pool.workers[0].actor_id  # type: ignore[attr-defined]
        assert second != first and pool.workers[1].actor_id == second  # type: ignore[attr-defined]
        assert actor_state(first) == "DEAD"
        assert [type(error) for error in failures] == [aioenv.WorkerDied] * 2
        assert {error.worker_id for error in failures} == {0, 1}


@ray_test
async def test_closing_a_pool_leaves_no_actor_in_the_cluster() -> None:
    pool = aioenv.make_pool("CartPole-v1", 4, mode="ray", envs_per_actor=2, seed=1, **OFF_CPU)
    async with pool:
        for worker_id in range(4):
            pool.send_action(aioenv.RESET, worker_id)
        for _ in range(4):
            await pool.get_state()
        actors = {worker.actor_id for worker in pool.workers}  # type: ignore[attr-defined]
        assert len(actors) == 2
        assert all(actor_state(actor) == "ALIVE" for actor in actors)
    assert all(actor_state(actor) == "DEAD" for actor in actors)


@ray_test
async def test_close_sentinel_alone_closes_the_env_of_a_worker_alone_in_its_actor(
    tmp_path: Any,
) -> None:
    """CLOSE with nobody awaiting aclose(): the env is closed in the actor all the same, as a
    process worker's child closes it, whether or not the worker's actor serves others."""
    marks = [str(tmp_path / f"closed{n}") for n in range(3)]
    alone = aioenv.RayWorker(functools.partial(MarksClose, marks[0]), **OFF_CPU)
    pool = aioenv.make_pool(
        [functools.partial(MarksClose, mark) for mark in marks[1:]],
        mode="ray",
        envs_per_actor=2,
        **OFF_CPU,
    )
    async with alone, pool:
        alone.send_action(aioenv.RESET)
        await alone.get_state()
        pool.reset()
        await pool.get_batch(min_size=2)
        alone.send_action(aioenv.CLOSE)
        pool.send_action(aioenv.CLOSE, 0)
        pool.send_action(aioenv.CLOSE, 1)
        assert await eventually(lambda: all(map(os.path.exists, marks)), timeout=60), [
            os.path.exists(mark) for mark in marks
        ]


@ray_test
async def test_a_large_value_for_many_ray_workers_goes_into_the_object_store_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray

    puts: list[Any] = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value: puts.append(value) or real_put(value))
    weights = {"layer": np.arange(1 << 17, dtype=np.float64)}  # 1 MiB
    workers: list[aioenv.Worker[Any]] = [
        *aioenv.RayWorker.hosted(Counter, [None] * 3, 1, **OFF_CPU),
        aioenv.ThreadWorker(Counter),
    ]
    async with aioenv.get_worker_pool(workers) as pool:
        await pool.set_attr("weights", weights)
        assert len(puts) == 1 and puts[0] is weights
        got = await pool.get_attr("weights")
        for value in got:
            np.testing.assert_array_equal(value["layer"], weights["layer"])
        assert got[3] is weights  # the thread worker's env got the value itself
        await pool.set_attr("limit", 9)  # small values travel inline
        assert len(puts) == 1
        assert await pool.get_attr("limit") == [9] * 4


@ray_test
async def test_an_env_exception_with_restarts_rebuilds_that_env_in_the_same_actor() -> None:
    async with aioenv.make_pool(
        lambda: Failing("step"), 2, mode="ray", envs_per_actor=2, restart="on_failure", **OFF_CPU
    ) as pool:
        for worker_id in range(2):
            pool.send_action(aioenv.RESET, worker_id)
            await pool.get_state()
        actor = pool.workers[1].actor_id  # type: ignore[attr-defined]
        pool.send_action(0, 0)
        pool.send_action(13, 1)
        outcomes = [await pool.get_state() for _ in range(2)]
        states = {worker_id: state for state, worker_id in outcomes}
        assert states[0]["t"] == 1  # the sibling's step, untouched
        assert states[1]["t"] == 0 and pool.workers[1].restarts == 1  # a fresh env's reset
        assert pool.workers[1].actor_id == actor  # type: ignore[attr-defined]
        assert actor_state(actor) == "ALIVE"


@ray_test
async def test_a_restart_whose_build_fails_keeps_the_workers_spaces(tmp_path: Any) -> None:
    # As a process worker does (test_control): a rebuild that failed reports no spaces,
    # and the worker keeps those its env reported before.
    await a_failed_rebuild_keeps_spaces(tmp_path / "builds", "ray", **OFF_CPU)


@ray_test
async def test_a_timeout_with_restarts_replaces_the_actor_and_drops_its_late_reply(
    gate: str,
) -> None:
    worker: aioenv.RayWorker[Any] = aioenv.RayWorker(
        lambda: Gated(gate), seed=3, step_timeout=1.0, start_timeout=START_TIMEOUT, **OFF_CPU
    )
    async with aioenv.get_worker_pool([worker], restart="on_failure") as pool:
        pool.send_action(aioenv.RESET, 0)
        await pool.get_state()
        first = worker.actor_id
        pool.send_action(1, 0)
        state, _ = await pool.get_state()  # the new actor's reset, in place of the step
        assert state["t"] == 0 and state["seed"] == restart_seed(3, 1)
        assert worker.actor_id != first
        assert wait_until(lambda: actor_state(first) == "DEAD", DEATH_REPORT)
        envs.open_gate(gate)
        pool.send_action(1, 0)
        state, _ = await pool.get_state()
        assert state["t"] == 1  # this env's first step: nothing of the old one came through


@ray_test
async def test_an_idle_actor_killed_from_outside_is_worker_died_at_the_next_action() -> None:
    import ray

    options = {"actor_options": {"name": ACTOR_NAME}, **OFF_CPU}
    async with aioenv.make_pool(Counter, 1, mode="ray", **options) as pool:
        pool.send_action(aioenv.RESET, 0)
        state, _ = await pool.get_state()
        ray.kill(ray.get_actor(ACTOR_NAME))  # as an operator or an autoscaler might
        # The kill lands asynchronously: an action sent at once may still be answered,
        # by Ray (an actor call) until it reports the actor dead, and on the direct
        # connection until the actor's process has ended (Ray may report it dead first).
        assert wait_until(lambda: actor_state(pool.workers[0].actor_id) == "DEAD", DEATH_REPORT)
        assert wait_until(lambda: not process_running(state["pid"]), DEATH_REPORT)
        pool.send_action(1, 0)
        with pytest.raises(aioenv.WorkerDied, match="ray worker 0"):
            await pool.get_state()


@ray_test
@pytest.mark.parametrize(
    ("direct", "during"),
    [(True, r"sending a Ray actor's reply \(pickling\)"), (False, "a Ray actor call")],
    ids=["direct", "calls"],
)
async def test_a_state_that_cannot_travel_is_an_env_error_and_the_actor_lives_on(
    direct: bool, during: str
) -> None:
    async with aioenv.make_pool(
        LockedState, 1, mode="ray", direct_connection=direct, **OFF_CPU
    ) as pool:
        pool.send_action(aioenv.RESET, 0)
        await pool.get_state()
        # The step goes the way asked: on the connection once it is open (the reset may
        # have gone as an actor call before), else as an actor call.
        assert await eventually(
            lambda: pool.workers[0]._host._direct is None or pool.workers[0]._host._direct.open, 60
        )  # type: ignore[attr-defined]
        actor = pool.workers[0].actor_id  # type: ignore[attr-defined]
        pool.send_action("lock", 0)
        with pytest.raises(aioenv.EnvError, match=during) as caught:
            await pool.get_state()
        assert caught.value.worker_id == 0
        assert "lock" in caught.value.remote_traceback
        pool.send_action(0, 0)  # the same env, in the same actor, goes on
        state, _ = await pool.get_state()
        assert state["t"] == 2 and pool.workers[0].actor_id == actor  # type: ignore[attr-defined]


@ray_test
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "calls"])
async def test_a_request_that_cannot_be_pickled_fails_alone_and_the_actor_lives_on(
    direct: bool,
) -> None:
    # As for a state that cannot travel: an argument or action Ray cannot serialize
    # fails its own request, never the actor and the siblings it serves.
    async with aioenv.make_pool(
        Counter, 2, mode="ray", envs_per_actor=2, direct_connection=direct, **OFF_CPU
    ) as pool:
        pool.reset()
        await pool.get_batch(min_size=2)
        assert await eventually(lambda: on_direct_connections(pool), 60)
        actor = pool.workers[1].actor_id  # type: ignore[attr-defined]
        with pytest.raises(aioenv.EnvError, match="ray worker 1") as caught:
            await pool.set_attr("total", threading.Lock(), worker_ids=[1])  # always a call
        assert "pickle" in caught.value.remote_traceback
        pool.send_action(threading.Lock(), 1)
        with pytest.raises(aioenv.EnvError, match="ray worker 1"):
            await pool.get_state()
        for worker_id in range(2):
            pool.send_action(2, worker_id)
        states = dict(
            (worker_id, state) for state, worker_id in [await pool.get_state() for _ in range(2)]
        )
        assert states[0]["total"] == states[1]["total"] == 2
        assert pool.workers[1].actor_id == actor  # type: ignore[attr-defined]


@ray_test
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "calls"])
async def test_an_action_that_cannot_travel_restarts_nothing(direct: bool) -> None:
    """An action that will not pickle here, or will not unpickle in the actor, is the
    caller's error, raised at once with no restart: it was taken for the env's failure, so
    with restart="on_failure" the env was rebuilt and the action lost with no error."""
    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        Counter,
        1,
        mode="ray",
        direct_connection=direct,
        restart="on_failure",
        on_failure=failures.append,
        **OFF_CPU,
    ) as pool:
        await pool.reset_all()
        assert await eventually(lambda: on_direct_connections(pool), 60)
        for action in (threading.Lock(), envs.UnpicklableHere()):
            pool.send_action(action, 0)
            with pytest.raises(aioenv.EnvError, match="ray worker 0"):
                await pool.get_state()
        assert pool.restarts == 0 and not failures
        pool.send_action(2, 0)  # the same env goes on
        state, _ = await pool.get_state()  # type: ignore[misc]
        assert state["t"] == 1 and state["total"] == 2


@ray_test
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "calls"])
def test_a_ray_pool_works_from_a_second_asyncio_run_when_nothing_is_in_flight(
    direct: bool,
) -> None:
    # As process and thread workers do (test_lifecycle): the actors' hosts move to the
    # later loop once the first is closed.
    pool = aioenv.make_pool(Counter, 2, mode="ray", direct_connection=direct, **OFF_CPU)

    async def first() -> None:
        await pool.reset_all()
        assert await eventually(lambda: on_direct_connections(pool), 60)

    async def second() -> list[int]:
        try:
            for _ in range(2):  # on the direct connection too, once it is open again
                for worker_id in range(2):
                    pool.send_action(1, worker_id)
                batch = await asyncio.wait_for(pool.get_batch(min_size=2), 60)
                assert await eventually(lambda: on_direct_connections(pool), 60)
            return sorted(state["t"] for state in batch.states)
        finally:
            await pool.aclose()

    asyncio.run(first())
    assert asyncio.run(second()) == [2, 2]


@ray_test
@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "calls"])
async def test_large_observations_come_back_as_their_own_or_as_ray_views_the_pool_copies(
    copy: bool, direct: bool
) -> None:
    async with aioenv.make_pool(
        BigObservation, 1, mode="ray", copy=copy, direct_connection=direct, **OFF_CPU
    ) as pool:
        pool.send_action(aioenv.RESET, 0)
        await pool.get_state()
        assert await eventually(lambda: on_direct_connections(pool), 60)
        pool.send_action(0, 0)
        state, _ = await pool.get_state()
        np.testing.assert_array_equal(state.observation, expected_big_observation(1))
        # On the direct connection the state's array is its own, copy or not; through an
        # actor call it is a read-only view of Ray's buffer, which copy=True copies.
        assert state.observation.flags.writeable is (copy or direct)


@ray_test
async def test_a_ray_worker_steps_several_envs_together_with_envs_per_worker() -> None:
    async with aioenv.make_pool(
        "CartPole-v1", 2, mode="ray", envs_per_worker=3, envs_per_actor=2, seed=5, **OFF_CPU
    ) as pool:
        actors = {worker.actor_id for worker in pool.workers}  # type: ignore[attr-defined]
        assert len(actors) == 1  # both workers, three envs each, in one actor
        for worker_id in range(2):
            pool.send_action(aioenv.RESET, worker_id)
        for _ in range(2):
            batch, worker_id = await pool.get_state()
            assert isinstance(batch, BatchStep) and len(batch) == 3
            assert batch.observations.shape == (3, 4) and batch.observations.flags.writeable
        for worker_id in range(2):
            pool.send_action(np.ones(3, dtype=np.int64), worker_id)
        for _ in range(2):
            batch, _ = await pool.get_state()
            assert len(batch) == 3 and batch.rewards.tolist() == [1.0, 1.0, 1.0]


class _StateApi:
    """Stands in for the ``ray`` module's ``available_resources``: answers ``answer``,
    raises it if it is an exception, or waits until ``release`` is set (a read that
    hangs)."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = answer
        self.release = threading.Event()
        self.reads = 0

    def available_resources(self) -> Any:
        self.reads += 1
        if self.answer is None:
            self.release.wait()
            return {"CPU": 1.0}
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_clusters_free_resources_are_read_off_the_calling_thread_and_bounded() -> None:
    """Ray's state API answers (the answer), fails (None) or never answers (None after the
    patience, the pool making goes on; the reading thread ends once Ray lets it go)."""
    from aioenv.workers.ray._worker import free_resources

    assert free_resources(_StateApi({"CPU": 2.0}), patience=30.0) == {"CPU": 2.0}
    assert free_resources(_StateApi(RuntimeError("gcs down")), patience=30.0) is None
    hanging = _StateApi()
    assert free_resources(hanging, patience=0.05) is None
    assert hanging.reads == 1
    hanging.release.set()  # Ray lets the read go: its thread ends (the leak check sees it)


def test_a_shortage_says_what_the_pool_asked_for_against_what_the_cluster_has() -> None:
    from aioenv.workers.ray._worker import shortage

    found = shortage(4, {"num_cpus": 1, "num_gpus": 0}, {"CPU": 2.0})
    assert str(found) == (
        "4 actors x num_cpus=1 = 4 CPUs, the Ray cluster has 2 CPUs available: 2 actors will wait"
    )
    assert found is not None and "a smaller num_cpus" in found.advice
    assert shortage(4, {"num_cpus": 0.5}, {"CPU": 2.0}) is None
    assert shortage(4, {"num_cpus": 0.1}, {"CPU": 0.4}) is None
    # The resource that keeps the most actors waiting is the one named.
    gpus = shortage(3, {"num_cpus": 1, "num_gpus": 1}, {"CPU": 2.0, "GPU": 1.0})
    assert str(gpus) == (
        "3 actors x num_gpus=1 = 3 GPUs, the Ray cluster has 1 GPU available: 2 actors will wait"
    )
    custom = shortage(2, {"num_cpus": 0, "resources": {"simulator": 1}}, {"CPU": 2.0})
    assert str(custom) == (
        "2 actors x resources['simulator']=1 = 2 of 'simulator', the Ray cluster has "
        "0 of 'simulator' available: 2 actors will wait"
    )


@ray_test
async def test_actors_the_cluster_cannot_start_warn_at_once_and_fail_at_start_timeout() -> None:
    # Each actor asks for more CPUs than the test instance has: none of them can start.
    asked = (
        r"2 actors x num_cpus=3 = 6 CPUs, the Ray cluster has [\d.]+ CPUs? available: "
        r"2 actors will wait"
    )
    advice = r"ask for fewer actors \(more envs_per_actor\), a smaller num_cpus"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pool = aioenv.make_pool(
            Counter, 2, mode="ray", num_cpus=3, start_timeout=1.0, cleanup_time=0.5
        )
    async with pool:  # closed (its waiting actors killed) whatever the assertions find
        [warning] = [warning for warning in caught if warning.category is RuntimeWarning]
        assert re.search(f"{asked}.*{advice}", str(warning.message))
        assert warning.filename == __file__  # the user's line
        pool.send_action(aioenv.RESET, 0)
        with pytest.raises(
            aioenv.WorkerTimeout, match=f"start-up.*not answered.*{asked}.*{advice}"
        ):
            await pool.get_state()


@ray_test
async def test_a_ray_pool_makes_no_ray_call_on_its_event_loop(monkeypatch: Any) -> None:
    """Actor calls (a large value sent to every actor, steps, closing), ``ray.put`` and
    the pool's read of the cluster's free resources are made off the loop: each Ray
    function and actor method call made is recorded with whether its thread ran an event
    loop."""
    import ray
    import ray.actor

    on_loop: list[str] = []

    def recorded(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            try:
                asyncio.get_running_loop()
                on_loop.append(name)
            except RuntimeError:
                pass
            return call(*args, **kwargs)

        return record

    for name in ("put", "get", "wait", "kill", "available_resources"):
        monkeypatch.setattr(ray, name, recorded(f"ray.{name}", getattr(ray, name)))
    monkeypatch.setattr(
        ray.actor.ActorMethod,
        "_remote",
        recorded("ActorMethod._remote", ray.actor.ActorMethod._remote),
    )
    monkeypatch.setattr(
        ray.actor.ActorClass,
        "_remote",
        recorded("ActorClass._remote", ray.actor.ActorClass._remote),
    )
    large = np.zeros(200_000, np.uint8)  # over the threshold from which values are put
    async with aioenv.make_pool(
        "CartPole-v1", 4, mode="ray", envs_per_actor=2, seed=3, **OFF_CPU
    ) as pool:
        await pool.reset_all()
        await pool.set_attr("aioenv_test_value", large)
        assert all(value.shape == large.shape for value in await pool.get_attr("aioenv_test_value"))
        for worker_id in range(4):
            pool.send_action(0, worker_id)
        for _ in range(4):
            step, _ = await pool.get_state()
            assert step.observation.shape == (4,)
    assert on_loop == []


@ray_test
@pytest.mark.parametrize(
    ("pause", "thread_safe", "side_by_side"),
    [
        (0.005, None, True),  # slow envs, safe in threads: side by side
        # Fast envs stay in turn: test_an_actor_steps_fast_envs_in_turn, on a clock of its
        # own (through Ray a busy machine can make four steps of a fast env take 1 ms).
        (0.005, False, False),  # slow envs that say they are not safe in threads: in turn
    ],
)
async def test_an_actor_steps_its_slow_thread_safe_envs_side_by_side(
    tmp_path: Any, pause: float, thread_safe: bool | None, side_by_side: bool
) -> None:
    """Worker 0's env waits at each step for worker 1's to have begun its own (see
    Rendezvous). Once each env's last requests were timed, both steps travel in one
    actor call, worker 0's first: taken in turn,
    worker 1's step cannot begin while worker 0's waits, so theirs never meet, however
    long worker 0 waits (2 s here); taken side by side, they meet."""
    meeting = functools.partial(
        Rendezvous, str(tmp_path), pause=pause, patience=2.0, thread_safe=thread_safe
    )
    sources = [functools.partial(meeting, role="second"), functools.partial(meeting, role="first")]
    async with aioenv.make_pool(sources, mode="ray", envs_per_actor=2, **OFF_CPU) as pool:
        for action in [aioenv.RESET] + [0] * TIMED_REQUESTS:  # apart, the first's first:
            for worker_id in (1, 0):  # they meet (and the actor times each env's requests)
                pool.send_action(action, worker_id)
                step, _ = await pool.get_state()
                assert step.info["met"]
        pool.send_action(0, 0)
        pool.send_action(0, 1)  # the same loop iteration: the same actor call
        answers = {worker_id: step for step, worker_id in [await pool.get_state() for _ in "ab"]}
        assert answers[1].info["met"]
        assert answers[0].info["met"] is side_by_side
        assert answers[0].reward == float(side_by_side)


@pytest.mark.parametrize(("took", "side_by_side"), [(0.1e-3, False), (5e-3, True)])
def test_an_actor_steps_fast_envs_in_turn_and_slow_ones_side_by_side(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, took: float, side_by_side: bool
) -> None:
    """The actor's rule itself, in this process, on a clock on which each request takes
    ``took`` seconds: below SIDE_BY_SIDE_STEP the two envs' steps of one call are taken
    in turn, and worker 0's, which waits for worker 1's to begin, never meets it."""
    clock = iter(itertools.count(0.0, took))
    # The actor module's clock alone (its ``time``), not the process's.
    fake_time = types.SimpleNamespace(perf_counter=lambda: next(clock), sleep=time.sleep)
    monkeypatch.setattr(actor_module, "time", fake_time)
    meeting = functools.partial(Rendezvous, str(tmp_path), patience=0.5)
    sources = [functools.partial(meeting, role="second"), functools.partial(meeting, role="first")]
    payloads = [pickling.dumps(source) for source in sources]
    episode = EpisodeOptions(autoreset="next_step")
    actor = actor_module.EnvActor(payloads, [None, None], episode, registry_snapshot(), None)
    try:
        actor.serve([(w, 0, Request.BUILD, None) for w in (0, 1)])
        for seq in range(1, TIMED_REQUESTS + 2):  # apart, the first's first: they meet
            for w in (1, 0):
                request = Request.STEP
                ((_, _, step),) = actor.serve([(w, seq, request, RESET if seq == 1 else 0)])
                assert step.info["met"]
        step_seq = TIMED_REQUESTS + 2
        replies = actor.serve([(w, step_seq, Request.STEP, 0) for w in (0, 1)])
        answers = {w: step for w, _, step in replies}
        assert answers[1].info["met"]
        assert answers[0].info["met"] is side_by_side
    finally:
        actor.close()

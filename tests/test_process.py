"""What only process workers have: a child that can die, pickling, a wire, signals."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing.spawn
import os
import re
import signal
import threading
import time
import warnings
from typing import Any

import anyio
import gymnasium
import numpy as np
import pytest
from envs import (
    BigObservation,
    Counter,
    Dying,
    Gated,
    SlowClose,
    UnpicklableHere,
    expected_big_observation,
    open_gate,
)
from support import (
    cpu_seconds,
    eventually,
    process_state,
    states_or_errors,
    totals_after,
    worker_processes,
)

import aioenv
from aioenv import RESET


class DefinedInTestModule:
    """An env class defined in a test module (pickled by value through its factory)."""

    def reset(self, seed: int | None = None) -> str:
        return "reset from a test-module class"

    def step(self, action: Any) -> str:
        return f"stepped {action}"

    def terminated(self, state: str) -> bool:
        return False


class EchoAction(gymnasium.Env[Any, Any]):
    """Observes the action it was given, as it was given."""

    observation_space = action_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        return action, 0.0, False, False, {"dtype": action.dtype}


async def _reset(worker: aioenv.Worker[Any]) -> Any:
    worker.send_action(RESET)
    return await worker.get_state()


@pytest.mark.parametrize("how", ["exit", "kill"])
async def test_worker_that_dies_mid_step_raises_worker_died(how: str) -> None:
    async with aioenv.make_pool(Dying, 2, mode="process") as pool:
        pool.reset()
        for _ in range(2):
            await pool.get_state()
        pool.send_action(how, 0)
        pool.send_action(1, 1)
        with anyio.fail_after(20):
            results = await states_or_errors(pool, 2, aioenv.WorkerDied)
        died = results[0]
        assert isinstance(died, aioenv.WorkerDied)
        assert died.worker_id == 0
        assert died.exitcode == (3 if how == "exit" else -signal.SIGKILL)
        assert "process worker 0" in str(died)
        assert results[1]["t"] == 1  # the other worker kept working
        with pytest.raises(aioenv.WorkerRemoved) as removed:
            pool.send_action(1, 0)  # a dead worker says so when used again
        assert removed.value.__cause__ is died
        pool.send_action(1, 1)
        state, worker_id = await pool.get_state()  # type: ignore[misc]
        assert (worker_id, state["t"]) == (1, 2)


async def test_killed_from_outside_while_blocked_is_seen_promptly(gate: str) -> None:
    async with aioenv.ProcessWorker(lambda: Gated(gate)) as worker:
        await _reset(worker)
        worker.send_action(1)  # blocks in the env until the gate opens (never)
        os.kill(worker.pid, signal.SIGKILL)
        with anyio.fail_after(20), pytest.raises(aioenv.WorkerDied) as caught:
            await worker.get_state()
        assert caught.value.exitcode == -signal.SIGKILL


@pytest.mark.loops
async def test_large_state_survives_the_wire_on_any_loop() -> None:
    shape = (210, 160, 3, 4)  # ~400 KB per observation
    async with aioenv.ProcessWorker(BigObservation) as worker:
        step = await _reset(worker)
        np.testing.assert_array_equal(step.observation, expected_big_observation(0, shape))
        for t in range(1, 4):
            worker.send_action(2)
            step = await worker.get_state()
            assert step.observation.nbytes > 300_000
            np.testing.assert_array_equal(step.observation, expected_big_observation(t, shape))
            assert step.reward == 2.0


@pytest.mark.loops
async def test_large_action_is_written_without_blocking_the_loop() -> None:
    async with aioenv.ProcessWorker(Counter) as worker:
        await _reset(worker)
        action = np.ones((1000, 1000), dtype=np.int64)  # 8 MB, far beyond a socket buffer
        worker.send_action(action)
        assert (await worker.get_state())["total"] == 1_000_000


async def test_lambdas_and_test_module_classes_reach_the_child() -> None:
    limit = 7
    async with aioenv.ProcessWorker(lambda: Counter(limit=limit)) as worker:
        await _reset(worker)
    async with aioenv.ProcessWorker(DefinedInTestModule) as worker:
        assert await _reset(worker) == "reset from a test-module class"
        worker.send_action(3)
        assert await worker.get_state() == "stepped 3"


async def test_unpicklable_env_is_a_clear_error_at_construction() -> None:
    lock = threading.Lock()
    with pytest.raises(TypeError, match="could not be pickled.*thread worker"):
        aioenv.ProcessWorker(lambda: (lock, Counter())[1])


async def test_unpicklable_action_is_a_clear_error_and_the_worker_is_untouched() -> None:
    async with aioenv.make_pool(Counter, 2, mode="process") as pool:
        pool.reset()
        await pool.get_batch(min_size=2)
        with pytest.raises(TypeError, match="process worker 1 .*action could not be pickled"):
            pool.send_action(threading.Lock(), 1)
        pool.send_action(4, 1)  # nothing was in flight: the worker takes a new action
        state, worker_id = await pool.get_state()  # type: ignore[misc]
        assert (worker_id, state["total"]) == (1, 4)


async def test_an_action_the_child_cannot_unpickle_is_the_callers_error() -> None:
    """An action that pickles here and will not unpickle in the child (its class is not
    importable there, say) fails its step at once, naming the worker and the request, and
    the env is untouched: it was taken for the env's failure, so with restart="on_failure"
    the env was rebuilt and its reset answered the step, the action lost with no error."""
    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        Counter, 2, mode="process", restart="on_failure", on_failure=failures.append
    ) as pool:
        await pool.reset_all()
        pool.send_action(3, 1)
        await pool.get_state()
        pool.send_action(UnpicklableHere(), 1)
        with pytest.raises(aioenv.EnvError, match="process worker 1 ") as raised:
            await pool.get_state()
        assert pool.restarts == 0 and not failures
        assert "the request sent raised RuntimeError during unpickling" in str(raised.value)
        pool.send_action(4, 1)
        state, _ = await pool.get_state()  # type: ignore[misc]
        assert state["total"] == 7  # the same env's episode went on


async def test_structured_arrays_keep_their_fields_both_ways() -> None:
    record = np.dtype([("x", "<f4"), ("y", ">i2")])
    action = np.array([(1.5, 2), (-3.0, 4)], record)
    async with aioenv.ProcessWorker(EchoAction) as worker:
        await _reset(worker)
        worker.send_action(action)
        step = await worker.get_state()
    assert step.info["dtype"] == record  # the action as sent
    assert step.observation.dtype == record  # and the observation as the env returned it
    assert step.observation.tolist() == action.tolist()


async def test_children_ignore_sigint() -> None:
    async with aioenv.ProcessWorker(Counter) as worker:
        await _reset(worker)
        os.kill(worker.pid, signal.SIGINT)
        worker.send_action(1)
        assert (await worker.get_state())["t"] == 1
    assert worker.exitcode == 0


@pytest.mark.parametrize("ignore_sigterm", [False, True])
async def test_aclose_terminates_then_kills_a_worker_that_will_not_close(
    ignore_sigterm: bool,
) -> None:
    worker = aioenv.ProcessWorker(lambda: SlowClose(ignore_sigterm), cleanup_time=0.3)
    await _reset(worker)
    started = time.monotonic()
    await worker.aclose()
    elapsed = time.monotonic() - started
    assert worker.pid not in worker_processes()
    assert worker.exitcode == (-signal.SIGKILL if ignore_sigterm else -signal.SIGTERM)
    assert elapsed < 30  # bounded: not the 60 s the env's close() would take


@pytest.mark.loops
async def test_aclose_is_shielded_from_cancellation() -> None:
    worker = aioenv.ProcessWorker(lambda: SlowClose(), cleanup_time=0.3)
    await _reset(worker)
    with anyio.move_on_after(0.01):
        await worker.aclose()
    assert worker.exitcode == -signal.SIGTERM  # the close ran to the end regardless


async def test_close_sentinel_alone_still_bounds_the_child() -> None:
    """CLOSE with nobody awaiting aclose(): the child is still forced out in time."""
    worker = aioenv.ProcessWorker(lambda: SlowClose(), cleanup_time=0.2)
    await _reset(worker)
    worker.send_action(aioenv.CLOSE)
    with anyio.fail_after(20):
        while worker.exitcode is None:
            await asyncio.sleep(0.01)
    assert worker.exitcode == -signal.SIGTERM
    await worker.aclose()


async def test_no_thread_per_process_worker() -> None:
    # One thread at most, whatever the number of workers: the thread that starts children
    # off the loop, shared by every worker, which waits for restarts while children run
    # (and ends with the last one: the autouse leak check).
    before = set(threading.enumerate())
    async with aioenv.make_pool(Counter, 8, mode="process") as pool:
        pool.reset()
        await pool.get_batch(min_size=8)
        added = [thread.name for thread in set(threading.enumerate()) - before]
        assert added in ([], ["aioenv-process-start"])


@pytest.mark.loops
async def test_loop_is_free_while_a_process_worker_steps(gate: str) -> None:
    async with aioenv.ProcessWorker(lambda: Gated(gate)) as worker:
        await _reset(worker)
        worker.send_action(1)
        ticks = 0
        async with anyio.create_task_group() as group:
            waiter_done = anyio.Event()

            async def wait_for_state() -> None:
                await worker.get_state()
                waiter_done.set()

            group.start_soon(wait_for_state)
            for _ in range(20):
                await anyio.sleep(0.001)
                ticks += 1
            assert not waiter_done.is_set()  # still waiting, yet the loop ran 20 ticks
            open_gate(gate)
        assert ticks == 20 and waiter_done.is_set()


async def test_without_memfd_create_a_worker_steps_through_its_socket_without_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where there is no shared memory to map (macOS: no os.memfd_create), the default
    shared_memory='auto' takes the socket for every step, as documented, and says nothing:
    no lane is tried (it needs a memory file), so no warning that it could not be set up."""
    monkeypatch.delattr(os, "memfd_create")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with aioenv.ProcessWorker(lambda: BigObservation((8, 8))) as worker:
            first = await _reset(worker)
            worker.send_action(1)
            state = await worker.get_state()
    assert first.observation.shape == state.observation.shape == (8, 8)
    assert [str(warning.message) for warning in caught] == []


async def test_spawn_context_works() -> None:
    async with aioenv.ProcessWorker(Counter, context="spawn") as worker:
        state = await _reset(worker)
        assert state["pid"] == worker.pid
    assert worker.exitcode == 0


@pytest.mark.parametrize("context", ["forksever", 3, multiprocessing.get_context("spawn").Process])
def test_a_context_that_is_no_context_says_what_it_takes(context: Any) -> None:
    takes = r"^context must be None, a multiprocessing context or a start method \('"
    with pytest.raises(ValueError, match=rf"{takes}.*\), got {re.escape(repr(context))}$"):
        aioenv.make_pool(Counter, 2, mode="process", context=context)
    with pytest.raises(ValueError, match=takes):
        aioenv.AioVectorEnv("CartPole-v1", 2, mode="process", context=context)
    assert not worker_processes()


@pytest.mark.parametrize("context", ["forkserver", "spawn"])
async def test_other_multiprocessing_users_see_the_stdlibs_preparation_data(context: str) -> None:
    """aioenv leaves the main module out of its own children's start only: the function
    multiprocessing looks up is the stdlib's while a pool is open and after it closed."""
    stdlib = multiprocessing.spawn.get_preparation_data
    # Not aioenv's, not even left by an earlier test (under coverage it is coverage's
    # wrapper of the stdlib's: coverage measures children through it).
    assert not stdlib.__module__.startswith("aioenv"), stdlib.__module__
    with anyio.fail_after(30):
        async with aioenv.make_pool(Counter, 2, mode="process", context=context) as pool:
            await pool.reset_all()
            assert multiprocessing.spawn.get_preparation_data is stdlib
    assert multiprocessing.spawn.get_preparation_data is stdlib


MAIN_WITH_A_SIDE_EFFECT = """
import os
with open(os.environ["MARK"], "a") as mark:  # runs wherever this script is imported
    mark.write(f"{os.getpid()}\\n")
import asyncio
import aioenv

async def main() -> None:
    async with aioenv.make_pool(
        lambda: __import__("gymnasium").make("CartPole-v1"),  # from __main__: by value
        3, mode="process", context=os.environ["CONTEXT"],
    ) as pool:
        await pool.reset_all()
        pids = {worker.pid for worker in pool.workers}
    print(len(pids))

if __name__ == "__main__":
    asyncio.run(main())
"""


@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_children_do_not_rerun_the_users_main_module(tmp_path: Any, context: str) -> None:
    """A training script's top-level code (its imports: seconds and hundreds of MB for a
    deep learning framework) runs once, in the parent, not again in every child."""
    import subprocess
    import sys

    script, mark = tmp_path / "train.py", tmp_path / "mark"
    script.write_text(MAIN_WITH_A_SIDE_EFFECT)
    environment = {**os.environ, "MARK": str(mark), "CONTEXT": context}
    done = subprocess.run(
        [sys.executable, str(script)], env=environment, capture_output=True, text=True, timeout=50
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3"]  # three children served the pool
    assert len(mark.read_text().split()) == 1  # the parent's import only


@pytest.mark.serial  # it measures a child's CPU time
async def test_idle_spin_answers_like_a_sleeping_child_and_then_sleeps() -> None:
    """A child that polls before it sleeps steps the same; once the pool is idle it stops
    polling: over a second of idling it uses a fraction of a core (at most one spin of
    0.01 s after its last answer, plus the clock's granularity)."""
    async with (
        aioenv.make_pool(Counter, 2, mode="process", seed=3, idle_spin=0.01) as spinning,
        aioenv.make_pool(Counter, 2, mode="process", seed=3) as sleeping,
    ):
        for pool in (spinning, sleeping):
            await pool.reset_all()
        for t in range(20):
            assert await totals_after(spinning, t) == await totals_after(sleeping, t)
        pid = spinning.workers[0].pid
        # Past the last spin: the child blocks in its socket's recv (asleep, "S"); while it
        # spins it polls and yields, never asleep ("R").
        assert await eventually(lambda: process_state(pid) == "S"), process_state(pid)
        before = cpu_seconds(pid)
        # Idling is what is measured, so it takes the time it measures: over 1 s, a child
        # that kept polling would be on a CPU for most of it (a third even beside a busy
        # loop: past 0.25 s), one asleep for none of it.
        await asyncio.sleep(1.0)
        assert cpu_seconds(pid) - before < 0.25


@pytest.mark.parametrize("idle_spin", [-1e-3, 0.5, "fast"])
async def test_idle_spin_out_of_range_is_a_clear_error(idle_spin: Any) -> None:
    with pytest.raises(ValueError, match="idle_spin must be a number of seconds from 0 to 0.01"):
        aioenv.ProcessWorker(Counter, idle_spin=idle_spin)
    with pytest.raises(ValueError, match="idle_spin"):
        aioenv.make_pool(Counter, 1, mode="process", idle_spin=idle_spin)


def _child_spins(env: Any) -> list[float]:
    """How the child serving ``env`` waits: its IdleSpin's seconds (it has one)."""
    return [o.seconds for o in gc.get_objects() if type(o).__name__ == "IdleSpin"]


async def test_a_restarted_child_polls_as_its_worker_was_last_told() -> None:
    async with aioenv.make_pool(Counter, 1, mode="process", restart="on_failure") as pool:
        await pool.reset_all()
        (worker,) = pool.workers
        assert isinstance(worker, aioenv.ProcessWorker)
        worker.set_idle_spin(0.005)
        assert await pool.apply(_child_spins) == [[0.005]]
        pid = worker.pid
        os.kill(pid, signal.SIGKILL)
        pool.send_action(1, 0)
        with anyio.fail_after(30):
            state, _ = await pool.get_state()  # type: ignore[misc]
        assert state["pid"] == worker.pid != pid  # the new child's env's reset
        assert worker.idle_spin == 0.005
        assert await pool.apply(_child_spins) == [[0.005]]
    assert not worker_processes()


MAIN_WITH_A_FAILING_ENV = """
import asyncio
import aioenv


class Sandbox:
    def reset(self, seed=None):
        return 0

    def step(self, action):
        raise RuntimeError("the sandbox lost its shell")  # the user's line

    def terminated(self, state):
        return False


async def main() -> None:
    async with aioenv.make_pool(Sandbox, 1, mode="process", context=CONTEXT) as pool:
        await pool.reset_all()
        pool.send_action(1, 0)
        try:
            await pool.get_state()
        except aioenv.EnvError as error:
            print(error.remote_traceback)


if __name__ == "__main__":
    asyncio.run(main())
"""


@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_remote_traceback_names_the_scripts_file_and_line(tmp_path: Any, context: str) -> None:
    """An env defined in the user's ``__main__`` travels by value (cloudpickle); its
    remote traceback still names the script, the line and the line's source."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(MAIN_WITH_A_FAILING_ENV.replace("CONTEXT", repr(context)))
    line = MAIN_WITH_A_FAILING_ENV.splitlines().index(
        '        raise RuntimeError("the sandbox lost its shell")  # the user\'s line'
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stderr
    assert f'File "{script}", line {line + 1}, in step' in done.stdout, done.stdout
    assert 'raise RuntimeError("the sandbox lost its shell")' in done.stdout
    assert "<dynamic-code>" not in done.stdout


MAIN_THAT_SAYS_WHERE = """
import asyncio, sys
import aioenv
from where_env import Where


async def main() -> None:
    async with aioenv.make_pool(Where, 2, mode="process", context=sys.argv[1]) as pool:
        states = [state for state, _ in await pool.reset_all()]
    print(aioenv.__file__)
    for aioenv_file, env_file in states:
        print(aioenv_file)
        print(env_file)


if __name__ == "__main__":
    asyncio.run(main())
"""

WHERE_ENV = """
import sys


class Where:
    def reset(self, seed=None):
        return sys.modules["aioenv"].__file__, __file__

    def step(self, action):
        return 0

    def terminated(self, state):
        return False
"""


@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_children_import_what_the_parent_imported(tmp_path: Any, context: str) -> None:
    """A script run from a directory that holds another ``aioenv/`` and another copy of the
    env's module (a checkout's root): the children run the parent's aioenv and env code."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    package = Path(aioenv.__file__).parent
    scripts, elsewhere = tmp_path / "scripts", tmp_path / "checkout"
    scripts.mkdir()
    shutil.copytree(package, elsewhere / "aioenv", ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "where.py").write_text(MAIN_THAT_SAYS_WHERE)
    (scripts / "where_env.py").write_text(WHERE_ENV)
    (elsewhere / "where_env.py").write_text(WHERE_ENV)
    environment = {**os.environ, "PYTHONPATH": str(package.parent)}
    done = subprocess.run(
        [sys.executable, str(scripts / "where.py"), context],
        cwd=elsewhere,
        env=environment,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    parent, *children = done.stdout.split()
    assert parent == aioenv.__file__
    assert children == [parent, str(scripts / "where_env.py")] * 2

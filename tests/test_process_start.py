"""A process worker's child starts off the event loop: the loop serves other workers
meanwhile, and a worker closed while its child starts leaves no process behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import support
from envs import AsyncCounter, Counter, Dying

import aioenv
import aioenv.engine._start as start_module
from aioenv import RESET
from aioenv.workers._off_loop import OffLoopCalls
from aioenv.workers.process._host import CHILD_STARTS

#: How long a held start waits to be let go: far longer than the test needs when the loop
#: is free, so a start that holds the loop up is told apart without timing anything.
HOLD = 10.0


class HeldStarts:
    """Child starts held at a barrier (once ``armed``) until ``release`` is set, in
    whichever thread makes them; ``released`` records, per held start, whether it was let
    go before ``HOLD`` ran out."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, armed: bool = True) -> None:
        self.armed = armed
        self.holding = threading.Event()
        self.release = threading.Event()
        self.released: list[bool] = []
        original = start_module._child_start

        @contextlib.contextmanager
        def held() -> Iterator[None]:
            if self.armed:
                self.holding.set()
                self.released.append(self.release.wait(HOLD))
            with original():
                yield

        monkeypatch.setattr(start_module, "_child_start", held)

    async def wait_holding(self) -> None:
        assert await anyio.to_thread.run_sync(self.holding.wait, 2 * HOLD)


async def _steps(worker: aioenv.Worker[Any], count: int) -> None:
    for _ in range(count):
        worker.send_action(1)
        await worker.get_state()


async def test_coroutine_workers_step_while_a_process_child_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts = HeldStarts(monkeypatch)
    async with aioenv.AsyncEnvWorker(lambda: AsyncCounter(limit=1000)) as other:
        other.send_action(RESET)
        await other.get_state()
        worker = aioenv.ProcessWorker(Counter)  # its child's start waits at the barrier
        try:
            await starts.wait_holding()
            with anyio.fail_after(20):
                await _steps(other, 20)  # the loop serves the coroutine worker meanwhile
            starts.release.set()
            worker.send_action(RESET)
            with anyio.fail_after(20):
                state = await worker.get_state()
            assert state["t"] == 0
        finally:
            await worker.aclose()
    assert starts.released == [True]


@pytest.mark.loops
async def test_a_restarted_child_starts_while_the_loop_serves_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts = HeldStarts(monkeypatch, armed=False)
    async with (
        aioenv.AsyncEnvWorker(lambda: AsyncCounter(limit=1000)) as other,
        aioenv.make_pool(Dying, 1, mode="process", restart="on_failure") as pool,
    ):
        other.send_action(RESET)
        await other.get_state()
        pool.reset()
        await pool.get_state()
        starts.armed = True  # the replacement's start is held
        pool.send_action("exit", 0)
        await starts.wait_holding()
        with anyio.fail_after(20):
            await _steps(other, 20)
        starts.release.set()
        with anyio.fail_after(20):
            state, _ = await pool.get_state()  # type: ignore[misc]
        assert state["t"] == 0  # the restarted env's first state
        pool.send_action(1, 0)
        with anyio.fail_after(20):
            state, _ = await pool.get_state()  # type: ignore[misc]
        assert state["t"] == 1
    assert starts.released == [True]


async def test_a_child_that_starts_after_its_worker_was_closed_is_killed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts = HeldStarts(monkeypatch)
    worker = aioenv.ProcessWorker(Counter, cleanup_time=0.01)
    await starts.wait_holding()
    async with anyio.create_task_group() as group:
        group.start_soon(worker.aclose)
        host = worker._current_host()
        with anyio.fail_after(20):
            while not host._child._doomed:  # the close gave up waiting and asked for a kill
                await anyio.sleep(0.01)
        starts.release.set()
    assert worker.exitcode == -signal.SIGKILL


async def test_a_worker_closed_while_its_child_starts_leaves_no_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts = HeldStarts(monkeypatch)
    worker = aioenv.ProcessWorker(Counter)
    await starts.wait_holding()
    async with anyio.create_task_group() as group:
        group.start_soon(worker.aclose)
        await anyio.lowlevel.checkpoint()
        starts.release.set()
    # The close waited for the child, which found the close in its socket once started.
    assert worker.exitcode == 0


@pytest.mark.loops
async def test_a_start_that_fails_off_the_loop_is_the_workers_death(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @contextlib.contextmanager
    def failing() -> Iterator[None]:
        raise OSError("no more processes")
        yield

    monkeypatch.setattr(start_module, "_child_start", failing)
    async with aioenv.ProcessWorker(Counter) as worker:
        worker.send_action(RESET)
        with anyio.fail_after(20), pytest.raises(aioenv.WorkerDied) as died:
            await worker.get_state()
    assert "its process could not be started (OSError: no more processes)" in str(died.value)
    assert "process worker" in str(died.value)


async def test_a_dead_child_is_reaped_only_while_no_start_reads_the_process_table() -> None:
    # multiprocessing's table of children has no lock, and each start reads the exit
    # status of every child in it: aioenv reads a dead child's status and closes it only
    # while no start in another thread does (PROCESS_TABLE), and its event loop never
    # waits for that meanwhile.
    held, release = threading.Event(), threading.Event()

    def a_start_reading_the_table() -> None:
        with start_module.PROCESS_TABLE:
            held.set()
            release.wait(HOLD)

    async with (
        aioenv.AsyncEnvWorker(lambda: AsyncCounter(limit=1000)) as other,
        aioenv.ProcessWorker(Dying) as worker,
    ):
        for started in (other, worker):
            started.send_action(RESET)
            await started.get_state()
        pid = worker.pid
        holder = threading.Thread(target=a_start_reading_the_table)
        holder.start()
        try:
            assert await anyio.to_thread.run_sync(held.wait, HOLD)
            worker.send_action("exit")
            with anyio.fail_after(20):
                while support.process_running(pid):  # the forkserver, its parent, reaps it
                    await anyio.sleep(0.01)
                await _steps(other, 20)  # the loop serves the others meanwhile
            await anyio.sleep(0.5)  # time enough for the loop to see the child's end
            assert worker.exitcode is None  # not read while the table is held
        finally:
            release.set()
            holder.join()
        with anyio.fail_after(20), pytest.raises(aioenv.WorkerDied):
            await worker.get_state()
        assert worker.exitcode == 3


def start_threads() -> list[threading.Thread]:
    """The threads that start child processes off the loop (one, while it has work)."""
    return [thread for thread in threading.enumerate() if thread.name == "aioenv-process-start"]


async def test_restarts_after_a_quiet_spell_start_in_the_same_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A new thread for each restart would hold the loop in Thread.start() each time.
    threads: list[threading.Thread] = []
    original = start_module._child_start

    @contextlib.contextmanager
    def recorded() -> Iterator[None]:
        threads.append(threading.current_thread())
        with original():
            yield

    monkeypatch.setattr(start_module, "_child_start", recorded)
    async with aioenv.make_pool(Dying, 1, mode="process", restart="on_failure") as pool:
        pool.reset()
        await pool.get_state()
        for _ in range(3):
            pool.send_action("exit", 0)
            with anyio.fail_after(20):
                await pool.get_state()  # the death, answered by the restarted env
            # A quiet spell: the start thread has nothing to do (it waits for a call, or
            # it has ended, as a thread per start would) before the next restart asks.
            assert await support.eventually(lambda: CHILD_STARTS.idle or not start_threads())
        assert pool.restarts == 3
    restart_threads = threads[-3:]
    assert all(thread is restart_threads[0] for thread in restart_threads), restart_threads
    assert restart_threads[0] is not threading.current_thread()  # off the loop


class RacedProcess:
    """A process whose ``start()`` raises AttributeError ``raced`` times, as Python 3.10's
    does when another thread closes a process meanwhile (before starting anything); with
    ``started_anyway``, after it had started."""

    def __init__(self, raced: int, started_anyway: bool = False) -> None:
        self.raced = raced
        self.started_anyway = started_anyway
        self.starts = 0
        self.pid: int | None = None

    def start(self) -> None:
        self.starts += 1
        if self.starts <= self.raced:
            if self.started_anyway:
                self.pid = 4321
            raise AttributeError("'NoneType' object has no attribute 'poll'")
        self.pid = 1234


def test_a_start_that_raced_before_starting_anything_is_made_again() -> None:
    process = RacedProcess(raced=2)
    start_module._start_process(process)  # type: ignore[arg-type]
    assert (process.starts, process.pid) == (3, 1234)


def test_a_start_that_raced_after_starting_or_every_time_raises() -> None:
    started = RacedProcess(raced=1, started_anyway=True)
    with pytest.raises(AttributeError):
        start_module._start_process(started)  # type: ignore[arg-type]
    assert started.starts == 1  # never a second child
    always = RacedProcess(raced=100)
    with pytest.raises(AttributeError):
        start_module._start_process(always)  # type: ignore[arg-type]
    assert always.starts == start_module._START_ATTEMPTS


def off_loop_threads(name: str) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == name]


def test_the_start_thread_waits_for_more_while_held_and_ends_when_released() -> None:
    # Starts in a burst share one thread: Thread.start() holds the caller (an event loop)
    # until the new thread runs, which takes milliseconds on a busy machine.
    name = "aioenv-test-off-loop"
    calls = OffLoopCalls(name, linger=60.0)
    calls.hold()
    calls.hold()
    thread = calls.submit(lambda: threading.current_thread()).result(timeout=10)
    assert support.wait_until(lambda: calls.idle)  # its queue is empty: it waits for more
    assert thread.is_alive()
    assert calls.submit(lambda: threading.current_thread()).result(timeout=10) is thread
    calls.release()
    assert support.wait_until(lambda: calls.idle) and thread.is_alive()  # one holder left
    calls.release()  # the last hold: it returns once the idle thread has ended
    assert not thread.is_alive() and not off_loop_threads(name)
    # A later call starts a thread again, which ends once its queue is empty (no holder).
    later = calls.submit(lambda: threading.current_thread()).result(timeout=10)
    assert later is not thread
    later.join(timeout=10)
    assert not later.is_alive()


def test_a_held_start_thread_ends_after_lingering_with_nothing_to_do() -> None:
    name = "aioenv-test-off-loop-linger"
    calls = OffLoopCalls(name, linger=0.05)
    calls.hold()
    thread = calls.submit(lambda: threading.current_thread()).result(timeout=10)
    thread.join(timeout=10)  # never released: it ends once it lingered 50 ms
    assert not thread.is_alive() and not off_loop_threads(name)


async def test_a_pool_refused_for_one_unpicklable_env_leaves_no_hold_on_the_start_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each process worker holds the start thread while it is open; the ones built before
    # the worker that was refused are never closed, so they must let go of it.
    monkeypatch.setattr(CHILD_STARTS, "_linger", 60.0)  # a hold left would keep it for 60 s
    lock = threading.Lock()
    with pytest.raises(TypeError, match="could not be pickled"):
        aioenv.make_pool([Counter, Counter, lambda: (lock, Counter())[1]], mode="process")
    async with aioenv.make_pool(Counter, 1, mode="process") as pool:
        pool.send_action(RESET, 0)
        await pool.get_state()
    assert not start_threads()  # the last worker's close ended it, as no hold is left


@pytest.mark.timeout(180)
@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_children_of_the_default_forkserver_start_with_aioenvs_preloads(context: str) -> None:
    """The forkserver's server imports what every child imports, once (its preload list
    is set by aioenv's first start, in a fresh interpreter here): a module only the
    preload imports is there in each child. Under spawn, nothing is preloaded."""
    preload_only = "aioenv.workers.process._thread_caps_preload"
    code = (
        "import sys, aioenv\n"
        f"with aioenv.AioVectorEnv('CartPole-v1', 2, mode='process', context={context!r}) as e:\n"
        f"    print(e.apply(lambda env: {preload_only!r} in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=150, check=False
    )
    assert result.returncode == 0, result.stderr
    expected = context == "forkserver"
    assert result.stdout.strip() == str((expected, expected))


@pytest.mark.timeout(180)
def test_a_forkserver_with_a_preload_list_of_the_users_loads_openblas_as_the_user_set_it() -> None:
    """aioenv's server loads OpenBLAS with one thread and its last preload takes the
    variable that asked for it out again; a server with a preload list of the user's
    (which lacks that module) is left as the user's environment says: an uncapped child
    has OpenBLAS's own count and no variable it did not set (a fresh interpreter, whose
    first start launches the server)."""
    code = (
        "import multiprocessing, os, aioenv\n"
        "from threadpoolctl import threadpool_info\n"
        "def blas():\n"
        "    return [p['num_threads'] for p in threadpool_info() if p['internal_api'] == 'openblas']\n"
        "context = multiprocessing.get_context('forkserver')\n"
        "context.set_forkserver_preload(['numpy'])\n"
        "with aioenv.AioVectorEnv(\n"
        "    'CartPole-v1', 1, mode='process', context=context, threads_per_env=None\n"
        ") as e:\n"
        "    [(variable, child)] = e.apply(lambda env: (os.environ.get('OPENBLAS_NUM_THREADS'), blas()))\n"
        "print(repr((variable, child == blas())))\n"
    )
    environment = {k: v for k, v in os.environ.items() if k not in THREAD_LOAD_VARIABLES}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr((None, True))


#: What OpenBLAS reads for its thread count as it loads.
THREAD_LOAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")

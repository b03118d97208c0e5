"""Helpers shared by the tests: what processes and threads are left, waiting for a condition,
collecting states and errors."""

from __future__ import annotations

import functools
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

import aioenv
from aioenv.wire._shared_memory import Layout, SharedObservations

KINDS = ["sync", "thread", "process", "async"]
WORKERS: dict[str, Any] = {
    "sync": aioenv.SyncWorker,
    "thread": aioenv.ThreadWorker,
    "process": aioenv.ProcessWorker,
    "async": aioenv.AsyncEnvWorker,
}
#: Pool configurations the pool-level tests run through: each kind alone, and mixed.
POOL_MODES: dict[str, Any] = {
    "sync": "sync",
    "thread": "thread",
    "process": "process",
    "async": "async",
    "mixed": ["process", "thread", "sync"],
    "mixed_async": ["async", "process", "thread"],
}


def mapped(layout: Layout, fd: int) -> SharedObservations:
    """Observations laid out by ``layout`` in memory file ``fd``, mapped here (a mapping
    of its own: the caller may close ``fd``), as a lane maps its row."""
    return SharedObservations(layout, layout.views(mmap.mmap(fd, layout.nbytes)))


def modes(mode: Any, n: int) -> Any:
    """``make_pool``'s ``mode`` for ``n`` workers: one kind, or the mixed list cycled."""
    return mode if isinstance(mode, str) else (list(mode) * n)[:n]


def _read(path: str) -> bytes:
    """A small file of ``/proc``, read with two system calls (a third of ``Path.read_text``'s
    cost: the leak check after every test reads a few of them)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


def process_running(pid: int) -> bool:
    """Process ``pid`` runs: a zombie has ended, and a process reaped while ``/proc`` is
    read (ESRCH then, on a file that was open) has too."""
    try:
        stat = _read(f"/proc/{pid}/stat")
    except OSError:  # FileNotFoundError, or ProcessLookupError: gone
        return False
    return stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used so far (user and system), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> list[int]:
    """The children of process ``pid``, zombies included (as negative pids): read from
    ``/proc/PID/task/TID/children`` of each of its threads, a few small files, so that the
    leak check after every test costs microseconds, not a walk of ``/proc``."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:  # gone
        return []
    found: list[int] = []
    for thread in threads:
        try:
            listed = _read(f"/proc/{pid}/task/{thread}/children").split()
        except OSError:  # the thread ended meanwhile
            continue
        found.extend(int(child) if process_running(int(child)) else -int(child) for child in listed)
    return found


def _cmdline(pid: int) -> str:
    try:
        return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode()
    except OSError:
        return ""


#: Children of this process that serve the whole session, with their descendants: the
#: daemons of the shared local Ray instance (its actors' processes are theirs; the Ray
#: tests check actors through Ray's state instead).
SESSION_HELPERS: set[int] = set()


def direct_children() -> set[int]:
    return {child for child in children_of(os.getpid()) if child > 0}


def worker_processes() -> list[int]:
    """Descendants of this process other than multiprocessing's forkserver and resource
    tracker and the :data:`SESSION_HELPERS`, which live for the whole session (zombies
    included, as negative pids)."""
    found: list[int] = []
    stack = [os.getpid()]
    while stack:
        parent = stack.pop()
        for child in children_of(parent):
            if parent == os.getpid() and abs(child) in SESSION_HELPERS:
                continue
            if child > 0 and parent == os.getpid():
                command = _cmdline(child)
                if "resource_tracker" in command:
                    continue  # multiprocessing's helper, up for the whole session
                if "forkserver" in command:
                    stack.append(child)  # the server stays up; its children are workers
                    continue
            found.append(child)
            if child > 0:
                stack.append(child)
    return found


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("aioenv-")]


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def eventually(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """:func:`wait_until` for an async test: polls ``condition`` every 10 ms without
    blocking the event loop (asyncio, uvloop or trio); False if ``timeout`` passed first."""
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.01)
        return True
    return condition()


def process_state(pid: int) -> str | None:
    """Process ``pid``'s state letter in ``/proc`` (``R`` running or runnable, ``S`` asleep
    in a wait, ``Z`` a zombie, ...); None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


async def states_or_errors(
    pool: aioenv.WorkerPool[Any], count: int, error: type[BaseException]
) -> dict[int, Any]:
    """The next ``count`` outcomes by worker id: the state, or the ``error`` raised instead."""
    results: dict[int, Any] = {}
    for _ in range(count):
        try:
            state, worker_id = await pool.get_state()  # type: ignore[misc]
            results[worker_id] = state
        except error as raised:
            results[raised.worker_id] = raised  # type: ignore[attr-defined]
    return results


async def a_failed_rebuild_keeps_spaces(
    builds: Path, mode: str, **options: Any
) -> tuple[Any, tuple[Any, Any]]:
    """One worker of :class:`envs.SecondBuildFails` (its builds counted in ``builds``):
    action 2 fails the env, the restart's build fails (its reset fails, and the worker
    restarts again), and the third build's env answers a reset. Every failure saw the
    worker with the spaces its env reported first, and it ends with equal ones. Returns
    the worker and those first spaces."""
    from envs import SecondBuildFails

    seen: list[tuple[str, Any, Any]] = []

    def on_failure(error: aioenv.WorkerError) -> None:
        worker = pool.workers[0]
        seen.append((type(error).__name__, worker.observation_space, worker.action_space))

    env = functools.partial(SecondBuildFails, str(builds))
    async with aioenv.make_pool(
        env, 1, mode=mode, restart="on_failure", max_restarts=3, on_failure=on_failure, **options
    ) as pool:
        await pool.reset_all()
        worker = pool.workers[0]
        spaces = (worker.observation_space, worker.action_space)
        assert spaces[0] is not None and spaces[1] is not None
        pool.send_action(2, 0)
        cut, _ = await pool.get_state(worker_id=0)  # type: ignore[misc]
        assert cut.truncated
        pool.send_action(aioenv.RESET, 0)
        state, _ = await pool.get_state(worker_id=0)  # type: ignore[misc]
        assert not state.terminated and not state.truncated
        assert pool.restarts == 2, seen
    assert [name for name, _, _ in seen] == ["EnvError", "EnvError"], seen
    assert all(observed == spaces[0] and acted == spaces[1] for _, observed, acted in seen), seen
    assert (worker.observation_space, worker.action_space) == spaces
    return worker, spaces


async def totals_after(pool: Any, action: Any) -> list[tuple[int, Any]]:
    """Send ``action`` to each of the pool's workers and take every answer: the
    (worker id, ``state["total"]``) pairs, sorted (a Counter env's running total)."""
    for worker_id in range(len(pool)):
        pool.send_action(action, worker_id)
    batch = await pool.get_batch(min_size=len(pool))
    return sorted((w, s["total"]) for w, s in zip(batch.worker_ids, batch.states, strict=True))


def steps_from_inside_a_loop(venv: Any) -> None:
    """Reset and step a two-env CartPole vector env from async code (its own loop runs the
    sync calls while the caller's is held up), then close it."""
    try:
        obs, _ = venv.reset(seed=0)
        assert obs.shape == (2, 4)
        assert venv.step([0, 1])[0].shape == (2, 4)
    finally:
        venv.close()

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import cloudpickle
import faulty_env
import pytest
from faulty_env import FaultyEnv
from leaks import memory_files, new_fds, open_fds
from support import wait_until

import aioenv

cloudpickle.register_pickle_by_value(faulty_env)


@pytest.fixture
def once(tmp_path: Path) -> str:
    """A marker path: a constructor fault given ``once=`` fires the first time only."""
    return str(tmp_path / "fired")


@pytest.fixture
def release(tmp_path: Path) -> Iterator[str]:
    """The gate a ``gated_hang`` waits for; opened at teardown so no thread is left."""
    path = tmp_path / "release"
    yield str(path)
    path.touch()


@pytest.fixture(scope="session")
def session_fds_opened() -> None:
    """Open what serves the whole session before any test counts descriptors: the
    forkserver and its connection, and what the first run of each kind of event loop opens
    for the process (uvloop keeps a pipe; a second run opens nothing)."""

    async def one_pool() -> None:
        workers: list[aioenv.Worker[Any]] = [
            aioenv.ProcessWorker(FaultyEnv, shared_memory=True),
            aioenv.ThreadWorker(FaultyEnv),
        ]
        async with aioenv.AsyncWorkerPool(workers) as pool:
            pool.reset()
            await pool.get_batch(min_size=len(workers))

    anyio.run(one_pool)
    anyio.run(one_pool, backend_options={"use_uvloop": True})


@pytest.fixture
def no_fd_or_memfd_leaks(session_fds_opened: None) -> Iterator[None]:
    """The test leaves no file descriptor open that it found closed, in particular none of
    aioenv's shared-memory files (memfds; a worker's descriptors close as it is reaped).
    An earlier test's arrays that view a memory file keep its descriptor until they are
    collected (a reference cycle holds them until the collector runs): they are collected
    first, so that what is counted is this test's."""
    gc.collect()
    before = open_fds()
    yield
    wait_until(lambda: not new_fds(before, open_fds()))
    after = open_fds()
    assert not memory_files(after), f"shared-memory files left open: {memory_files(after)}"
    assert not new_fds(before, after), f"file descriptors left open: {new_fds(before, after)}"

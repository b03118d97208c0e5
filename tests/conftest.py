from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import cloudpickle
import envs
import pytest
import uvloop
from support import POOL_MODES, wait_until, worker_processes, worker_threads

# Test envs travel to process workers by value, like envs defined in a user's __main__.
cloudpickle.register_pickle_by_value(envs)


def pytest_asyncio_loop_factories(config: Any, item: Any) -> Mapping[str, Callable[[], Any]]:
    """Every async test runs on the default asyncio loop and on uvloop."""
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every test leaves no worker process (nor zombie) and no worker thread behind."""
    yield
    assert wait_until(lambda: not worker_processes()), f"leaked processes: {worker_processes()}"
    assert wait_until(lambda: not worker_threads()), f"leaked threads: {worker_threads()}"


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[str]:
    """A file path that ``envs.Gated`` waits for; opened at teardown so nothing hangs."""
    path = str(tmp_path / "gate")
    yield path
    envs.open_gate(path)


@pytest.fixture(params=list(POOL_MODES))
def mode(request: pytest.FixtureRequest) -> Any:
    """Each pool configuration in turn: sync, thread, process, async, and two mixes."""
    return POOL_MODES[request.param]

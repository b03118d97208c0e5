from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import faulty_env
import pytest

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


@pytest.fixture
def no_fd_or_shm_leaks() -> Iterator[None]:
    shm_before = set(os.listdir("/dev/shm"))
    yield
    assert set(os.listdir("/dev/shm")) <= shm_before, "leaked shared-memory segments"

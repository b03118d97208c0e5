"""Worker kinds, all behind the :class:`Worker` interface.

The public names are these re-exports (and the same names at ``aioenv``'s top level). Each
kind whose env runs in the parent has a module (``_sync``, ``_thread``, ``_coroutine``);
each remote kind a folder holding both halves (``process/``: the worker, its ``_host``, how
a child is started (``_start``) and the ``_child`` program; ``ray/``: the worker, its
``_host`` and the ``_actor``). Beside them: the :class:`Worker` base (``_base``), the seam
a pool uses and the worker's side of it (``_seam``), where states are delivered and a
worker's requests in flight are kept (``_inbox``), supervision (with the hooks each kind
implements, ``_supervised``), and what the remote kinds share (``_slotted``,
``_replaceable``). ``RayWorker`` is imported on first use.
"""

from typing import TYPE_CHECKING, Any

from ..engine._start import default_context
from ._base import Worker
from ._coroutine import AsyncEnvWorker
from ._sync import SyncWorker
from ._thread import ThreadWorker
from .process._worker import ProcessWorker

if TYPE_CHECKING:
    from .ray._worker import RayWorker

__all__ = [
    "AsyncEnvWorker",
    "ProcessWorker",
    "RayWorker",
    "SyncWorker",
    "ThreadWorker",
    "Worker",
    "default_context",
]


def __getattr__(name: str) -> Any:
    # RayWorker's module is imported on first use only: it is light, but a Ray worker is
    # rare and its hosts import ray, which ``import aioenv`` must never do.
    if name == "RayWorker":
        from .ray._worker import RayWorker

        return RayWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

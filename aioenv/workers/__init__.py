"""Worker kinds: one private module per kind, all behind the :class:`Worker` interface.

The public names are these re-exports (and the same names at ``aioenv``'s top level); the
modules themselves (``_sync``, ``_thread``, ``_coroutine``, ``_process`` and the process
worker's ``_host`` and ``_child``; the Ray worker's ``_ray``, ``_ray_host`` and
``_ray_actor``) are private. ``RayWorker`` is imported on first use.
"""

from typing import TYPE_CHECKING, Any

from ._base import Worker
from ._coroutine import AsyncEnvWorker
from ._process import ProcessWorker, default_context
from ._sync import SyncWorker
from ._thread import ThreadWorker

if TYPE_CHECKING:
    from ._ray import RayWorker

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
        from ._ray import RayWorker

        return RayWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

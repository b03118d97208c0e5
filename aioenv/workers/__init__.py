"""Worker kinds: one private module per kind, all behind the :class:`Worker` interface.

The public names are these re-exports (and the same names at ``aioenv``'s top level); the
modules themselves (``_sync``, ``_thread``, ``_coroutine``, ``_process`` and the process worker's
``_host`` and ``_child``) are private.
"""

from ._base import Worker
from ._coroutine import AsyncEnvWorker
from ._process import ProcessWorker, default_context
from ._sync import SyncWorker
from ._thread import ThreadWorker

__all__ = [
    "AsyncEnvWorker",
    "ProcessWorker",
    "SyncWorker",
    "ThreadWorker",
    "Worker",
    "default_context",
]

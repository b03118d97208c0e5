"""Worker kinds: one file per kind, all behind the :class:`Worker` interface."""

from ._base import Worker
from .process import ProcessWorker
from .sync import SyncWorker
from .thread import ThreadWorker

__all__ = ["ProcessWorker", "SyncWorker", "ThreadWorker", "Worker"]

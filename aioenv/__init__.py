"""aioenv: an asyncio-native environment worker pool for reinforcement learning.

Drive many environments from one ``async`` training loop and act on whichever is ready
first. See the README for a tour.
"""

from ._batch import Batch
from ._environment import Environment, EnvSource, GymnasiumEnvironment, Step
from ._errors import (
    AioEnvError,
    ClosedError,
    EnvError,
    NoActionInFlight,
    StateNotTaken,
    UnknownWorker,
    WorkerDied,
    WorkerError,
    WorkerTimeout,
)
from ._factory import get_worker_pool, make_pool, worker_seeds
from ._pool import AsyncWorkerPool, SyncWorkerPool, WorkerPool
from ._sentinels import CLOSE, RESET, Command
from .workers import ProcessWorker, SyncWorker, ThreadWorker, Worker

__version__ = "0.1.0"

__all__ = [
    "CLOSE",
    "RESET",
    "AioEnvError",
    "AsyncWorkerPool",
    "Batch",
    "ClosedError",
    "Command",
    "EnvError",
    "EnvSource",
    "Environment",
    "GymnasiumEnvironment",
    "NoActionInFlight",
    "ProcessWorker",
    "StateNotTaken",
    "Step",
    "SyncWorker",
    "SyncWorkerPool",
    "ThreadWorker",
    "UnknownWorker",
    "Worker",
    "WorkerDied",
    "WorkerError",
    "WorkerPool",
    "WorkerTimeout",
    "__version__",
    "get_worker_pool",
    "make_pool",
    "worker_seeds",
]

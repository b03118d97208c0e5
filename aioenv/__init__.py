"""aioenv: an asyncio-native environment worker pool for reinforcement learning.

Drive many environments from one ``async`` training loop and act on whichever is ready
first. See the README for a tour.
"""

import inspect
from typing import TYPE_CHECKING, Any

from ._remote import RemoteEnv
from .collection._collect import Collector, Policy, collect
from .collection._groups import Group, GroupCollector, collect_groups
from .core._agents import AgentsStep
from .core._commands import CLOSE, RESET, Command, Reset
from .core._environment import BatchStep, Environment, EnvSource, Step
from .core._errors import (
    AioEnvError,
    ClosedError,
    EnvError,
    InvalidAction,
    NoActionInFlight,
    SpaceMismatch,
    StateNotTaken,
    TransportError,
    UnknownWorker,
    WorkerDied,
    WorkerError,
    WorkerPaused,
    WorkerRemoved,
    WorkerTimeout,
)
from .core._gymnasium import GymnasiumEnvironment
from .core._seeds import worker_seeds
from .loops import run
from .pool._batch import Batch
from .pool._factory import get_worker_pool, make_pool
from .pool._pool import AsyncWorkerPool, SyncWorkerPool, WorkerPool
from .pool._receiving import EpisodeStats
from .pool._remote_control import PerWorker, WorkerResults
from .pool._trajectories import Trajectories
from .vector._env import AioVectorEnv, VectorEnvClosed
from .vector._make_vec import make_vec
from .workers import AsyncEnvWorker, ProcessWorker, SyncWorker, ThreadWorker, Worker

if TYPE_CHECKING:
    from .workers import RayWorker

__version__ = "0.1.0"

__all__ = [
    "CLOSE",
    "RESET",
    "AgentsStep",
    "AioEnvError",
    "AioVectorEnv",
    "AsyncEnvWorker",
    "AsyncWorkerPool",
    "Batch",
    "BatchStep",
    "ClosedError",
    "Collector",
    "Command",
    "EnvError",
    "EnvSource",
    "Environment",
    "EpisodeStats",
    "Group",
    "GroupCollector",
    "GymnasiumEnvironment",
    "InvalidAction",
    "NoActionInFlight",
    "PerWorker",
    "Policy",
    "ProcessWorker",
    "RayWorker",
    "RemoteEnv",
    "Reset",
    "SpaceMismatch",
    "StateNotTaken",
    "Step",
    "SyncWorker",
    "SyncWorkerPool",
    "ThreadWorker",
    "Trajectories",
    "TransportError",
    "UnknownWorker",
    "VectorEnvClosed",
    "Worker",
    "WorkerDied",
    "WorkerError",
    "WorkerPaused",
    "WorkerPool",
    "WorkerRemoved",
    "WorkerResults",
    "WorkerTimeout",
    "__version__",
    "collect",
    "collect_groups",
    "get_worker_pool",
    "make_pool",
    "make_vec",
    "run",
    "worker_seeds",
]


def _present_as_public(value: Any) -> None:
    # Users (and tracebacks, reprs, the docs) see aioenv.EnvError, not aioenv.core._errors.EnvError.
    # Pickle finds a class by module and name, so aioenv.<name> must be the object itself.
    # type(value), not isinstance: a generic alias (Policy) passes isinstance(_, type) on
    # Python 3.10, and its __module__ is read-only.
    if issubclass(type(value), type) or inspect.isfunction(value):
        value.__module__ = __name__


for _name in __all__:
    if _name in globals():
        _present_as_public(globals()[_name])
del _name


def __getattr__(name: str) -> Any:
    # Importing aioenv never imports ray: RayWorker comes on first use.
    if name == "RayWorker":
        from .workers import RayWorker

        _present_as_public(RayWorker)
        return RayWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Building workers and pools in one call, and giving each worker its own seed."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._environment import EnvSource, resolve_source
from ._pool import AsyncWorkerPool, SyncWorkerPool, WorkerPool
from ._runner import EpisodeOptions
from ._supervision import Supervision
from .workers import ProcessWorker, SyncWorker, ThreadWorker, Worker

__all__ = ["get_worker_pool", "make_pool", "worker_seeds"]

_KINDS: dict[str, type[Worker[Any]]] = {
    "sync": SyncWorker,
    "thread": ThreadWorker,
    "process": ProcessWorker,
}
_OPTIONS: dict[str, frozenset[str]] = {
    "sync": frozenset({"cleanup_time"}),
    "thread": frozenset({"cleanup_time"}),
    "process": frozenset({"cleanup_time", "context", "envs_per_process", "shared_memory"}),
}
_POOL_OPTIONS = frozenset(
    {
        "step_timeout",
        "start_timeout",
        "restart",
        "max_restarts",
        "restart_backoff",
        "on_failure",
        "autoreset",
        "max_episode_steps",
        "check_actions",
        "copy",
    }
)


def worker_seeds(seed: int | None, num_workers: int) -> list[int | None]:
    """One independent seed per worker, drawn from ``numpy.random.SeedSequence(seed)``
    without touching any global RNG. ``None`` gives ``None`` for every worker (each env
    then seeds itself from OS entropy)."""
    if seed is None:
        return [None] * num_workers
    children = np.random.SeedSequence(seed).spawn(num_workers)
    return [int(child.generate_state(1, dtype=np.uint32)[0]) for child in children]


def get_worker_pool(
    workers: Sequence[Worker[Any]], force_sync: bool = False, **pool_options: Any
) -> WorkerPool[Any]:
    """A :class:`SyncWorkerPool` if ``force_sync`` else an :class:`AsyncWorkerPool`;
    ``pool_options`` (``cleanup_time``, ``step_timeout``, ``restart``, ...) go to it."""
    pool_class = SyncWorkerPool if force_sync else AsyncWorkerPool
    return pool_class(workers, **pool_options)


def make_pool(
    env: EnvSource | Sequence[EnvSource],
    num_workers: int | None = None,
    *,
    mode: str | Sequence[str] = "process",
    seed: int | None = None,
    force_sync: bool = False,
    **options: Any,
) -> WorkerPool[Any]:
    """Build ``num_workers`` workers for ``env`` and a pool over them.

    ``env`` is a gymnasium id, a factory or an instance; or a list with one of those per
    worker (``num_workers`` is then its length), so envs can differ per worker.
    ``mode`` is ``"sync"``, ``"thread"``, ``"process"``, or one mode per worker (a pool can
    mix kinds). ``seed`` gives every worker its own seed (see :func:`worker_seeds`).
    ``force_sync=True`` builds sync workers whatever ``mode`` says, in a
    :class:`SyncWorkerPool`. Worker options (``cleanup_time``, ``context``,
    ``envs_per_process``: how many envs share one child process, ``shared_memory``) go to
    the kinds that take them; pool options (``autoreset``, ``max_episode_steps``,
    ``check_actions``, ``copy``,
    ``step_timeout``, ``start_timeout``, ``restart``, ``max_restarts``,
    ``restart_backoff``, ``on_failure``) and ``cleanup_time`` go to the pool.
    """
    pool_options = {k: v for k, v in options.items() if k in _POOL_OPTIONS}
    worker_options = {k: v for k, v in options.items() if k not in _POOL_OPTIONS}
    if "cleanup_time" in worker_options:
        pool_options["cleanup_time"] = worker_options["cleanup_time"]
    _check_pool_options(pool_options)  # before any worker starts
    per_worker = isinstance(env, (list, tuple))
    sources: list[EnvSource] = list(env) if per_worker else [env]  # type: ignore[arg-type]
    if num_workers is None:
        if not per_worker:
            raise TypeError("make_pool() needs num_workers, unless env is a list of envs")
        num_workers = len(sources)
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
        raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
    modes = _modes(mode, num_workers)
    if force_sync:
        modes = ["sync"] * num_workers
    for option in worker_options:
        kinds = [kind for kind in _KINDS if option in _OPTIONS[kind]]
        if not kinds:
            raise TypeError(f"make_pool() got an unknown worker option {option!r}")
        if not any(kind in kinds for kind in modes):
            raise TypeError(
                f"make_pool() option {option!r} applies to {' and '.join(kinds)} workers, "
                f"and this pool has none"
            )
    if per_worker:
        if len(sources) != num_workers:
            raise ValueError(f"make_pool() got {len(sources)} envs for {num_workers} workers")
    elif not isinstance(env, str) and not callable(env) and num_workers > 1:
        raise TypeError(
            f"make_pool() needs a gymnasium id or a zero-argument factory to build "
            f"{num_workers} separate envs, got an instance of {type(env).__name__}; "
            "pass e.g. `lambda: MyEnv()`"
        )
    # An unknown gymnasium id fails here, before any worker starts.
    envs = [resolve_source(source) for source in sources]
    if not per_worker:
        envs *= num_workers
    return _make_pool(envs, num_workers, modes, seed, force_sync, pool_options, worker_options)


def _make_pool(
    envs: list[EnvSource],
    num_workers: int,
    modes: list[str],
    seed: int | None,
    force_sync: bool,
    pool_options: dict[str, Any],
    worker_options: dict[str, Any],
) -> WorkerPool[Any]:
    seeds = worker_seeds(seed, num_workers)
    envs_per_process = worker_options.pop("envs_per_process", 1)
    workers: list[Worker[Any]] = []
    try:
        processes = [i for i, kind in enumerate(modes) if kind == "process"]
        process_options = {k: v for k, v in worker_options.items() if k in _OPTIONS["process"]}
        hosted = iter(
            ProcessWorker.hosted(
                [envs[i] for i in processes],
                [seeds[i] for i in processes],
                envs_per_process,
                **process_options,
            )
            if processes
            else []
        )
        for kind, env, worker_seed in zip(modes, envs, seeds, strict=True):
            if kind == "process":
                workers.append(next(hosted))
                continue
            kind_options = {k: v for k, v in worker_options.items() if k in _OPTIONS[kind]}
            workers.append(_KINDS[kind](env, seed=worker_seed, **kind_options))
        return get_worker_pool(workers, force_sync, **pool_options)
    except BaseException:
        for worker in workers:
            worker._abandon()
        raise


def _check_pool_options(options: dict[str, Any]) -> None:
    """Raise what the pool would raise for these options, without building anything."""
    supervision = {field.name for field in dataclasses.fields(Supervision)}
    Supervision(**{k: v for k, v in options.items() if k in supervision})
    EpisodeOptions(options.get("autoreset", "disabled"), options.get("max_episode_steps"))
    cleanup_time = options.get("cleanup_time", 0.0)
    if not (isinstance(cleanup_time, (int, float)) and cleanup_time >= 0):
        raise ValueError(f"cleanup_time must be a number >= 0, got {cleanup_time!r}")


def _modes(mode: str | Sequence[str], num_workers: int) -> list[str]:
    modes = [mode] * num_workers if isinstance(mode, str) else list(mode)
    if len(modes) != num_workers:
        raise ValueError(f"mode has {len(modes)} entries for {num_workers} workers")
    for index, kind in enumerate(modes):
        if kind not in _KINDS:
            raise ValueError(
                f"mode[{index}] is {kind!r}; choose one of 'sync', 'thread', 'process'"
            )
    return modes

"""Building workers and pools in one call, and giving each worker its own seed."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..core._environment import EnvSource, VectorSource
from ..core._gymnasium import refuse_shared, resolve_source
from ..core._seeds import checked_count, worker_seeds
from ..workers import AsyncEnvWorker, ProcessWorker, SyncWorker, ThreadWorker, Worker
from ._options import POOL_OPTIONS, PoolOptions
from ._pool import AsyncWorkerPool, SyncWorkerPool, WorkerPool

__all__ = [
    "canonical_mode",
    "check_option_names",
    "get_worker_pool",
    "make_pool",
    "old_spellings",
    "option_names",
    "worker_modes",
]

_KINDS: dict[str, type[Worker[Any]]] = {
    "sync": SyncWorker,
    "thread": ThreadWorker,
    "process": ProcessWorker,
    "coroutine": AsyncEnvWorker,
}
#: Old spellings of a mode, still taken: ``"async"`` was the coroutine mode's first name.
_OLD_SPELLINGS = {"async": "coroutine"}
#: Each kind's name in ``make_pool``'s ``mode`` (Ray's class is imported on first use, see
#: :func:`_kind_class`).
_MODES = (*_KINDS, "ray")
#: The options that go to the pool and to every kind of worker (see :func:`_split_options`).
_BOTH = frozenset({"cleanup_time", "episode_timeout"})


@functools.cache
def _worker_options() -> dict[str, frozenset[str]]:
    """The options each kind's workers take from ``make_pool``, read from the kind itself:
    its constructor's keywords that are no pool option (``cleanup_time`` and
    ``episode_timeout`` are both, see :func:`_split_options`); ``envs_per_worker`` where
    the kind steps several envs together, and its host's ``envs_per_*`` where workers
    share one (``make_pool`` applies these two)."""
    table = {}
    for kind in _MODES:
        worker = _kind_class(kind)
        own = set(inspect.signature(worker).parameters) - POOL_OPTIONS - {"env", "seed", "_start"}
        own.update(_BOTH)
        if worker.steps_batches:
            own.add("envs_per_worker")
        per_host: str | None = getattr(worker, "_per_host_option", None)
        if per_host is not None:
            own.add(per_host)
        table[kind] = frozenset(own)
    return table


def worker_modes() -> tuple[str, ...]:
    """The worker kinds ``make_pool``'s ``mode`` names (``"async"``, the old spelling of
    ``"coroutine"``, is taken too but not listed)."""
    return _MODES


def option_names() -> frozenset[str]:
    """Every option ``make_pool`` takes by keyword but ``mode``: its own ``seed`` and
    ``force_sync``, the pool options and the worker options of every kind."""
    return POOL_OPTIONS.union({"seed", "force_sync"}, *_worker_options().values())


def old_spellings() -> str:
    """The old spellings of modes still taken, for error messages."""
    return ", ".join(f"{k!r} for {v!r}" for k, v in _OLD_SPELLINGS.items())


def check_option_names(options: Iterable[str], caller: str, also: Iterable[str] = ()) -> None:
    """TypeError naming ``caller`` (the function the user called) for an option that is
    none of :func:`option_names` (nor one of ``also``, the caller's own keywords), with
    the closest known name where one is close."""
    known = option_names().union(also)
    for option in options:
        if option not in known:
            close = difflib.get_close_matches(option, sorted(known), n=1)
            hint = (
                f"; did you mean {close[0]}=?"
                if close
                else "; the options are listed under 'Pool options' in the docs"
            )
            raise TypeError(
                f"{caller} got an unknown option {option!r}: it is no pool or worker option{hint}"
            )


def canonical_mode(mode: str) -> str:
    """``mode`` under its current name (``"async"`` is ``"coroutine"``'s old spelling)."""
    return _OLD_SPELLINGS.get(mode, mode)


def get_worker_pool(
    workers: Sequence[Worker[Any]], force_sync: bool = False, **pool_options: Any
) -> WorkerPool[Any]:
    """A :class:`SyncWorkerPool` if ``force_sync`` else an :class:`AsyncWorkerPool`;
    ``pool_options`` (see :func:`make_pool`) go to it."""
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

    :param env: a gymnasium id, a zero-argument factory, or an instance (for one worker);
        or a list with one of those per worker (``num_workers`` is then its length), so
        envs can differ per worker. A gymnasium id is looked up here, before any worker
        starts (an unknown id raises at once; an env registered by this script works in
        worker processes too; ``"module:Id"`` imports ``module`` first).
    :param mode: ``"sync"``, ``"thread"``, ``"process"`` (the default), ``"coroutine"``
        (coroutine envs, as tasks on the event loop; ``"async"`` is its old spelling, still
        taken), ``"ray"`` (Ray actors, see :class:`~aioenv.RayWorker`), or one mode per
        worker: a pool can mix kinds.
    :param seed: gives every worker its own seed (see :func:`worker_seeds`); default None.
    :param force_sync: build sync workers whatever ``mode`` says (coroutine workers stay
        coroutine workers: a coroutine env cannot step in line), in a
        :class:`SyncWorkerPool` (states in send order); default False.
    :param options: pool options go to the pool: ``autoreset``, ``max_episode_steps``,
        ``step_timeout``, ``start_timeout``, ``reset_timeout``, ``restart``,
        ``max_restarts``, ``restart_window``, ``restart_backoff``, ``on_failure``,
        ``episode_timeout``, ``check_actions``, ``copy`` (see :class:`~aioenv.WorkerPool`),
        checked before any worker starts;
        worker options go to the kinds that take them: ``cleanup_time`` (all
        kinds, and the pool); for process workers ``context``, ``shared_memory``,
        ``envs_per_process`` (how many workers share one child process; default 1) and
        ``idle_spin`` (see :class:`~aioenv.ProcessWorker`); for
        Ray workers ``num_cpus``, ``num_gpus``, ``resources``, ``runtime_env``,
        ``actor_options``, ``direct_connection`` (see :class:`~aioenv.RayWorker`; per
        actor) and
        ``envs_per_actor`` (how many workers share one actor; default 1); for both,
        ``threads_per_env`` (the threads each native thread pool of a child process or
        actor may use, default 1: see :class:`~aioenv.ProcessWorker`).
        ``envs_per_worker=k`` (any kind but coroutine; default 1): each worker steps ``k`` envs
        together; its actions are batches of ``k`` and its states
        :class:`~aioenv.BatchStep` (one message per batch for process workers).
    """
    pool_options, worker_options = _split_options(options)
    sources, num_workers = _sources(env, num_workers, worker_options.get("envs_per_worker", 1))
    modes = _modes(mode, num_workers)
    _check_worker_options(worker_options, modes)  # the kinds asked for, forced sync or not
    if force_sync:
        modes = ["coroutine" if kind == "coroutine" else "sync" for kind in modes]
    workers: list[Worker[Any]] = []
    try:
        _build_workers(sources, modes, worker_seeds(seed, num_workers), worker_options, workers)
        return get_worker_pool(workers, force_sync, **pool_options)
    except BaseException:
        for worker in workers:
            worker.abandon()
        raise


def _split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``make_pool``'s options as pool options (checked as the pool would check them,
    before any worker starts) and worker options. ``cleanup_time`` goes to both (a worker
    closes within the least of its own and the pool's), and so does ``episode_timeout``
    (a worker that steps several envs refuses it as it is built, before its host starts)."""
    pool_options = {k: v for k, v in options.items() if k in POOL_OPTIONS}
    worker_options = {k: v for k, v in options.items() if k not in POOL_OPTIONS or k in _BOTH}
    PoolOptions(**pool_options)  # raises what the pool would
    return pool_options, worker_options


def _sources(
    env: EnvSource | Sequence[EnvSource], num_workers: int | None, envs_per_worker: Any
) -> tuple[list[EnvSource], int]:
    """One env source per worker (gymnasium ids resolved here), and how many workers;
    ``num_workers`` and ``envs_per_worker`` checked here (:func:`_build_workers` takes the
    latter as it is)."""
    per_worker = isinstance(env, (list, tuple))
    sources: list[EnvSource] = list(env) if per_worker else [env]  # type: ignore[arg-type]
    if num_workers is None:
        if not per_worker:
            raise TypeError("make_pool() needs num_workers, unless env is a list of envs")
        num_workers = len(sources)
    num_workers = checked_count(num_workers, "num_workers")
    if per_worker and len(sources) != num_workers:
        raise ValueError(f"make_pool() got {len(sources)} envs for {num_workers} workers")
    grouped = checked_count(envs_per_worker, "envs_per_worker")
    refuse_shared(sources, "make_pool()", grouped if per_worker else num_workers * grouped)
    resolved = [resolve_source(source) for source in sources]  # an unknown id fails here
    return (resolved if per_worker else resolved * num_workers), num_workers


def _build_workers(
    sources: list[EnvSource],
    modes: list[str],
    seeds: list[int | None],
    options: dict[str, Any],
    into: list[Worker[Any]],
) -> None:
    """Append one worker per mode to ``into`` (so the caller can abandon what was built if
    a later one fails); process and Ray workers share hosts ``envs_per_*`` at a time."""
    options = dict(options)  # the caller's left whole
    envs_per_worker = int(options.pop("envs_per_worker", 1))  # checked by _sources
    if envs_per_worker > 1:
        sources = [VectorSource((source,) * envs_per_worker) for source in sources]
    hosted: dict[str, Iterator[Worker[Any]]] = {}
    try:
        for kind in dict.fromkeys(modes):  # the kinds whose workers share hosts, envs_per_* each
            per_host = getattr(_kind_class(kind), "_per_host_option", None)
            if per_host is None:
                continue
            indices = [i for i, mode in enumerate(modes) if mode == kind]
            kind_options = _options_for(kind, options)
            hosted[kind] = iter(
                _kind_class(kind).hosted(  # type: ignore[attr-defined]
                    [sources[i] for i in indices],
                    [seeds[i] for i in indices],
                    kind_options.pop(per_host, 1),
                    **kind_options,
                )
            )
        for kind, source, seed in zip(modes, sources, seeds, strict=True):
            if kind in hosted:
                into.append(next(hosted[kind]))
            else:
                into.append(_kind_class(kind)(source, seed=seed, **_options_for(kind, options)))
    finally:  # hosted workers started but not yet in ``into`` (a later worker failed)
        for rest in hosted.values():
            for worker in rest:
                worker.abandon()


def _kind_class(kind: str) -> type[Worker[Any]]:
    if kind == "ray":  # imported on first use: see aioenv.workers
        from ..workers import RayWorker

        return RayWorker
    return _KINDS[kind]


def _options_for(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k in _worker_options()[kind]}


def _check_worker_options(options: dict[str, Any], modes: list[str]) -> None:
    check_option_names(options, "make_pool()")
    for option in options:
        kinds = [kind for kind, names in _worker_options().items() if option in names]
        if not any(kind in kinds for kind in modes):
            given = modes[0] if len(set(modes)) == 1 else sorted(set(modes))
            raise TypeError(
                f"option {option!r} applies to {' and '.join(kinds)} workers, and "
                f"mode={given!r} makes none: drop it, or choose a mode that makes them"
            )


def _modes(mode: str | Sequence[str], num_workers: int) -> list[str]:
    one = isinstance(mode, str) or not isinstance(mode, Iterable)  # (checked below)
    modes: list[Any] = [mode] * num_workers if one else list(mode)
    if len(modes) != num_workers:
        raise ValueError(f"mode has {len(modes)} entries for {num_workers} workers")
    modes = [canonical_mode(kind) if isinstance(kind, str) else kind for kind in modes]
    for index, kind in enumerate(modes):
        if kind not in _MODES:
            given = f"mode={kind!r}" if one else f"mode[{index}]={kind!r}"
            raise ValueError(
                f"make_pool() got {given}; choose one of "
                f"{', '.join(map(repr, worker_modes()))} (old spellings taken: {old_spellings()})"
            )
    return modes

"""A worker whose env runs in a Ray actor, on this machine or anywhere in a Ray cluster.

An actor serves one env, or several with ``envs_per_actor``: each env is still its own
worker, with its own id and first-ready semantics, in a *slot* of the actor. An action
travels: :meth:`RayWorker._submit` hands it to the worker's
:class:`~aioenv.workers.ray._host.ActorHost`, which sends everything queued for that actor
in one loop iteration together, as one frame on a direct connection to the actor
(:mod:`aioenv.workers.ray._channel`) or as one actor call; the actor
(:class:`~aioenv.workers.ray._actor.EnvActor`) steps its envs with the same
:class:`~aioenv.env_side._runner.EnvRunner` as every other kind and returns the answers, which the
host delivers to :meth:`RayWorker._on_host_message`.

Ray is imported when the first Ray worker is made, never by ``import aioenv``.

What a pool's Ray actors ask of the cluster, against what it has available (:func:`shortage`,
:func:`free_resources`, below).

Ray starts an actor once the resources it reserves are free, and keeps the others waiting
in silence, for ever on a cluster that never grows. So when a pool starts its actors, what
they ask for is compared with what the cluster has free: a shortfall is a warning at once
and, if the actors are still waiting at ``start_timeout``, the reason their workers give.

What the cluster has free is read through Ray's state API (``ray.available_resources``),
which answers in tens of milliseconds, and which can also never answer: Ray 2.60's first
read in a process can block for good in ``GlobalState.available_resources_per_node``,
whichever thread makes it. So the read runs on a thread of its own, and the pool goes on
without it, with no warning, after :data:`READ_PATIENCE` (:func:`free_resources`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import threading
import types
import warnings
from collections.abc import Mapping, Sequence
from math import floor, inf
from pathlib import Path
from typing import Any, TypeVar

from ...core._docs import documented_with
from ...core._environment import BatchStep, EnvSource, Step
from ...core._messages import ControlRequest
from ...core._supervision import SUPERVISION_DEFAULTS
from ...env_side._thread_caps import DEFAULT_THREADS_PER_ENV
from ...wire._requests import Request
from .._base import Worker
from .._slotted import WORKER_KEYWORDS, SlottedWorker
from ._calls import ACTOR_CALLS, shared_request
from ._host import KILL_GRACE, ActorHost, ActorRecipe, import_ray, init_ray

__all__ = ["READ_PATIENCE", "RayWorker", "Shortage", "free_resources", "shortage"]

S = TypeVar("S")


@documented_with(Worker)
class RayWorker(SlottedWorker[S, ActorHost]):
    """Runs the env in a Ray actor: on the cluster Ray is initialised with
    (``ray.init(address=...)``) or ``RAY_ADDRESS`` names, else on a local Ray instance that
    the first Ray worker starts (no dashboard, a 256 MiB object store, usage stats off).

    The env is sent with cloudpickle, so lambdas and classes defined in ``__main__`` work,
    and the gymnasium ids registered in this process when the actor starts can be made there
    (``gymnasium.make`` in a factory); aioenv itself must be importable on every node
    (install it there, or use ``runtime_env``). A step past its deadline kills the actor
    (``ray.kill``) with every env it serves; a dead actor or a lost node is
    :class:`~aioenv.WorkerDied`, noticed by the request in flight (or the next one). Ray's
    own actor restarts are off: aioenv's ``restart`` option decides. ``aclose`` lets the
    actor close its envs for ``cleanup_time`` seconds, then kills it and waits until Ray
    reports it dead. Use :meth:`hosted` (or ``make_pool(..., mode="ray",
    envs_per_actor=k)``) to put several envs in one actor.

    Once the actor is made, the parent connects to it directly (TCP, to the address of
    the actor's node, opened with a secret that came through Ray) and steps, resets and
    rebuilds travel on that connection, one frame per loop iteration, without Ray's task
    submission (a millisecond or two per call on a busy machine); states come back as
    arrays of their own. Where the connection cannot be made (a firewall between the
    nodes), a RuntimeWarning says so and every message goes as an actor call, whose
    states are Ray's read-only views of its buffers (a pool with ``copy=True``, its
    default, hands out copies). Control requests and rollouts always go as actor calls:
    values sent with ``pool.set_attr``/``pool.call`` to several Ray workers, and
    rollout policies, go into the object store once.

    :param num_cpus: CPUs the actor reserves (default 1; may be fractional).
    :param num_gpus: GPUs the actor reserves (default 0).
    :param resources: custom resources the actor reserves, e.g. ``{"simulator": 1}``, to
        place it on the nodes that offer them; default None.
    :param runtime_env: the actor's Ray runtime environment (pip packages, working
        directory, environment variables); default None.
    :param actor_options: further options for Ray's ``.options()`` (``scheduling_strategy``,
        ``memory``, ``name``, ...); they win over the ones above. Default None.
    :param threads_per_env: the threads each native thread pool of the actor's process may
        use; default 1; None leaves them as the libraries (and Ray) set them. As
        :class:`~aioenv.ProcessWorker`'s: the variables set in this process's environment
        keep their values in the actor.
    :param direct_connection: connect to the actor and send steps on that connection
        (default True); False sends every message as an actor call.
    """

    kind = "ray"
    _per_host_option = "envs_per_actor"
    _off_loop = ACTOR_CALLS
    _sent_to = "a Ray actor"
    _discard_verb = "killed (ray.kill)"

    def __init__(
        self,
        env: EnvSource,
        *,
        seed: int | None = None,
        num_cpus: float = 1,
        num_gpus: float = 0,
        resources: Mapping[str, float] | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        actor_options: Mapping[str, Any] | None = None,
        cleanup_time: float = SUPERVISION_DEFAULTS.cleanup_time,
        step_timeout: float | None = SUPERVISION_DEFAULTS.step_timeout,
        start_timeout: float | None = SUPERVISION_DEFAULTS.start_timeout,
        reset_timeout: float | None = SUPERVISION_DEFAULTS.reset_timeout,
        episode_timeout: float | None = SUPERVISION_DEFAULTS.episode_timeout,
        threads_per_env: int | None = DEFAULT_THREADS_PER_ENV,
        direct_connection: bool = True,
        _start: bool = True,
    ) -> None:
        import_ray()  # a clear error now if Ray is missing
        given = locals()  # Worker's keywords, taken above under their own names
        super().__init__(env, **{name: given[name] for name in WORKER_KEYWORDS})
        for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value < inf
            ):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        # Ray's .options() for the actor: those of actor_options win over the ones above.
        options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_restarts": 0}
        if resources:
            options["resources"] = dict(resources)
        if runtime_env:
            options["runtime_env"] = dict(runtime_env)
        self._actor_options = {**options, **(actor_options or {})}
        if not isinstance(direct_connection, bool):
            raise TypeError(
                f"{self.name}: direct_connection must be True or False, got {direct_connection!r}"
            )
        self._direct = direct_connection
        #: The resources the cluster lacked for this worker's pool when its actors started.
        self._shortage: Shortage | None = None
        self._begin(env, threads_per_env, _start)

    @property
    def actor_id(self) -> str:
        """The id (hex) of the Ray actor serving this worker's env now."""
        return self._current_host().actor_id

    @classmethod
    def hosted(
        cls,
        env: EnvSource | list[EnvSource],
        seeds: Sequence[int | None],
        envs_per_actor: int,
        **options: Any,
    ) -> list[RayWorker[Any]]:
        """One worker per seed, ``envs_per_actor`` of them sharing each actor. ``env`` is
        one env source for all, or a list with one per seed."""
        return cls._hosted(env, seeds, envs_per_actor, **options)

    @classmethod
    def _launch(cls, workers: Sequence[Any], per_host: int) -> None:
        """Start the actors of ``workers``, ``per_host`` of them to an actor, warning at
        once if the cluster lacks the resources for them all: Ray keeps the ones that do
        not fit waiting, in silence. The workers keep the shortage for their start-up
        timeout's message. Where Ray does not say what the cluster has free in time
        (:func:`free_resources`), nothing is judged."""
        ray = import_ray()
        init_ray(ray)
        free = free_resources(ray)
        actors = -(-len(workers) // per_host)
        found = None if free is None else shortage(actors, workers[0]._actor_options, free)
        if found is not None:
            for worker in workers:
                worker._shortage = found
            warnings.warn(
                f"aioenv Ray workers: {found} until the cluster frees or adds resources; "
                f"{found.advice} (with start_timeout=SECONDS a worker still waiting then fails "
                "with WorkerTimeout)",
                RuntimeWarning,
                stacklevel=_first_frame_outside_aioenv(),
            )
        super()._launch(workers, per_host)

    def _start_host(self, **recipe: Any) -> ActorHost:
        return ActorHost(ActorRecipe(options=self._actor_options, direct=self._direct, **recipe))

    def _start_delay_cause(self) -> str | None:
        if self._shortage is None or self._host is None or self._host.answered:
            return None
        return (
            f"its Ray actor has not answered yet, and the pool asked for more than the "
            f"cluster had: {self._shortage}; {self._shortage.advice}"
        )

    # Hooks -----------------------------------------------------------------------------
    def _spawn(self, seed: int | None) -> None:
        host = self._host_for_restart()
        host.send((self._slot, 0, Request.REBUILD, (seed, self._episode)))

    def _submit(self, seq: int, action: Any) -> None:
        self._current_host().send((self._slot, seq, Request.STEP, action))

    def _submit_control(self, seq: int, request: ControlRequest) -> None:
        request = shared_request(request)  # large values: put once, off the loop
        self._current_host().send((self._slot, seq, Request.CONTROL, request))

    # From the actor --------------------------------------------------------------------
    def _on_host_message(self, host: ActorHost, seq: int, result: Any, borrowed: bool) -> None:
        if host is not self._host:
            return  # a replaced actor's words are never delivered
        if not seq and type(result) is tuple:  # the spaces of a build (see Reply)
            if result == (None, None) and self.observation_space is not None:
                return  # a rebuild that failed (its reset says so): the spaces stay
            self.observation_space, self.action_space = result
            return
        # Through an actor call, Ray hands arrays back as read-only views of its buffers:
        # a pool that owns its states (copy=True) copies them, as for shared memory.
        self._on_reply(seq, result, borrowed=borrowed and type(result) in (Step, BatchStep))

    def _on_host_exit(self, host: ActorHost, reason: str) -> None:
        self._host_gone(host, host.killed_for, f"{self.name} died: {reason}", None)

    # Closing ---------------------------------------------------------------------------
    def _start_close(self) -> None:
        self._ensure_loop()
        self._current_host().release(self._slot)

    async def _wait_closed(self, cleanup_time: float) -> None:
        # This worker ends the actors it was the last to release, and any left dead.
        hosts = [host for host in self._hosts if not host.in_use or not host.alive]
        try:
            # Side by side, on the event loop the actors' calls answer on (asyncio's).
            ended = await asyncio.gather(*(host.end(cleanup_time) for host in hosts))
        finally:
            self._release_off_loop()  # its last calls (close, linger) are made
        self._hosts = [host for host in self._hosts if host not in hosts]
        if not all(ended):
            warnings.warn(
                f"{self.name}: Ray did not report its actor dead within {KILL_GRACE:g} s "
                "of ray.kill; it may still be in the cluster",
                RuntimeWarning,
                stacklevel=3,
            )


# The package's own folder, however deep in it this module sits.
_AIOENV_DIRECTORY = str(Path(os.path.abspath(__file__)).parents[__name__.count(".") - 1]) + os.sep


def _first_frame_outside_aioenv() -> int:
    """The ``stacklevel`` that makes a warning point at the user's line (``make_pool``,
    ``RayWorker(...)``), however deep in aioenv its caller is."""
    frame: types.FrameType | None = sys._getframe(1)  # the function that warns
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_AIOENV_DIRECTORY):
        level, frame = level + 1, frame.f_back
    return level


# What the cluster has for a pool's actors -------------------------------------------------
#: How long making a pool waits for Ray's answer to what the cluster has free (seconds).
READ_PATIENCE = 5.0

#: Ray's names for the resources that ``num_cpus`` and ``num_gpus`` reserve.
_BUILT_IN = (("num_cpus", "CPU"), ("num_gpus", "GPU"))


@dataclasses.dataclass(frozen=True)
class Shortage:
    """``actors`` actors that reserve ``per_actor`` of ``resource`` each (the actor option
    ``option`` asks for it) where the cluster has ``available``: ``waiting`` of them wait."""

    actors: int
    option: str
    resource: str
    per_actor: float
    available: float
    waiting: int

    def __str__(self) -> str:
        wanted = self.actors * self.per_actor
        return (
            f"{_count(self.actors, 'actor')} x {self.option}={self.per_actor:g} = "
            f"{_amount(wanted, self.resource)}, the Ray cluster has "
            f"{_amount(self.available, self.resource)} available: "
            f"{_count(self.waiting, 'actor')} will wait"
        )

    @property
    def advice(self) -> str:
        """What to do about it."""
        return (
            f"ask for fewer actors (more envs_per_actor), a smaller {self.option}, or a "
            "bigger cluster"
        )


def shortage(
    actors: int, options: Mapping[str, Any], available: Mapping[str, float]
) -> Shortage | None:
    """The resource that keeps the most of ``actors`` actors (each started with Ray actor
    ``options``) waiting, given the cluster's ``available`` resources
    (``ray.available_resources()``); None if they all fit. Actors placed by a scheduling
    strategy object (a placement group, a node) are not judged: what they may use is not
    what the cluster has free."""
    strategy = options.get("scheduling_strategy")
    if strategy is not None and not isinstance(strategy, str):
        return None
    demands = [(option, resource, options.get(option)) for option, resource in _BUILT_IN]
    demands += [
        (f"resources[{name!r}]", name, amount)
        for name, amount in (options.get("resources") or {}).items()
    ]
    worst: Shortage | None = None
    for option, resource, per_actor in demands:
        if not isinstance(per_actor, (int, float)) or per_actor <= 0:
            continue
        have = float(available.get(resource, 0.0))
        # A hair of slack: Ray keeps fractional resources in fixed point, so 2 CPUs over
        # num_cpus=0.1 may read as 19.999... actors.
        fit = floor(have / per_actor + 1e-9)
        waiting = actors - fit
        if waiting > 0 and (worst is None or waiting > worst.waiting):
            worst = Shortage(actors, option, resource, float(per_actor), have, waiting)
    return worst


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _amount(value: float, resource: str) -> str:
    if resource in ("CPU", "GPU"):
        return f"{value:g} {resource}" if value == 1 else f"{value:g} {resource}s"
    return f"{value:g} of {resource!r}"


def free_resources(ray: Any, patience: float = READ_PATIENCE) -> dict[str, float] | None:
    """What the cluster has free (``ray.available_resources()``), read on a thread of its
    own; None if the read failed or had not answered after ``patience`` seconds (the
    thread is then left to Ray: a daemon, it ends when the read does, or with the
    process)."""
    answer: list[dict[str, float]] = []
    answered = threading.Event()

    def read() -> None:
        try:
            answer.append(ray.available_resources())
        except Exception:  # no reading, no warning: the pool goes on
            pass
        finally:
            answered.set()

    threading.Thread(target=read, name="aioenv-ray-resources", daemon=True).start()
    return answer[0] if answered.wait(patience) and answer else None

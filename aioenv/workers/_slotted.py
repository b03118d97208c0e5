"""Workers that each run in one slot of a shared host: a child process (process workers) or
a Ray actor (Ray workers). The bookkeeping is the same for both: which host serves this
worker now, which hosts it used that may still run, the replacement host after a death
that its siblings share, and starting several workers' hosts at once (``hosted``)."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ..core import _pickling as pickling
from ..core._environment import EnvSource, VectorSource
from ..core._errors import WorkerDied
from ..core._registry import snapshot as registry_snapshot
from ..core._seeds import checked_count
from ..env_side._thread_caps import ThreadCaps
from ._base import Worker
from ._off_loop import OffLoopCalls

__all__ = ["WORKER_KEYWORDS", "SlotHost", "SlottedWorker"]

S = TypeVar("S")


class SlotHost(Protocol):
    """What a slotted worker needs of its host."""

    size: int
    successor: Any

    @property
    def alive(self) -> bool: ...

    @property
    def label(self) -> str:
        """The host, for its workers' names, without waiting for its start: ``pid 123``,
        ``actor 0f3a…``."""

    def replacement(self) -> Any: ...

    def open_slot(self, slot: int) -> None: ...

    def watch(self, loop: asyncio.AbstractEventLoop) -> None: ...

    def kill(self, slot: int, reason: str) -> None:
        """Kill the host at once because the env in ``slot`` failed, or its worker was
        abandoned (``reason`` says how); without a loop too (:meth:`SlottedWorker._abandon`)."""


H = TypeVar("H", bound=SlotHost)

#: The keywords of :class:`Worker`'s constructor (the seed and the supervision options):
#: each slotted kind's constructor takes them too, under the same names, and passes them
#: on to it by name.
WORKER_KEYWORDS = inspect.getfullargspec(Worker.__init__).kwonlyargs


class SlottedWorker(Worker[S], Generic[S, H]):
    """A worker in slot ``_slot`` of host ``_host``; kinds start their hosts
    (``_start_host``)."""

    #: The option that says how many workers share a host, for messages.
    _per_host_option: ClassVar[str]
    #: The thread that starts this kind's hosts (or makes its calls) off the event loop:
    #: it waits for the next while a worker of the kind is open (its host may be
    #: restarted), so each open worker holds it (:meth:`_begin`).
    _off_loop: ClassVar[OffLoopCalls]
    #: Where the env is sent to be built, for the message of one that will not pickle.
    _sent_to: ClassVar[str]
    #: The host serving this worker's env now (None until it joins one), and its slot there.
    _host: H | None = None
    _slot = 0
    #: Every host this worker used that may still run (from :meth:`_begin` on).
    _hosts: list[H]
    _holds_off_loop = False

    def _begin(self, source: EnvSource, threads_per_env: int | None, start: bool) -> None:
        """Take what each host of this worker is sent: the env's ``source`` pickled
        (TypeError, saying what to do instead, where it will not pickle) and the thread
        caps of ``threads_per_env``. Then hold the kind's off-loop thread while this
        worker is open, and start its host (``start``: one of its own; ``hosted`` starts
        several workers' hosts at once)."""
        try:
            self._payload = pickling.dumps(source)
        except Exception as exc:
            raise TypeError(
                f"{self.name}: the env could not be pickled to send it to {self._sent_to} "
                f"({type(exc).__name__}: {exc}); pass a factory or a gymnasium id instead, "
                "or use a thread worker"
            ) from exc
        self._thread_caps = ThreadCaps.resolve(threads_per_env, self.name)
        self._hosts = []
        self._off_loop.hold()
        self._holds_off_loop = True
        if start:
            try:
                self._launch([self], per_host=1)
            except BaseException:
                self._release_off_loop()
                raise

    def _release_off_loop(self) -> None:
        """Closing or abandoned: no restart comes any more (once)."""
        if self._holds_off_loop:
            self._holds_off_loop = False
            self._off_loop.release()

    @classmethod
    def _hosted(
        cls,
        env: EnvSource | list[EnvSource],
        seeds: Sequence[int | None],
        per_host: int,
        **options: Any,
    ) -> list[Any]:
        """One worker per seed, ``per_host`` of them sharing each host (each kind's public
        ``hosted`` names that count its own way). ``env`` is one env source for all, or a
        list with one per seed (another length is refused before any worker is built). If a
        worker cannot be built or a host fails to start, the workers built and the hosts
        started so far are let go again."""
        per_host = checked_count(per_host, cls._per_host_option)
        envs = env if isinstance(env, list) else [env] * len(seeds)
        if len(envs) != len(seeds):
            raise ValueError(
                f"{cls.__name__}.hosted() got {len(envs)} env sources for {len(seeds)} seeds: "
                "give one env source for all, or a list with one per seed"
            )
        workers: list[Any] = []
        try:
            for source, seed in zip(envs, seeds, strict=True):
                workers.append(cls(source, seed=seed, _start=False, **options))  # type: ignore[call-arg]
            cls._launch(workers, per_host)
        except BaseException:
            for worker in workers:
                worker.abandon()
            raise
        return workers

    @classmethod
    def _launch(cls, workers: Sequence[Any], per_host: int) -> None:
        """Start the hosts of ``workers``, ``per_host`` of them to a host, which then join
        it (slot ``i`` of a host is the ``i``-th of its workers). The gymnasium registry
        every host gets is taken once: it holds a spec per registered id
        (:func:`aioenv.core._registry.snapshot`). A host's recipe's slots are its workers'
        (their pickled envs, first seeds, and each one's ``_on_host_message`` and
        ``_on_host_exit`` for what the host says of its slot), the rest its first
        worker's, which :meth:`_start_host` completes with its kind's own."""
        registry = registry_snapshot()
        for start in range(0, len(workers), per_host):
            served = workers[start : start + per_host]
            first: SlottedWorker[Any, H] = served[0]
            host = first._start_host(
                payloads=[worker._payload for worker in served],
                seeds=[VectorSource.first_seed(w.source, w.seed) for w in served],
                episode=first._episode,
                registry=registry,
                thread_caps=first._thread_caps,
                deliver=[worker._on_host_message for worker in served],
                on_exit=[worker._on_host_exit for worker in served],
            )
            for slot, worker in enumerate(served):
                worker._join(host, slot)

    @abc.abstractmethod
    def _start_host(self, **recipe: Any) -> H:
        """Start a host from the recipe of this kind made of ``recipe`` (the fields every
        kind's recipe has) and this worker's options of the kind."""

    @property
    def name(self) -> str:
        host = self._host
        if host is None:
            return super().name
        where = "" if self.worker_id is None else f" {self.worker_id}"
        slot = f", slot {self._slot}" if host.size > 1 else ""
        return f"{self.kind} worker{where} ({self.env_name}, {host.label}{slot})"

    def _current_host(self) -> H:
        assert self._host is not None, f"a {self.kind} worker always has a host once built"
        return self._host

    def _join(self, host: H, slot: int) -> None:
        self._host = host
        self._slot = slot
        host.open_slot(slot)
        self._hosts.append(host)
        if self._loop is not None:
            host.watch(self._loop)

    def _host_for_restart(self) -> H:
        """The host a restarted env runs in: the current one if it is alive, else the
        replacement its siblings started (or a new one), which this worker joins."""
        host = self._current_host()
        while host.successor is not None:  # siblings may have replaced it already
            host = host.successor
        if not host.alive:
            host = host.replacement()
        if host is not self._host:
            self._join(host, self._slot)
        return host

    def _host_gone(
        self, host: H, killed_slot: int | None, message: str, exitcode: int | None
    ) -> None:
        """``host`` is gone: it is no longer one this worker used that may still run. Its
        death (:class:`~aioenv.WorkerDied`, saying ``message``, with the host's
        ``exitcode``) is this worker's own to report, unless the host was replaced or the
        worker is closing, or it was killed for the failure of this worker's env (in
        ``killed_slot``), which is already handled."""
        with contextlib.suppress(ValueError):
            self._hosts.remove(host)
        if host is self._host and not self._closing and killed_slot != self._slot:
            self._on_death(WorkerDied(message, worker_id=self.worker_id, exitcode=exitcode))

    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        for host in self._hosts:
            host.watch(loop)

    def _abandon(self) -> None:
        """No restart comes any more: kill every host this worker used that may still run
        (a pool that failed to be built: no loop watches them)."""
        self._release_off_loop()
        for host in self._hosts:
            host.kill(self._slot, f"{self.name} was abandoned")
        self._hosts.clear()

    def _discard_env(self, env_gone: bool) -> None:
        host = self._current_host()
        if env_gone or host.size == 1:
            # A hung step cannot be interrupted: the whole host goes.
            host.kill(self._slot, f"{self.name} failed")
        # else: a sibling-friendly restart; _spawn rebuilds just this slot's env

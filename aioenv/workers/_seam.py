"""The pool↔worker seam: everything a pool asks of a worker, and nothing else.

A pool joins a worker to its inbox (``join_pool``), reads whether it failed for good
(``failure``) and which loop it is bound to (``event_loop``), seeds its next reset, sends
it control requests, moves it to a new event loop and, when a pool cannot be built,
abandons it. Together with ``send_action`` and ``aclose`` (the users' interface) that is
the whole of it: the pool never reaches into a worker and never asks which kind it is.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from typing import Any

from .._errors import ClosedError, StateNotTaken, WorkerError
from .._inbox import Inbox
from .._messages import ControlRequest, EpisodeOptions
from .._supervision import Supervision, Supervisor
from ..loops._here import not_on_asyncio
from ._controls import PendingControls

__all__ = ["FirstReplyCheck", "PoolMember"]

#: A pool's check of a worker's first reply: the error to raise in its place, or None.
FirstReplyCheck = Callable[[Any], "WorkerError | None"]


class PoolMember(abc.ABC):
    """The pool's side of :class:`~aioenv.workers.Worker` (which sets these fields)."""

    worker_id: int | None
    _inbox: Inbox
    _in_pool: bool
    _closing: bool
    _failure: WorkerError | None
    _episode: EpisodeOptions
    _supervisor: Supervisor
    _check_first_reply: FirstReplyCheck | None
    _next_reset_seed: int | None
    _next_seq: int
    _awaited_seq: int
    _controls: PendingControls
    _loop: asyncio.AbstractEventLoop | None

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The worker's name, for messages."""

    @abc.abstractmethod
    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None: ...

    @abc.abstractmethod
    def _abandon(self) -> None: ...

    @abc.abstractmethod
    def _submit_control(self, seq: int, request: ControlRequest) -> None: ...

    @abc.abstractmethod
    def _configure(self, episode: EpisodeOptions) -> None: ...

    @property
    def in_pool(self) -> bool:
        """The worker belongs to a pool, which takes its states."""
        return self._in_pool

    @property
    def failure(self) -> WorkerError | None:
        """The error every later action raises, once the worker failed for good."""
        return self._failure

    @property
    def event_loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the worker is bound to (at its first action), or None."""
        return self._loop

    def join_pool(
        self,
        inbox: Inbox,
        worker_id: int,
        supervision: Supervision,
        episode: EpisodeOptions | None = None,
        check_first_reply: FirstReplyCheck | None = None,
    ) -> None:
        """Deliver to the pool's ``inbox`` as worker ``worker_id``, under the pool's
        ``supervision`` (the worker's own deadlines win) and ``episode`` options.
        ``check_first_reply`` runs when the env first answers (the pool's space check)."""
        if self._in_pool:
            raise ValueError(f"{self.name} already belongs to a pool")
        if self._inbox.num_owed:
            raise StateNotTaken(f"{self.name} has a state not yet taken; take it before pooling it")
        if self._closing:
            raise ClosedError(f"{self.name} is closed and cannot join a pool")
        self._supervisor.configure(supervision.under(self._supervisor.options))
        self._inbox = inbox
        self._in_pool = True
        self.worker_id = worker_id
        self._check_first_reply = check_first_reply
        if episode is not None and episode != self._episode:
            self._episode = episode
            self._configure(episode)

    def seed_next_reset(self, seed: int) -> None:
        """Seed the next reset (unless it names its own seed); later resets continue."""
        self._next_reset_seed = seed

    def control(self, request: ControlRequest) -> asyncio.Future[Any]:
        """Send a control request (call, get/set attribute); the future gets its result.
        Requests are answered in order, after any step already in flight."""
        if self._closing:
            raise ClosedError(f"{self.name} is closed")
        if self._failure is not None:
            raise self._failure
        loop = self._ensure_loop()
        seq = self._next_seq
        self._next_seq = seq + 1
        future = self._controls.add(seq, loop)
        try:
            self._submit_control(seq, request)
        except BaseException:
            self._controls.discard(seq)
            raise
        return future

    def forget_request(self) -> None:
        """Stop waiting for the reply to the request in flight (a cancelled rollout): it
        is dropped as stale when it comes, and the worker takes a new request at once (its
        env answers it after the forgotten one)."""
        if self._awaited_seq:
            self._supervisor.forget_in_flight()
            self._awaited_seq = 0
        self._inbox.forgive(self.worker_id)

    def enter_loop(self) -> None:
        """Bind to the running event loop (a pool about to wait on a new loop): a worker
        whose reply was due on its old loop raises at once instead of hanging."""
        self._ensure_loop()

    def abandon(self) -> None:
        """Stop at once, without an event loop (a pool that failed to be built)."""
        self._closing = True
        self._abandon()

    # Event loops -----------------------------------------------------------------------
    def _ensure_loop(self, *, closing: bool = False) -> asyncio.AbstractEventLoop:
        """The running loop, which this worker is bound to from now on. A worker moves to a
        new loop (a later ``asyncio.run``) once its old loop is closed, when nothing of it
        is in flight; ``closing``: whatever was in flight is dropped."""
        loop = asyncio._get_running_loop()
        if loop is None:
            raise not_on_asyncio(f"{self.name}: send_action()")
        old = self._loop
        if old is loop:
            return loop
        if old is not None:
            self._leave_loop(old, closing)
        self._loop = loop
        self._bind_loop(loop)
        return loop

    def _leave_loop(self, old: asyncio.AbstractEventLoop, closing: bool) -> None:
        if not old.is_closed() and not closing:
            raise RuntimeError(
                f"{self.name} is bound to another event loop, which is still open; a pool "
                "works on one event loop at a time"
            )
        if (self._awaited_seq or self._controls) and not closing:
            raise RuntimeError(
                f"{self.name} had a request in flight when its event loop ended; its reply "
                "is lost with that loop. Close the pool (aclose works from any loop) and "
                "make a new one"
            )
        self._supervisor.disarm()
        if self._awaited_seq:
            self._awaited_seq = 0
            self._inbox.forgive(self.worker_id)
        self._controls.fail_all(ClosedError(f"{self.name} was closed"))

"""The pool↔worker seam: everything a pool asks of a worker, and nothing else.

:class:`Member` is a worker as pool-side code sees it (the pool and its helpers, the
collector): what it is (``name``, ``kind``, ``worker_id``, ``num_envs``, its spaces), its
health (``closed``, ``failure``, ``restarts``), and what a pool does to it: join it to the
pool's inbox, send it actions and control requests, seed its next reset, forget a
request, move it to a new event loop, close it. The pool never reaches into a worker and
never asks which kind it is; every :class:`~aioenv.workers.Worker` is a :class:`Member`.
(Before a worker joins, ``make_pool`` and the pool's checks use the
:class:`~aioenv.workers.Worker` itself: whether it is in a pool already, its event loop,
abandoning it.)

:class:`Membership` is the worker's side of it, which :class:`~aioenv.workers.Worker`
inherits: the pool it joins (joining, control requests, a forgotten request, what it is
and whether it failed) and the event loop it is bound to (and moves from, once that loop
is closed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from ..core._errors import ClosedError, StateNotTaken, WorkerError
from ..core._messages import ControlRequest, EpisodeOptions
from ..core._supervision import Supervision
from ..loops._here import not_on_asyncio, running_loop, thread_id
from ._inbox import Inbox
from ._supervised import SupervisedEnv

__all__ = ["FirstReplyCheck", "Member", "Membership"]

#: A pool's check of a worker's first reply: the error to raise in its place, or None.
FirstReplyCheck = Callable[[Any], "WorkerError | None"]


class Member(Protocol):
    """A worker, as its pool uses it."""

    @property
    def name(self) -> str:
        """The worker's name, for messages."""

    @property
    def kind(self) -> str:
        """The worker's kind (``"thread"``, ``"process"``, ...), for the pool's repr."""

    @property
    def answers_in_line(self) -> bool:
        """Its states are delivered inside ``send_action`` (it steps its env there), not
        later by the event loop: a consumer that takes them never has to wait, so it must
        give the loop a turn now and then or the other workers' states never come in."""

    @property
    def worker_id(self) -> int | None:
        """Its id in the pool (None before it joins one)."""

    @property
    def num_envs(self) -> int:
        """Envs it steps together."""

    @property
    def observation_space(self) -> Any:
        """Its env's observation space, once the env reported it (else None)."""

    @property
    def action_space(self) -> Any:
        """Its env's action space, once the env reported it (else None)."""

    @property
    def closed(self) -> bool:
        """It was closed (or is closing)."""

    @property
    def restarts(self) -> int:
        """How many times its env was rebuilt after a failure."""

    @property
    def failure(self) -> WorkerError | None:
        """The error every later action raises, once it failed for good."""

    def join_pool(
        self,
        inbox: Inbox,
        worker_id: int,
        supervision: Supervision,
        episode: EpisodeOptions | None = None,
        check_first_reply: FirstReplyCheck | None = None,
    ) -> None:
        """Deliver to the pool's ``inbox`` as worker ``worker_id``."""

    def send_action(self, action: Any) -> None:
        """Send an action, a reset, a rollout request or ``CLOSE``."""

    def seed_next_reset(self, seed: int) -> None:
        """Seed the next reset (unless it names its own seed)."""

    def control(self, request: ControlRequest) -> asyncio.Future[Any]:
        """Send a control request; the future gets its result."""

    def forget_request(self) -> None:
        """Stop waiting for the reply to the request in flight."""

    def enter_loop(self) -> None:
        """Bind to the running event loop (a pool about to wait on a new loop)."""

    async def aclose(self, cleanup_time: float | None = None) -> None:
        """Close the env and stop the worker."""


class Membership(SupervisedEnv):
    """The pool seam and the event loop, over the fields of
    :class:`~aioenv.workers.Worker` named here."""

    _loop_thread: int | None = None  # the thread _loop was found running in
    _check_first_reply: FirstReplyCheck | None = None
    _next_reset_seed: int | None = None  # from seed_next_reset()

    # Pools (the seam, Member) -------------------------------------------------------
    @property
    def in_pool(self) -> bool:
        """The worker belongs to a pool, which takes its states (and gave it its id)."""
        return self.worker_id is not None

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
        if self.worker_id is not None:
            raise ValueError(f"{self.name} already belongs to a pool")
        if self._inbox.num_owed:
            raise StateNotTaken(f"{self.name} has a state not yet taken; take it before pooling it")
        if self._closing:
            raise ClosedError(f"{self.name} is closed and cannot join a pool")
        options = supervision.under(self._supervisor.options)
        self._check_budget(options)
        self._supervisor.configure(options)
        self._inbox, self.worker_id = inbox, worker_id
        self._check_first_reply = check_first_reply
        if episode is not None and episode != self._episode:
            self._episode = episode
            # The running env's new episode options, sent ahead of any request.
            self._submit_control(0, ControlRequest("configure", kwargs={"episode": episode}))

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
        if (reason := self._supervisor.dropped) is not None:  # nothing would answer
            raise WorkerError(
                f"{self.name}: its failed env was dropped ({reason}); a new env starts "
                "with its next step or reset: call again once that is answered",
                worker_id=self.worker_id,
            )
        future: asyncio.Future[Any] = self._ensure_loop().create_future()
        seq = self._next_seq
        self._next_seq = seq + 1
        # Its error counts as seen: a caller cut short drops it, unreported by asyncio's GC.
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._controls[seq] = future
        try:
            self._submit_control(seq, request)
        except BaseException:
            self._controls.pop(seq, None)
            raise
        return future

    def forget_request(self) -> None:
        """Stop waiting for the reply to the request in flight (a cancelled rollout): it
        is dropped as stale when it comes, and the worker takes a new request at once (its
        env answers it after the forgotten one)."""
        if self._awaited:
            self._supervisor.forget_in_flight()
        self._forget()

    def _forget(self) -> None:
        """Await no reply any more: one that comes is stale, and no state is owed."""
        self._awaited = 0
        self._inbox.forgive(self.worker_id)

    def enter_loop(self) -> None:
        """Bind to the running event loop (a pool about to wait on a new loop): a worker
        whose reply was due on its old loop raises at once instead of hanging."""
        self._ensure_loop()

    def abandon(self) -> None:
        """Stop at once, without an event loop (a pool that failed to be built)."""
        self._closing = True
        self._last = None
        self._abandon()

    # Event loops -----------------------------------------------------------------------
    def _ensure_loop(self, *, closing: bool = False) -> asyncio.AbstractEventLoop:
        """The running loop, which this worker is bound to from now on. A worker moves to a
        new loop (a later ``asyncio.run``) once its old loop is closed, when nothing of it
        is in flight; ``closing``: whatever was in flight is dropped."""
        loop = running_loop()
        if loop is None:
            raise not_on_asyncio(f"{self.name}: send_action()")
        old = self._loop
        if old is loop:
            self._loop_thread = thread_id()
            return loop
        if old is not None:
            # It moves only once its old loop is closed and nothing it sent on it is still
            # in flight (unless it is closing).
            if not closing and not old.is_closed():
                raise RuntimeError(
                    f"{self.name} is bound to another event loop, which is still open; a "
                    "pool works on one event loop at a time"
                )
            if not closing and (self._awaited or self._controls):
                raise RuntimeError(
                    f"{self.name} had a request in flight when its event loop ended; its "
                    "reply is lost with that loop. Close the pool (aclose works from any "
                    "loop) and make a new one"
                )
            self._supervisor.disarm()
            if self._awaited:
                self._forget()
            self._fail_controls(ClosedError(f"{self.name} was closed"))
        self._loop, self._loop_thread = loop, thread_id()
        self._bind_loop(loop)
        return loop

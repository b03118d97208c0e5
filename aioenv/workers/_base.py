"""The interface every worker kind implements, and the bookkeeping they share.

A kind implements four hooks: ``_submit`` (start a RESET or step request without blocking),
``_start_close`` (ask the env to close), ``_wait_closed`` (await the end, escalating after
the cleanup time) and, optionally, ``_bind_loop``. Replies come back through
``_on_reply``, which drops stale replies by sequence number and delivers the rest to the
worker's :class:`~aioenv._inbox.Inbox` — its own, or its pool's.
"""

from __future__ import annotations

import abc
import asyncio
from typing import Any, ClassVar, Generic, TypeVar

import anyio

from .._environment import EnvSource, describe_source
from .._errors import (
    ClosedError,
    EnvError,
    NoActionInFlight,
    StateNotTaken,
    WorkerError,
)
from .._inbox import Inbox, Outcome
from .._runner import Failure
from .._sentinels import CLOSE, RESET, Command

__all__ = ["Worker"]

S = TypeVar("S")


class Worker(abc.ABC, Generic[S]):
    """One environment behind the worker interface: ``send_action`` then ``get_state``.

    ``send_action`` never blocks the event loop (a sync worker steps inline, which is its
    point). At most one action is in flight per worker, and its state must be taken before
    the next action is sent.
    """

    kind: ClassVar[str]

    def __init__(self, env: EnvSource, *, seed: int | None, cleanup_time: float) -> None:
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        if not (isinstance(cleanup_time, (int, float)) and cleanup_time >= 0):
            raise ValueError(f"cleanup_time must be a number >= 0, got {cleanup_time!r}")
        self.seed = seed
        self.cleanup_time = float(cleanup_time)
        self.env_name = describe_source(env)
        self.worker_id: int | None = None
        self.observation_space: Any = None
        self.action_space: Any = None
        self._inbox = Inbox(ordered=True)
        self._in_pool = False
        self._next_seq = 1
        self._awaited_seq = 0  # the request whose reply is still to come; 0 = none
        self._failure: WorkerError | None = None  # set once the worker can take no more
        self._closing = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # Public interface ----------------------------------------------------------------
    @property
    def name(self) -> str:
        where = "" if self.worker_id is None else f" {self.worker_id}"
        return f"{self.kind} worker{where} ({self.env_name})"

    @property
    def closed(self) -> bool:
        return self._closing

    def send_action(self, action: Any) -> None:
        """Send an action, ``RESET`` or ``CLOSE``. Returns at once."""
        if self._closing:
            raise ClosedError(f"{self.name} is closed; it takes no more actions")
        if isinstance(action, Command) and action is CLOSE:
            if self._inbox.is_owed(self.worker_id):
                raise StateNotTaken(
                    f"{self.name} has a state that was not taken; take it with get_state() "
                    "before sending CLOSE, or call aclose() to close it discarding that state"
                )
            self._closing = True
            self._start_close()
            return
        if self._failure is not None:
            raise self._failure
        if self._inbox.is_owed(self.worker_id):
            raise StateNotTaken(
                f"{self.name} already has an action in flight or a state not yet taken; "
                "take it with get_state() before sending another action"
            )
        self._ensure_loop()
        seq = self._next_seq
        self._next_seq = seq + 1
        self._awaited_seq = seq
        self._inbox.owe(self.worker_id)
        try:
            self._submit(seq, action)
        except BaseException:
            # Nothing was sent (an action that does not pickle, say): the worker is untouched.
            self._awaited_seq = 0
            self._inbox.forgive(self.worker_id)
            raise

    async def get_state(self) -> S:
        """The state produced by the last action sent. Raises :class:`~aioenv.EnvError` if
        the env raised, :class:`~aioenv.WorkerDied` if the worker died."""
        if self._in_pool:
            raise NoActionInFlight(
                f"{self.name} belongs to a pool; take its states with pool.get_state()"
            )
        if self._closing:
            raise ClosedError(f"{self.name} is closed")
        inbox = self._inbox
        while True:
            outcome = inbox.pop(self.worker_id)
            if outcome is not None:
                if outcome.error is not None:
                    raise outcome.error
                return outcome.state  # type: ignore[no-any-return]
            if not inbox.is_owed(self.worker_id):
                if self._closing:
                    raise ClosedError(f"{self.name} was closed while waiting for its state")
                raise NoActionInFlight(f"{self.name} has no action in flight; send_action() first")
            await inbox.wait(None)

    async def aclose(self, cleanup_time: float | None = None) -> None:
        """Close the env and stop the worker: ask it to close, wait ``cleanup_time``
        seconds, then force it. Idempotent; runs to the end even if cancelled."""
        timeout = (
            self.cleanup_time if cleanup_time is None else min(cleanup_time, self.cleanup_time)
        )
        with anyio.CancelScope(shield=True):
            if not self._closing:
                self._closing = True
                self._start_close()
            self._inbox.forgive(self.worker_id)
            if not self._closed:
                await self._wait_closed(timeout)
                self._closed = True

    async def __aenter__(self) -> Worker[S]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self._closing else "open"
        return f"<{type(self).__name__} {self.name} {state}>"

    # For pools -----------------------------------------------------------------------
    def _attach(self, inbox: Inbox, worker_id: int) -> None:
        if self._in_pool:
            raise ValueError(f"{self.name} already belongs to a pool")
        if self._inbox.num_owed:
            raise StateNotTaken(f"{self.name} has a state not yet taken; take it before pooling it")
        if self._closing:
            raise ClosedError(f"{self.name} is closed and cannot join a pool")
        self._inbox = inbox
        self._in_pool = True
        self.worker_id = worker_id

    # For worker kinds ----------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise RuntimeError(
                    f"{self.name}: send_action() must be called from async code running "
                    "in an asyncio event loop"
                ) from None
            self._bind_loop(loop)
            self._loop = loop
        return self._loop

    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hook: start watching this worker from ``loop``."""

    def _abandon(self) -> None:
        """Hook: stop at once, without a loop (a pool that failed to be built)."""
        self._closing = True

    @staticmethod
    def _request_kind(action: Any) -> bool:
        """True for RESET, False for a step."""
        return isinstance(action, Command) and action is RESET

    def _on_reply(self, seq: int, result: Any) -> None:
        """Deliver the reply to request ``seq``: a state, or a :class:`Failure`."""
        if seq != self._awaited_seq:
            return  # a late reply to a request nobody waits for any more
        self._awaited_seq = 0
        if isinstance(result, Failure):
            self._inbox.deliver(Outcome(self.worker_id, None, self._env_error(result)))
        else:
            self._inbox.deliver(Outcome(self.worker_id, result))

    def _on_death(self, error: WorkerError) -> None:
        """The worker can take no more actions; fail the one in flight, if any."""
        self._failure = error
        if self._awaited_seq and not self._closing:
            self._awaited_seq = 0
            self._inbox.deliver(Outcome(self.worker_id, None, error))

    def _env_error(self, failure: Failure) -> EnvError:
        error = EnvError(
            f"{self.name}: the env raised {failure.exception_type} during {failure.during}: "
            f"{failure.message}",
            worker_id=self.worker_id,
            remote_traceback=failure.traceback,
            exception_type=failure.exception_type,
            during=failure.during,
        )
        error.__cause__ = failure.exception
        return error

    @abc.abstractmethod
    def _submit(self, seq: int, action: Any) -> None:
        """Start request ``seq`` (RESET or a step) without blocking."""

    @abc.abstractmethod
    def _start_close(self) -> None:
        """Ask the env to close, without blocking."""

    @abc.abstractmethod
    async def _wait_closed(self, cleanup_time: float) -> None:
        """Wait for the worker to end, forcing it after ``cleanup_time`` seconds."""

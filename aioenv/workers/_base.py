"""The interface every worker kind implements, and the bookkeeping they share.

A kind implements a handful of hooks: ``_spawn`` (start a fresh env: a process, a thread,
an in-line runner), ``_submit`` (start a RESET or step request without blocking),
``_discard_env`` (drop a failed env at once: kill its process, abandon its thread),
``_start_close`` and ``_wait_closed``. Replies come back through ``_on_reply``, which drops
stale replies by sequence number, applies deadlines and restarts, and delivers the rest to
the worker's :class:`~aioenv._inbox.Inbox`: its own, or its pool's.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import anyio

from .._environment import EnvSource, Step, describe_source, resolve_source
from .._errors import (
    ClosedError,
    EnvError,
    NoActionInFlight,
    StateNotTaken,
    WorkerError,
    WorkerTimeout,
)
from .._inbox import Inbox, Outcome
from .._runner import ControlRequest, EpisodeOptions, Failure
from .._sentinels import CLOSE, RESET, Reset, is_reset
from .._shared_memory import owned_step
from .._supervision import Supervision, restart_seed

__all__ = ["Worker"]

S = TypeVar("S")


class Worker(abc.ABC, Generic[S]):
    """One environment behind the worker interface: ``send_action`` then ``get_state``.

    ``send_action`` never blocks the event loop (a sync worker steps inline, which is its
    point). At most one action is in flight per worker, and its state must be taken before
    the next action is sent.
    """

    kind: ClassVar[str]
    _discard_verb: ClassVar[str] = "dropped"  # what a timeout does to the env, for messages

    def __init__(
        self,
        env: EnvSource,
        *,
        seed: int | None,
        cleanup_time: float,
        step_timeout: float | None = None,
        start_timeout: float | None = None,
    ) -> None:
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        if not (isinstance(cleanup_time, (int, float)) and cleanup_time >= 0):
            raise ValueError(f"cleanup_time must be a number >= 0, got {cleanup_time!r}")
        self.seed = seed
        self.cleanup_time = float(cleanup_time)
        self.env_name = describe_source(env)
        #: What the worker builds its env from (a gymnasium id becomes a factory over its
        #: spec, looked up in this process).
        self.source = resolve_source(env)
        self.worker_id: int | None = None
        self.observation_space: Any = None
        self.action_space: Any = None
        #: How many times this worker's env was rebuilt after a failure.
        self.restarts = 0
        self._supervision = Supervision(step_timeout=step_timeout, start_timeout=start_timeout)
        self._episode = EpisodeOptions()
        self._next_reset_seed: int | None = None  # from set_seeds(): the next reset's seed
        self._controls: dict[int, asyncio.Future[Any]] = {}  # control requests in flight
        # The pool's space check: an error to raise in place of the first reply, or None.
        self._on_first_reply: Callable[[Worker[Any]], WorkerError | None] | None = None
        self._inbox = Inbox(ordered=True)
        self._in_pool = False
        self._next_seq = 1
        self._awaited_seq = 0  # the request whose reply is still to come; 0 = none
        self._sent_at = 0.0
        self._deadline: asyncio.TimerHandle | None = None
        self._started = False  # the current env has answered a request
        self._failure: WorkerError | None = None  # set once the worker can take no more
        self._consecutive_failures = 0
        self._restart_reason: str | None = None  # annotate the reply to the restart's reset
        self._pending_restart: str | None = None  # failed while idle: restart on next send
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
        if action is CLOSE:  # identity: never compares an action with ==
            if self._inbox.is_owed(self.worker_id):
                raise StateNotTaken(
                    f"{self.name} has a state that was not taken; take it with get_state() "
                    "before sending CLOSE, or call aclose() to close it discarding that state"
                )
            self._closing = True
            self._cancel_deadline()
            self._start_close()
            return
        if self._failure is not None:
            raise self._failure
        inbox = self._inbox
        if inbox.is_owed(self.worker_id):
            raise StateNotTaken(
                f"{self.name} already has an action in flight or a state not yet taken; "
                "take it with get_state() before sending another action"
            )
        if self._loop is not asyncio._get_running_loop():
            self._ensure_loop()
        if self._next_reset_seed is not None and is_reset(action):
            # From set_seeds(): this reset takes the stored seed, unless it names its own.
            request = action if isinstance(action, Reset) else Reset()
            if request.seed is None:
                action = dataclasses.replace(request, seed=self._next_reset_seed)
            self._next_reset_seed = None
        seq = self._next_seq
        self._next_seq = seq + 1
        self._awaited_seq = seq
        inbox.owe(self.worker_id)
        if self._pending_restart is not None:
            # The env failed while idle and was dropped: the fresh env's reset answers this
            # request in place of the action (its info says so).
            reason, self._pending_restart = self._pending_restart, None
            self._restart(seq, reason)
            return
        if self._supervision.has_deadlines:
            self._arm_deadline(seq)  # before submitting: a sync worker answers inside _submit
        try:
            self._submit(seq, action)
        except BaseException:
            # Nothing was sent (an action that does not pickle, say): the worker is untouched.
            self._cancel_deadline()
            self._awaited_seq = 0
            self._inbox.forgive(self.worker_id)
            raise

    async def get_state(self) -> S:
        """The state produced by the last action sent. Raises :class:`~aioenv.EnvError` if
        the env raised, :class:`~aioenv.WorkerDied` if the worker died,
        :class:`~aioenv.WorkerTimeout` if it ran past its deadline."""
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
                if outcome.borrowed:
                    return owned_step(outcome.state)  # type: ignore[return-value]
                return outcome.state  # type: ignore[no-any-return]
            if not inbox.is_owed(self.worker_id):
                if self._closing:
                    raise ClosedError(f"{self.name} was closed while waiting for its state")
                raise NoActionInFlight(f"{self.name} has no action in flight; send_action() first")
            await inbox.wait(None)

    async def aclose(self, cleanup_time: float | None = None) -> None:
        """Close the env and stop the worker: ask it to close, wait ``cleanup_time``
        seconds, then force it. Idempotent; runs to the end even if cancelled."""
        timeout = self.cleanup_time
        if cleanup_time is not None:
            timeout = min(cleanup_time, timeout)
        with anyio.CancelScope(shield=True):
            self._ensure_loop(closing=True)  # a pool may be closed from a later event loop
            if not self._closing:
                self._closing = True
                self._cancel_deadline()
                self._start_close()
            self._inbox.forgive(self.worker_id)
            self._fail_controls(ClosedError(f"{self.name} was closed"))
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
    def _attach(
        self,
        inbox: Inbox,
        worker_id: int,
        supervision: Supervision,
        episode: EpisodeOptions | None = None,
    ) -> None:
        if self._in_pool:
            raise ValueError(f"{self.name} already belongs to a pool")
        if self._inbox.num_owed:
            raise StateNotTaken(f"{self.name} has a state not yet taken; take it before pooling it")
        if self._closing:
            raise ClosedError(f"{self.name} is closed and cannot join a pool")
        own = self._supervision
        self._supervision = dataclasses.replace(
            supervision,
            step_timeout=own.step_timeout or supervision.step_timeout,
            start_timeout=own.start_timeout or supervision.start_timeout,
        )
        self._inbox = inbox
        self._in_pool = True
        self.worker_id = worker_id
        if episode is not None and episode != self._episode:
            self._episode = episode
            self._configure(episode)

    # For worker kinds ----------------------------------------------------------------
    def _ensure_loop(self, *, closing: bool = False) -> asyncio.AbstractEventLoop:
        """The running loop, which this worker is bound to from now on. A worker moves to a
        new loop (a later ``asyncio.run``) once its old loop is closed, when nothing of it
        is in flight; ``closing``: whatever was in flight is dropped."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                f"{self.name}: send_action() must be called from async code running "
                "in an asyncio event loop"
            ) from None
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
        self._cancel_deadline()
        if self._awaited_seq:
            self._awaited_seq = 0
            self._inbox.forgive(self.worker_id)
        self._fail_controls(ClosedError(f"{self.name} was closed"))

    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hook: start watching this worker from ``loop``."""

    def _abandon(self) -> None:
        """Hook: stop at once, without a loop (a pool that failed to be built)."""
        self._closing = True

    def _control(self, request: ControlRequest) -> asyncio.Future[Any]:
        """Send a control request (call, get/set attribute); the future gets its result.
        Requests are answered in order, after any step already in flight."""
        if self._closing:
            raise ClosedError(f"{self.name} is closed")
        if self._failure is not None:
            raise self._failure
        loop = self._ensure_loop()
        seq = self._next_seq
        self._next_seq = seq + 1
        future: asyncio.Future[Any] = loop.create_future()
        self._controls[seq] = future
        try:
            self._submit_control(seq, request)
        except BaseException:
            del self._controls[seq]
            raise
        return future

    def _on_control_reply(self, seq: int, result: Any) -> None:
        future = self._controls.pop(seq, None)
        if future is None or future.done():
            return
        if isinstance(result, Failure):
            future.set_exception(self._env_error(result))
        else:
            future.set_result(result)

    def _fail_controls(self, error: BaseException) -> None:
        controls, self._controls = self._controls, {}
        for future in controls.values():
            if not future.done():
                future.set_exception(error)

    def _on_reply(self, seq: int, result: Any, borrowed: bool = False) -> None:
        """Deliver the reply to request ``seq``: a state, or a :class:`Failure`.
        ``borrowed``: the state's observation is a view of shared memory."""
        if not seq or seq != self._awaited_seq:
            if seq in self._controls:
                self._on_control_reply(seq, result)
            return  # a late reply to a request nobody waits for any more
        if self._deadline is not None:
            self._cancel_deadline()
        if not self._started:
            self._started = True
            check = self._on_first_reply
            mismatch = check(self) if check is not None else None
            if mismatch is not None:  # a configuration error: no restart would fix it
                self._failure = mismatch
                self._awaited_seq = 0
                self._inbox.deliver(Outcome(self.worker_id, None, mismatch))
                return
        if isinstance(result, Failure):
            self._on_failure(self._env_error(result), env_gone=False)
            return
        self._awaited_seq = 0
        self._consecutive_failures = 0
        if self._restart_reason is not None:
            result = _mark_restarted(result, self._restart_reason)
            self._restart_reason = None
        self._inbox.deliver(Outcome(self.worker_id, result, None, borrowed))

    def _on_death(self, error: WorkerError) -> None:
        """The current env is gone (its process died)."""
        if not self._closing:
            self._on_failure(error, env_gone=True)

    def _on_failure(self, error: WorkerError, *, env_gone: bool) -> None:
        """Restart the env if the policy allows it, otherwise raise ``error`` in place of
        the state in flight (and, if the env is gone, on every later action)."""
        self._cancel_deadline()
        in_flight = self._awaited_seq
        if self._closing:
            self._awaited_seq = 0
            return
        supervision = self._supervision
        self._restart_reason = None
        self._consecutive_failures += 1
        restarting = (
            supervision.restart == "on_failure" and self.restarts < supervision.max_restarts
        )
        if restarting:
            self.restarts += 1
        if supervision.on_failure is not None:
            supervision.on_failure(error)
        if restarting or env_gone:
            self._fail_controls(error)
        if restarting:
            self._discard_env(env_gone)
            reason = _describe_failure(error)
            if not in_flight:
                self._pending_restart = reason
                return
            delay = supervision.backoff(self._consecutive_failures)
            assert self._loop is not None
            self._loop.call_later(delay, self._restart, in_flight, reason)
            return
        if env_gone:
            self._failure = error
            self._discard_env(env_gone)
        self._awaited_seq = 0
        if in_flight:
            self._inbox.deliver(Outcome(self.worker_id, None, error))

    def _restart(self, seq: int, reason: str) -> None:
        if self._closing or seq != self._awaited_seq:
            return
        self._started = False
        self._restart_reason = reason
        try:
            self._spawn(restart_seed(self.seed, self.restarts))
            self._arm_deadline(seq)
            self._submit(seq, RESET)
        except Exception as exc:  # no new env could be started: give up on this worker
            self._cancel_deadline()
            error = WorkerError(
                f"{self.name}: could not restart after {reason} ({type(exc).__name__}: {exc})",
                worker_id=self.worker_id,
            )
            error.__cause__ = exc
            self._restart_reason = None
            self._failure = error
            self._awaited_seq = 0
            self._inbox.deliver(Outcome(self.worker_id, None, error))

    def _arm_deadline(self, seq: int) -> None:
        timeout = self._supervision.deadline(starting=not self._started)
        if timeout is None or self._awaited_seq != seq:
            return
        loop = self._loop
        assert loop is not None
        self._sent_at = loop.time()
        self._deadline = loop.call_later(timeout, self._on_deadline, seq, timeout)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _on_deadline(self, seq: int, timeout: float) -> None:
        self._deadline = None
        if seq != self._awaited_seq:
            return
        assert self._loop is not None
        self._timed_out(seq, timeout, self._loop.time() - self._sent_at)

    def _timed_out(self, seq: int, timeout: float, elapsed: float) -> None:
        what = "start-up" if not self._started else "step"
        error = WorkerTimeout(
            f"{self.name}: request {seq} ({what}) ran {elapsed:.2f} s, past its deadline of "
            f"{timeout:g} s; the env was {self._discard_verb}",
            worker_id=self.worker_id,
            seq=seq,
            elapsed=elapsed,
            timeout=timeout,
        )
        self._on_failure(error, env_gone=True)

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
    def _spawn(self, seed: int | None) -> None:
        """Start a fresh env with ``seed`` for its first reset (at a restart)."""

    @abc.abstractmethod
    def _submit(self, seq: int, action: Any) -> None:
        """Start request ``seq`` (RESET or a step) without blocking."""

    @abc.abstractmethod
    def _submit_control(self, seq: int, request: ControlRequest) -> None:
        """Send control request ``seq`` to the env without blocking."""

    def _configure(self, episode: EpisodeOptions) -> None:
        """Give the running env new episode options (sent ahead of any request)."""
        self._submit_control(0, ControlRequest("configure", kwargs={"episode": episode}))

    @abc.abstractmethod
    def _discard_env(self, env_gone: bool) -> None:
        """Drop the current env at once; its late replies must never be delivered.
        ``env_gone``: it died or hung (rather than raised), so nothing of it can be kept."""

    @abc.abstractmethod
    def _start_close(self) -> None:
        """Ask the env to close, without blocking."""

    @abc.abstractmethod
    async def _wait_closed(self, cleanup_time: float) -> None:
        """Wait for the worker to end, forcing it after ``cleanup_time`` seconds."""


def _describe_failure(error: WorkerError) -> str:
    return f"{type(error).__name__}: {error.args[0] if error.args else error}"


def _mark_restarted(state: Any, reason: str) -> Any:
    if not isinstance(state, Step):
        return state
    info = dict(state.info)
    info["aioenv"] = {"restarted": True, "reason": reason}
    return dataclasses.replace(state, info=info)

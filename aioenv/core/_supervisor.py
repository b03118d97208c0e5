"""How a worker is supervised: deadlines per phase, restart budgets and failure reports.

:class:`Supervisor` is one worker's state machine over the options
(:class:`~aioenv.core._supervision.Supervision`, a pool's merged with a worker's own
deadlines, and the deadline rule, which the engine's children share: they live in
:mod:`aioenv.core._supervision`). Timers run on the worker's event
loop through :class:`Clock` (asyncio's ``call_later``: the worker level uses asyncio's
primitives, which uvloop speeds up), or in the calling thread where envs step there (in
line, and in the engine's children and parent: :mod:`aioenv.env_side._env_restarts`).

:class:`RestartRule` is what a supervised env does with :mod:`aioenv.core._restarts`'
cut-short rule about its failures and restarts, written once for a worker
(:class:`~aioenv.workers._supervised.SupervisedEnv`) and an env stepped in the calling
thread (:mod:`aioenv.env_side._env_restarts`).
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Callable
from typing import Any, Protocol

from ..core._commands import RESET, Reset
from ..core._errors import WorkerError, describe_failure
from ..core._messages import EpisodeOptions
from ..core._restarts import EPISODE_TIMEOUT, open_episode, restart_answers, restarted_state
from ..core._seeds import restart_seed
from ..core._supervision import Phase, Supervision, report_failure

__all__ = ["Clock", "Remedies", "RestartRule", "Supervisor"]


class Clock(Protocol):
    """What a :class:`Supervisor` needs of an event loop (``asyncio`` loops have it)."""

    def time(self) -> float: ...

    def call_later(
        self, delay: float, callback: Callable[..., object], *args: Any
    ) -> Cancellable: ...


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Remedies(abc.ABC):
    """What a supervisor can do to its worker, which owns it and implements these (the
    supervisor calls them on its owner).

    ``_discard_env(env_gone)``: drop the env at once (``env_gone``: it died or hung, so
    nothing of it is kept). ``_start_env(seq, seed, reason)``: start a new env and send it
    a RESET as request ``seq``. ``_fail_request(error, for_good)``: raise ``error`` in
    place of the state in flight (``for_good``: and on every later action).
    ``_fail_controls(error)``: fail the control requests in flight. ``_awaiting(seq)``:
    request ``seq`` is still awaited (the worker is open and sent nothing since).
    ``_timed_out(seq, timeout, elapsed)``: request ``seq`` ran past its deadline.
    ``_start_env`` also gets the failure that caused the restart, for its own error if
    the start fails.

    The last three default to those of a supervisor whose request in flight is answered
    in the calling thread (envs in line, an engine's children): it is awaited until it is
    answered (it cannot be abandoned, so it has no deadline of the supervisor's), and no
    control request is in flight beside it.
    """

    @abc.abstractmethod
    def _discard_env(self, env_gone: bool) -> None: ...
    @abc.abstractmethod
    def _start_env(self, seq: int, seed: int | None, reason: str) -> None: ...
    @abc.abstractmethod
    def _fail_request(self, error: WorkerError, for_good: bool) -> None: ...

    def _fail_controls(self, error: WorkerError) -> None:
        return None  # no control request is in flight beside the one answered

    def _awaiting(self, seq: int) -> bool:
        return True  # the request in flight is awaited until it is answered

    def _timed_out(self, seq: int, timeout: float, elapsed: float) -> None:
        raise AssertionError(
            "a request answered in the calling thread has no deadline here"
        )  # pragma: no cover


class Supervisor:
    """One worker's supervision: the deadline of the request in flight, restarts so far
    (and when), back-to-back failures, and what to do about the next failure: restart the
    env (after a backoff, with a deterministic seed) or raise the error.

    The restart budget (:meth:`_take_restart`, the one implementation of it, for every
    worker kind) is one of two rules. Without a ``restart_window`` (the default), the
    crash-loop rule: a restart is allowed while the env has failed at most
    ``max_restarts`` times since its last progress (a state answered after its start:
    the reset that starts a new env is no progress); so an env that keeps making progress
    between failures is restarted for as long as it runs, and one that never does (it
    fails at every start, or raises at every request) is given up after ``max_restarts``
    restarts. With a ``restart_window``, the rate rule: a restart is allowed while fewer
    than ``max_restarts`` restarts fall within the last ``restart_window`` seconds,
    counted at the times of the failures that caused them. Either way, the failure that
    finds the budget spent gives the worker up for good (the env is dropped, whether it
    died or merely raised).

    The worker owns it and drives it: it arms a deadline for each request, reports each
    answer and failure, and is the :class:`Remedies` it acts through. Timers run on a
    :class:`Clock` (the worker's event loop), so no process, thread or real loop is needed
    to test it.
    """

    def __init__(self, options: Supervision, seed: int | None, owner: Remedies) -> None:
        self.configure(options)
        self.seed = seed
        #: Restarts so far (each rebuilt the env after a failure).
        self.restarts = 0
        #: When the failures that caused the restarts still within the window happened.
        self._restart_times: collections.deque[float] = collections.deque()
        #: The current env has not answered a request yet (start-up deadlines apply).
        self.starting = True
        #: The env failed while no request was in flight: the next request restarts it.
        self.pending_restart: str | None = None
        self._owner = owner
        #: Failures with no answer of any kind between them (the backoff doubles on them).
        self._consecutive_failures = 0
        #: Failures since the env last made progress (the crash-loop rule counts them).
        self._failures_since_progress = 0
        #: The reason of the restart the last state answered completes (see answered).
        self.restart_completed: str | None = None
        self._restart_reason: str | None = None
        #: What the request in flight is (see
        #: :func:`~aioenv.core._supervision.request_phase`), and how many transitions it
        #: plays (a rollout segment: its deadline is that many step deadlines).
        self.request_phase: Phase = "step"
        self.request_steps = 1
        self._timer: Cancellable | None = None
        #: Envs rebuilt because their episode ran past its budget (no restart spent).
        self.budget_restarts = 0
        self._budget_timer: Cancellable | None = None
        self._scheduled: tuple[Cancellable, str] | None = None  # a restart waiting to start
        #: A state answered now would change nothing here: the env answered since it
        #: started, no failure is counted against it, no restart waits for its first state
        #: and no deadline runs. A plain attribute, read on every answer: a caller skips
        #: :meth:`answered` while it holds. Whatever unsettles it clears it here; only
        #: :meth:`answered` sets it again.
        self.settled = False

    def configure(self, options: Supervision) -> None:
        self.options = options
        #: Deadlines are set: the per-request path checks this plain attribute first.
        self.has_deadlines = options.has_deadlines
        #: The open episode's budget (``episode_timeout``), read on every request.
        self.episode_timeout = options.episode_timeout

    # Deadlines -------------------------------------------------------------------------
    @property
    def phase(self) -> Phase:
        """The phase of the request in flight: ``"start-up"`` until the env answered."""
        return "start-up" if self.starting else self.request_phase

    def timeout(self) -> float | None:
        """Seconds the request in flight may take (None: no deadline)."""
        return self.options.deadline(self.phase, self.request_steps)

    def arm(self, clock: Clock, seq: int, phase: Phase = "step", steps: int = 1) -> None:
        """Start the deadline of request ``seq`` of ``phase``, ``steps`` transitions long,
        sent now."""
        self.request_phase, self.request_steps = phase, steps
        timeout = self.timeout()
        if timeout is not None:
            self._timer = clock.call_later(timeout, self._expire, clock, seq, timeout, clock.time())
            self.settled = False

    def arm_budget(self, clock: Clock, remaining: float, ran_out: Callable[[], None]) -> None:
        """Call ``ran_out`` in ``remaining`` seconds unless the request in flight is
        answered (or given up) first: the open episode's budget ends while it runs. (A
        timer that fired is cancelled by the next :meth:`disarm` to no effect.)"""
        self._budget_timer = clock.call_later(remaining, ran_out)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._budget_timer is not None:
            self._budget_timer.cancel()
            self._budget_timer = None

    def _expire(self, clock: Clock, seq: int, timeout: float, sent_at: float) -> None:
        self._timer = None
        if self._owner._awaiting(seq):
            self._owner._timed_out(seq, timeout, clock.time() - sent_at)

    # Outcomes --------------------------------------------------------------------------
    def answered(self, state: bool = False) -> bool:
        """The env answered, with a state (``state``) or a failure; True if that is its
        first answer since it started. A state ends the failure streak and, unless it is
        a new env's first answer (its start, a reconnect), is the env's progress; then
        :attr:`restart_completed` is the reason of the restart it completes (the worker
        annotates the state with it), or None. One call per answer: the per-step path's."""
        if self._timer is not None:
            self.disarm()
        first = self.starting
        self.starting = False
        if state:
            self._consecutive_failures = 0
            if not first:
                self._failures_since_progress = 0
            self.restart_completed, self._restart_reason = self._restart_reason, None
        # No deadline runs now (disarmed above): settled where nothing else is pending.
        self.settled = (
            not self._consecutive_failures
            and not self._failures_since_progress
            and self._restart_reason is None
            and self.restart_completed is None
        )
        return first

    def failed(self, error: WorkerError, *, env_gone: bool, in_flight: int, clock: Clock) -> None:
        """Act on a failure of request ``in_flight`` (0: none was in flight): report it to
        ``on_failure``, then restart the env if the policy and budget allow, else raise it.
        ``env_gone``: the env died or hung, so it cannot serve another request. The error
        is for good (the worker is given up) when the env is gone and no restart follows,
        or when restarts are on and the budget is spent; with restarts off, an env that
        merely raised is kept."""
        self.disarm()
        options, owner = self.options, self._owner
        self.settled = False
        self._restart_reason = None
        self._consecutive_failures += 1
        self._failures_since_progress += 1
        restarts_on = options.restart == "on_failure"
        restarting = restarts_on and self._take_restart(clock.time())
        report_failure(options.on_failure, error)
        for_good = not restarting and (env_gone or restarts_on)
        if restarting or for_good:
            owner._fail_controls(error)
            owner._discard_env(env_gone)
        if not restarting:
            owner._fail_request(error, for_good)
            return
        self.restart_later(in_flight, describe_failure(error), clock)

    def _take_restart(self, now: float) -> bool:
        """Spend one restart on a failure at ``now``; False: the budget is used up (see
        the class's docstring for the two rules)."""
        window, max_restarts = self.options.restart_window, self.options.max_restarts
        if window is None:  # the crash-loop rule: failures since the last progress
            if self._failures_since_progress > max_restarts:
                return False
        else:  # the rate rule: restarts within the last ``window`` seconds
            times = self._restart_times
            while times and times[0] <= now - window:
                times.popleft()
            if len(times) >= max_restarts:
                return False
            times.append(now)
        self.restarts += 1
        return True

    def end_episode(self, in_flight: int, clock: Clock) -> None:
        """The open episode ran past its budget and the env, busy with request
        ``in_flight``, was dropped: start a new one whose reset answers it (0: the next
        request starts it). No failure: no restart is spent, nothing is reported, the
        failure streak stays as it was."""
        self.disarm()
        self.budget_restarts += 1
        self.restart_later(in_flight, EPISODE_TIMEOUT, clock)

    def restart_later(self, seq: int, reason: str, clock: Clock, seed: int | None = None) -> None:
        """Start a new env for request ``seq`` after the backoff, from the event loop (as
        every restart, so a sync worker's failures never answer a request inline): the env
        failed while ``seq`` was in flight (:meth:`failed`; no restart waits for the next
        request then: a request is never sent to an env dropped for one), ran out of its
        episode's budget (:meth:`end_episode`), or failed before ``seq`` came (while idle,
        or it ended its episode cut short). ``seed``: the seed of the reset that asked for
        it, if the user gave one. ``seq`` 0: no request is in flight (the env failed, or
        ran out of its budget, while idle), so none is started now: the next request
        starts it (:attr:`pending_restart`)."""
        self.pending_restart = None if seq else reason
        if not seq:
            return
        delay = self.options.backoff(self._consecutive_failures)
        self._scheduled = (clock.call_later(delay, self.restart, seq, reason, seed), reason)

    def restart(self, seq: int, reason: str, seed: int | None = None) -> None:
        """Start a new env whose reset answers request ``seq``, unless that is no longer
        awaited. Its seed is ``seed`` (a seeded reset asked for it) or deterministic
        (:func:`~aioenv.core._seeds.restart_seed`)."""
        self._scheduled = None
        if not self._owner._awaiting(seq):
            # Nobody waits for it any more: the next request restarts the env, as after a
            # failure while idle.
            self.pending_restart = reason
            return
        self.pending_restart = None
        self.starting, self.settled = True, False
        self._restart_reason = reason
        if seed is None:
            seed = restart_seed(self.seed, self.restarts + self.budget_restarts)
        self._owner._start_env(seq, seed, reason)

    @property
    def dropped(self) -> str | None:
        """Why the env was dropped while no new one has started yet (the next request
        starts it, or its restart waits out the backoff); None: the env is there."""
        return self.pending_restart if self._scheduled is None else self._scheduled[1]

    def forget_in_flight(self) -> None:
        """The request in flight is forgotten (its reply will be dropped): no deadline for
        it, and a restart waiting to answer it starts with the next request instead."""
        self.disarm()
        if self._scheduled is not None:
            timer, reason = self._scheduled
            timer.cancel()
            self._scheduled = None
            self.pending_restart = reason

    def restart_failed(self) -> None:
        """No new env could be started: nothing is left to annotate or time."""
        self.disarm()
        self._restart_reason = None


class RestartRule(Remedies):
    """The cut-short rule (:mod:`aioenv.core._restarts`) as a supervised env follows it,
    over the fields named here: which episode its failure cuts short, whether its
    restarted env's reset or the cut-short step answers the request in flight, what a
    request to an env waiting for its restart gets, and how the restarted env's first
    state is handed out. A worker (:class:`~aioenv.workers._supervised.SupervisedEnv`)
    and an env stepped in the calling thread (``_OneEnv`` of
    :mod:`aioenv.env_side._env_restarts`) follow it alike; each hands out states its own
    way (:meth:`_deliver_cut_short`, :meth:`_last_state`). Either is its supervisor's
    :class:`Remedies`."""

    _supervisor: Supervisor
    #: The episode options its env runs under (its autoreset decides what is cut short).
    _episode: EpisodeOptions
    #: The observation space of its states (a batch's splits into rows by it); None:
    #: not known, or its states are no batches.
    observation_space: Any = None
    #: The last request sent: what a failure cuts short.
    _sent: Any = None
    #: The state whose episode the restart in flight (or the reset after an episode ran
    #: out of its budget) cuts short (same-step autoreset: the reset is carried by the
    #: cut-short step); None: nothing to cut.
    _cut_from: Any = None

    @abc.abstractmethod
    def _last_state(self) -> Any:
        """The state last handed out (None: none yet)."""

    @abc.abstractmethod
    def _deliver_cut_short(self, last: Any, reason: str) -> None:
        """Answer the request in flight with the step that cuts ``last``'s episode short;
        the new env starts with the next request."""

    def _open_episode(self, request: Any) -> Any:
        """The state last handed out if ``request`` steps an episode it left open (which a
        failure now cuts short), else None."""
        return open_episode(self._last_state(), request, self._episode.autoreset)

    def _fail_over(
        self, error: WorkerError, *, env_gone: bool, in_flight: int, clock: Clock
    ) -> None:
        """The env failed (``error``; ``env_gone``: it died or hung) with request
        ``in_flight`` in flight (0: none): the supervisor acts on it (:meth:`Supervisor.failed`).
        Restarted now: the new env's reset answers the request in flight. Else the
        episode ends here, as a truncated one: the new env is started by the next
        request, whose state its reset is (as an autoreset's, next-step or by hand)."""
        supervisor = self._supervisor
        last = self._open_episode(self._sent) if in_flight else None
        restarted_now = restart_answers(last, self._episode.autoreset)
        self._cut_from = last if restarted_now else None
        in_flight = in_flight if restarted_now else 0
        supervisor.failed(error, env_gone=env_gone, in_flight=in_flight, clock=clock)
        if not restarted_now and supervisor.pending_restart is not None:
            self._deliver_cut_short(last, supervisor.pending_restart)

    def _restart_for(self, seq: int, request: Any, reason: str, clock: Clock) -> None:
        """Request ``seq`` (``request``) comes to an env that failed and was dropped: an
        episode that failure left open ends now (under same-step autoreset with the new
        env's reset), else the new env's reset answers the request, started on
        ``clock``."""
        if not self._carried(self._open_episode(request), reason):
            return
        # A reset the user seeded seeds the new env: their episode starts where they said.
        seed = request.seed if isinstance(request, Reset) else None
        self._supervisor.restart_later(seq, reason, clock, seed)

    def _carried(self, last: Any, reason: str) -> bool:
        """Whether the new env's reset answers the request in flight, where the episode
        ``last`` left open (None: none is) ends for ``reason``: then ``last`` is the state
        its restart cuts short (:attr:`_cut_from`); else the step that cuts it short
        answers the request now (:meth:`_deliver_cut_short`)."""
        if restart_answers(last, self._episode.autoreset):
            self._cut_from = last
            return True
        self._deliver_cut_short(last, reason)
        return False

    def _restart_reset(self) -> Any:
        """The reset a new env starts with: where it answers a reset the user gave
        options to (a task, say), with those options, so the episode starts as asked (the
        seed went to the new env already)."""
        sent = self._sent
        if isinstance(sent, Reset) and sent.options is not None:
            return Reset(options=sent.options)
        return RESET

    def _restarted(self, first: Any, reason: str) -> Any:
        """The restarted env's first state ``first`` (or the reset that answers after an
        episode ran out of its budget) as handed out: the step that cuts short the episode
        of ``_cut_from`` and carries it (same-step autoreset), else ``first`` marked as a
        restart's."""
        last, self._cut_from = self._cut_from, None
        return restarted_state(first, last, reason, self.observation_space)

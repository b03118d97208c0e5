"""What a worker does about its env's failures and its episodes' ends, for every worker
kind: the remedies its :class:`~aioenv.core._supervisor.Supervisor` applies through it
(drop the env, start a new one, fail the request, give the worker up), the step that cuts
short an episode its env left open when it failed (``restart="on_failure"``) or ran past
``episode_timeout``, and that budget's clock. :class:`~aioenv.workers.Worker` inherits
them; the cut-short states themselves are :mod:`aioenv.core._restarts`', and what a
failure or a restart does by that rule is :class:`~aioenv.core._supervisor.RestartRule`'s
(which envs stepped in line follow too).

The remedies act through the hooks a worker kind implements (:class:`SupervisedEnv`'s):
how it starts an env, sends it requests, drops it after a failure and closes it;
:class:`~aioenv.workers.Worker` does everything else."""

from __future__ import annotations

import abc
import asyncio
import dataclasses
from typing import Any, ClassVar

from ..core._commands import RESET, is_reset
from ..core._environment import Step
from ..core._errors import WorkerDied, WorkerError, restart_failed
from ..core._messages import ControlRequest, EpisodeOptions
from ..core._restarts import EPISODE_TIMEOUT, cut_short_state, is_restart_reset
from ..core._rollouts import Rollout
from ..core._supervision import Supervision, budget_end, request_phase, timeout_error
from ..core._supervisor import RestartRule
from ..env_side._env_restarts import ThreadClock
from ..loops._here import CoroutineHost
from ._inbox import Inbox, Outcome

__all__ = ["SupervisedEnv"]


class SupervisedEnv(RestartRule):
    """Failures, cut-short episodes and the episode budget, over the fields of
    :class:`~aioenv.workers.Worker` named here (and :class:`~aioenv.core._supervisor.RestartRule`'s,
    the cut-short rule it follows as envs stepped in line do); and the hooks a worker kind
    (sync, thread, process, ...) implements. Replies go back through
    ``Worker._on_reply(seq, result)``; a dead env through :meth:`_on_death` (``error``), an
    env that raised ``SystemExit`` and the like through :meth:`_on_env_exit`."""

    _discard_verb: ClassVar[str] = "dropped"  # what a timeout does to the env, for messages
    #: The worker's id in its pool; None outside one.
    worker_id: int | None = None
    num_envs: int
    action_space: Any = None
    #: The episode options its envs run under: the defaults (frozen, so shared) until a
    #: pool's join_pool gives its own.
    _episode = EpisodeOptions()
    # Where its open episode stands against its ``episode_timeout``:
    #: When the open episode's budget runs out (the loop's clock); None: no episode is
    #: timed (none is open, or no ``episode_timeout``).
    _budget_deadline: float | None = None
    #: An episode ran out of its budget while no step was in flight: its env goes on, and
    #: its reset answers the next request (marked, as a restarted env's would be).
    _reset_next = False
    #: The request in flight is a reset sent in place of a step after an episode ran out
    #: of its budget: that owed reset, or under same-step autoreset the reset that the step
    #: cutting the episode short carries (``_cut_from`` holds that episode's last state,
    #: as for a restart's reset).
    _resetting = False
    # Its requests, numbered from 1 (see workers._inbox): its per-step path numbers a
    # request and delivers its state by writing these fields itself, as a call per step
    # would cost more than the step's bookkeeping.
    #: The inbox its states go to: its own, or its pool's once it joins one.
    _inbox: Inbox
    #: The number the next request gets.
    _next_seq = 1
    #: The request whose reply is still to come; 0: none.
    _awaited = 0
    #: The futures of the control requests still to be answered, by sequence number.
    _controls: dict[int, asyncio.Future[Any]]
    _loop: asyncio.AbstractEventLoop | None = None
    _closing = False
    #: The last state delivered ended an episode (kept only with deadlines: under
    #: autoreset "next_step" the next step then resets, see request_phase).
    _episode_ended = False
    _failure: WorkerError | None = None  # set once the worker can take no more
    #: The last outcome handed out (and RestartRule's ``_sent``, the last request sent):
    #: what a failure cuts short.
    _last: Outcome | None = None

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The worker's name, for messages."""

    # Kinds' hooks -----------------------------------------------------------------------
    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:  # (optional)
        """Hook: start watching this worker from ``loop``."""

    def _abandon(self) -> None:
        """Hook: stop at once, without a loop. By default the env is asked to close, as at
        :meth:`_start_close` (sync, thread and coroutine workers, which need no loop for
        that)."""
        self._start_close()

    def _run_coroutines_in(self, host: CoroutineHost) -> None:  # (optional)
        """Hook: run the env's coroutines through ``host`` rather than on the worker's loop
        (a pool bridged to a trio run); only a kind whose env is a coroutine env has any."""

    @abc.abstractmethod
    def _spawn(self, seed: int | None) -> None:
        """Start a fresh env with ``seed`` for its first reset (at a restart)."""

    @abc.abstractmethod
    def _submit(self, seq: int, action: Any) -> None:
        """Start request ``seq`` (RESET or a step) without blocking."""

    def _submit_control(self, seq: int, request: ControlRequest) -> None:
        """Send control request ``seq`` to the env without blocking: by default as a
        request, which the env answers in order with the others."""
        self._submit(seq, request)

    def _start_delay_cause(self) -> str | None:
        """Hook: why the env may not have started yet, for a start-up timeout's message;
        None: nothing known."""
        return None

    def _discard_env(self, env_gone: bool) -> None:
        """Drop the current env at once; its late replies must never be delivered.
        ``env_gone``: it died or hung (rather than raised), so nothing of it can be kept.
        By default it is asked to close, as at :meth:`_start_close` (sync and thread
        workers: their next env is a new runner, or a new thread)."""
        self._start_close()

    @abc.abstractmethod
    def _start_close(self) -> None:
        """Ask the env to close, without blocking."""

    @abc.abstractmethod
    async def _wait_closed(self, cleanup_time: float) -> None:
        """Wait for the worker to end, forcing it after ``cleanup_time`` seconds. Called
        by ``aclose`` only, on the event loop it has just bound the worker to."""

    # Failures ----------------------------------------------------------------------------
    def _on_failure(self, error: WorkerError, *, env_gone: bool) -> None:
        if self._closing:
            self._supervisor.disarm()
            self._awaited = 0
            return
        # A sync worker's env may fail before any event loop runs: it restarts in line then
        clock = self._loop or ThreadClock()
        # Its episode is over, and so is anything its budget had due (a reset still owed
        # by an idle budget's end stays owed).
        self._budget_deadline, self._resetting = None, False
        last = self._last
        if last is not None and last.borrowed:
            # Kept, not viewed: the new env may write its observations where it viewed.
            self._last = Outcome(last.worker_id, last.state.owned())
        # The cut-short rule's (RestartRule's): a cut-short step is handed out at once,
        # a restart now waits on the clock (run here in line where it is a ThreadClock).
        self._fail_over(error, env_gone=env_gone, in_flight=self._awaited, clock=clock)
        if isinstance(clock, ThreadClock):
            clock.run()

    def _on_death(self, error: WorkerError) -> None:
        """The current env is gone (its process died)."""
        if not self._closing:
            self._on_failure(error, env_gone=True)

    def _on_env_exit(self, exc: BaseException) -> None:
        """The current env raised ``SystemExit`` or another ``BaseException`` (not an
        ``Exception``): every worker kind treats it as the worker's death
        (:class:`~aioenv.WorkerDied`), as a process worker exiting would be."""
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else None
        error = WorkerDied(
            f"{self.name}: the env raised {type(exc).__name__}({exc}), which ends a worker "
            "like a process exit does",
            worker_id=self.worker_id,
            exitcode=code,
        )
        error.__cause__ = exc
        self._on_death(error)

    def _supervised_request(self, seq: int, action: Any) -> Any:
        """The request ``seq`` sends for ``action`` once its deadline is armed: the action,
        or the reset that takes its place (see :meth:`_within_budget`); None where no
        request goes out (a restart, or the cut-short step of an episode past its budget,
        answers it)."""
        supervisor = self._supervisor
        if supervisor.pending_restart is not None:
            self._reset_next = False  # the new env's reset answers this request anyway
            # A sync worker sent this before any event loop runs: it restarts in line.
            clock = self._loop or ThreadClock()
            self._restart_for(seq, action, supervisor.pending_restart, clock)
            if isinstance(clock, ThreadClock):
                clock.run()
            return None
        request = action
        if supervisor.episode_timeout is not None:
            request = self._within_budget(action)
            if request is None:
                return None
        if supervisor.has_deadlines:  # a segment plays num_steps in each of its envs
            phase = request_phase(request, self._episode.autoreset, self._episode_ended)
            steps = request.num_steps * self.num_envs if phase == "rollout" else 1
            assert self._loop is not None  # before submitting: a sync worker answers inside
            supervisor.arm(self._loop, seq, phase, steps)
        return request

    def _timed_out(self, seq: int, timeout: float, elapsed: float) -> None:
        phase = self._supervisor.phase
        cause = self._start_delay_cause() if phase == "start-up" else None
        reason = f"the env was {self._discard_verb}{'' if cause is None else f'; {cause}'}"
        error = timeout_error(self.name, self.worker_id, seq, phase, elapsed, timeout, reason)
        self._on_failure(error, env_gone=True)

    # Remedies: what the supervisor does through the worker ----------------------------
    def _awaiting(self, seq: int) -> bool:
        return not self._closing and seq == self._awaited

    def _fail_request(self, error: WorkerError, for_good: bool) -> None:
        if for_good and self._failure is None:
            # The first error for good stays the worker's: a later one (the death of a
            # process it shared with a worker that timed out) is its consequence.
            self._failure = error
        # Raised in place of the awaited request's state, if one is awaited.
        in_flight, self._awaited = self._awaited, 0
        if in_flight:
            self._inbox.deliver(Outcome(self.worker_id, None, error))

    def _fail_controls(self, error: BaseException) -> None:
        """Complete every pending control request with ``error``."""
        futures, self._controls = self._controls, {}
        for future in futures.values():
            if not future.done():
                future.set_exception(error)

    def _start_env(self, seq: int, seed: int | None, reason: str) -> None:
        supervisor = self._supervisor
        try:
            self._spawn(seed)
            if supervisor.has_deadlines:
                assert self._loop is not None
                supervisor.arm(self._loop, seq, "reset")
            self._submit(seq, self._restart_reset())
        except Exception as exc:  # no new env could be started: give up on this worker
            supervisor.restart_failed()
            self._fail_request(restart_failed(self.name, self.worker_id, reason, exc), True)

    # Episodes cut short ----------------------------------------------------------------
    def _last_state(self) -> Any:
        last = self._last
        return None if last is None else last.state

    def _deliver_cut_short(self, last: Any, reason: str) -> None:
        """Answer the request in flight with the step that cuts ``last``'s episode short;
        the new env starts with the next request."""
        state = cut_short_state(last, reason)
        self._budget_deadline = None
        self._awaited = 0
        self._last = outcome = Outcome(self.worker_id, state)
        self._inbox.deliver(outcome)

    # Episode budgets -------------------------------------------------------------------
    def _check_budget(self, options: Supervision) -> None:
        if options.episode_timeout is not None and self.num_envs > 1:
            raise ValueError(
                f"{self.name}: episode_timeout times one episode per worker; this worker "
                f"steps {self.num_envs} envs together (envs_per_worker): use one env per worker"
            )

    def _within_budget(self, action: Any) -> Any:
        """What the request now sent carries for ``action`` under the open episode's budget: the
        action (the budget's end, if it comes while the step runs, abandons it), a reset
        (the episode ran out of its budget: same-step autoreset carries the cut-short step
        with its answer; else the budget's end was handed out already and this request
        starts the next episode), or None: the episode ran out of its budget now, and its
        cut-short step answers the request in place of sending the action."""
        self._resetting = False
        if type(action) is Rollout:  # the segment times its episodes between its steps
            fresh, self._reset_next = self._reset_next, False
            budget = self._supervisor.episode_timeout
            return dataclasses.replace(action, episode_timeout=budget, fresh=fresh)
        if is_reset(action):
            self._reset_next = False
            return action
        if self._reset_next:
            self._reset_next, self._resetting = False, True
            self._sent = RESET
            return RESET
        deadline, loop = self._budget_deadline, self._loop
        if deadline is None:
            return action
        assert loop is not None
        remaining = deadline - loop.time()
        if remaining > 0:
            self._supervisor.arm_budget(loop, remaining, self._budget_ran_out)
            return action
        if self._carried(self._budget_ended(), EPISODE_TIMEOUT):
            self._resetting = True
            return RESET
        self._reset_next = True
        return None

    def _budget_ended(self) -> Any:
        """The open episode ran out of its budget, which times it no more: the state last
        handed out (its episode's, now cut short), owned (not a view of memory its env
        writes)."""
        self._budget_deadline = None
        last = self._last
        assert last is not None  # an episode is timed only once a state was handed out
        return last.state.owned() if last.borrowed else last.state

    def _budget_ran_out(self) -> None:
        """The open episode ran past its budget while its step was in flight: the step is
        abandoned and its env dropped; the episode ends cut short (under same-step
        autoreset, with the new env's reset)."""
        seq = self._awaited
        if not seq or self._closing:
            return
        assert self._loop is not None
        last = self._budget_ended()
        self._fail_controls(
            WorkerError(
                f"{self.name}: its env was dropped, its episode having run past "
                f"episode_timeout={self._supervisor.episode_timeout:g} s",
                worker_id=self.worker_id,
            )
        )
        self._discard_env(True)
        # Carried: the new env's reset answers the step; else its cut-short step did.
        carried = self._carried(last, EPISODE_TIMEOUT)
        self._supervisor.end_episode(seq if carried else 0, self._loop)

    def _time_episode(self, state: Any) -> Any:
        """``state``, the answer to the request in flight, as handed out (the step that
        cuts an episode short, or a reset that starts one after a budget's end), and the
        budget of the episode it leaves open: a new one from an episode's first state,
        none once an episode ended."""
        self._supervisor.disarm()  # the budget's timer of the step answered, if it was one
        if self._resetting:
            # The reset that answers in place of a step, after an episode ran out of its
            # budget: as a restarted env's first state (carried by the step that cuts the
            # episode short, under same-step autoreset).
            self._resetting = False
            state = self._restarted(state, EPISODE_TIMEOUT)
        if type(state) is not Step or type(self._sent) is Rollout:
            self._budget_deadline = None  # segments time their episodes themselves
            return state
        starts = is_reset(self._sent) or (is_restart_reset(state) if state.info else False)
        budget = self._supervisor.episode_timeout
        assert budget is not None  # only then are episodes timed
        self._budget_deadline = budget_end(
            self._budget_deadline,
            starts,
            state.terminated or state.truncated,
            self._episode.autoreset,
            (self._loop or ThreadClock()).time(),  # a sync worker's, before any loop runs
            budget,
        )
        return state

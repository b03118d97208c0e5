"""The interface every worker kind implements, and the bookkeeping they share.

Three faces:

- **Users**: ``send_action``, ``get_state``, ``aclose`` (and ``async with``).
- **Pools** (the pool↔worker seam, :class:`~aioenv.workers._seam.Member`): ``join_pool``,
  ``control``, ``seed_next_reset``, ``forget_request``, ``enter_loop``, ``abandon``, what
  the worker is and whether it failed. A pool uses nothing else of a worker and never
  asks which kind it is.
- **Kinds** implement the hooks of :class:`~aioenv.workers._hooks.KindHooks` (start an
  env, submit a request, drop a failed env, close) and hand replies to ``_on_reply``, which
  drops stale ones and delivers the rest through the worker's
  :class:`~aioenv.workers._in_flight.InFlight`; failures go through its
  :class:`~aioenv.core._supervisor.Supervisor`.

Workers use asyncio's primitives (futures, ``call_later``, ``call_soon_threadsafe``) for
waiting and timers, and anyio only for cancel scopes (the shielded close).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, ClassVar, Generic, TypeVar

import anyio

from ..core._commands import CLOSE, RESET, Reset, is_reset
from ..core._environment import EnvSource, Step, VectorSource, describe_source
from ..core._errors import ClosedError, EnvError, NoActionInFlight, StateNotTaken, WorkerError
from ..core._gymnasium import resolve_source
from ..core._messages import ControlRequest, EpisodeOptions, Failure
from ..core._restarts import (
    EPISODE_TIMEOUT,
    cut_short,
    cut_short_batch,
    episode_open,
    is_restart_reset,
    mark_restarted,
    restart_marker,
)
from ..core._rollouts import Rollout
from ..core._seeds import check_seed, seeded_reset
from ..core._supervisor import (
    SUPERVISION_DEFAULTS,
    Remedies,
    Supervision,
    Supervisor,
    episode_ended,
    request_phase,
    timeout_error,
)
from ..loops._here import check_loop_move, not_on_asyncio, running_loop, thread_id
from ._hooks import KindHooks
from ._in_flight import InFlight
from ._inbox import Inbox, Outcome
from ._seam import FirstReplyCheck

__all__ = ["FirstReplyCheck", "Worker"]

S = TypeVar("S")


class Worker(KindHooks, Generic[S]):
    """One environment behind the worker interface: ``send_action`` then ``get_state``.

    ``send_action`` never blocks the event loop (a sync worker steps inline, which is its
    point). At most one action is in flight per worker, and its state must be taken before
    the next action is sent.

    :param env: a gymnasium id, a zero-argument factory, or an env instance.
    :param seed: the seed of the env's first reset (a non-negative int); later resets
        continue the env's RNG. None (the default): the env seeds itself.
    :param cleanup_time: seconds ``aclose`` waits for the env to close before forcing it
        (default 5).
    :param step_timeout: seconds a step may take before the worker fails with
        :class:`~aioenv.WorkerTimeout`; None (the default): no deadline. A pool's own
        deadlines apply where the worker sets none.
    :param start_timeout: the same for building the env and its first reset; None (the
        default): ``max(step_timeout, reset_timeout, 60)`` when either is in force, else
        none.
    :param reset_timeout: the same for a reset; None (the default): ``step_timeout``. A
        step that may also reset (autoreset) gets ``step_timeout + reset_timeout``.
    :param episode_timeout: seconds an episode may last, from its reset's answer to its
        end, the env's time and the wait for the next action alike; None (the default):
        no budget. Past it the episode ends truncated, ``info["aioenv"]["reason"] ==
        "episode_timeout"``: a step in flight is abandoned and the env restarted, else the
        next step is not sent. No failure: no restart is spent. One env per worker.
    """

    kind: ClassVar[str]
    #: Its states are delivered inside ``send_action``, not by the event loop (see
    #: :attr:`~aioenv.workers._seam.Member.answers_in_line`).
    answers_in_line: ClassVar[bool] = False
    _discard_verb: ClassVar[str] = "dropped"  # what a timeout does to the env, for messages

    def __init__(
        self,
        env: EnvSource,
        *,
        seed: int | None,
        cleanup_time: float,
        step_timeout: float | None = SUPERVISION_DEFAULTS.step_timeout,
        start_timeout: float | None = SUPERVISION_DEFAULTS.start_timeout,
        reset_timeout: float | None = SUPERVISION_DEFAULTS.reset_timeout,
        episode_timeout: float | None = SUPERVISION_DEFAULTS.episode_timeout,
    ) -> None:
        check_seed(seed)
        options = Supervision(
            cleanup_time=cleanup_time,
            step_timeout=step_timeout,
            start_timeout=start_timeout,
            reset_timeout=reset_timeout,
            episode_timeout=episode_timeout,
        )
        self.seed = seed
        self.cleanup_time = float(options.cleanup_time)
        self.env_name = describe_source(env)
        #: What the worker builds its env from (a gymnasium id becomes a factory over its
        #: spec, looked up in this process).
        self.source = resolve_source(env)
        #: Envs this worker steps together: k with ``envs_per_worker=k`` (states are then
        #: :class:`~aioenv.BatchStep`), else 1.
        self.num_envs = len(env.sources) if isinstance(env, VectorSource) else 1
        self.observation_space: Any = None
        self.action_space: Any = None
        #: The worker's id in its pool; None outside one.
        self.worker_id: int | None = None
        self._flight = flight = InFlight()
        remedies = Remedies(
            discard_env=self._discard_env,
            start_env=self._start_env,
            fail=self._fail_request,
            fail_controls=flight.controls.fail_all,
            awaiting=self._awaiting,
            time_out=self._timed_out,
        )
        self._check_budget(options)
        self._supervisor = Supervisor(options, seed, remedies)
        self._episode = EpisodeOptions()
        #: The last state delivered ended an episode (read only under autoreset
        #: "next_step" with deadlines: the next step then resets, see request_phase).
        self._episode_ended = False
        self._next_reset_seed: int | None = None  # from seed_next_reset()
        self._check_first_reply: FirstReplyCheck | None = None
        #: The last request sent and the last outcome handed out: what a failure cuts short.
        self._sent: Any = None
        self._last: Outcome | None = None
        #: The state whose episode the restart in flight cuts short (same-step autoreset:
        #: the new env's reset is carried by the cut-short step); None: nothing to cut.
        self._cut_from: Any = None
        #: When the open episode's budget runs out (the loop's clock); None: no episode
        #: is timed (none is open, or no ``episode_timeout``).
        self._episode_deadline: float | None = None
        #: An episode ran out of its budget while no step was in flight: its env goes on,
        #: and its reset answers the next request (marked, as a restarted env's would be).
        self._reset_next = False
        self._budget_reset = False  # the request in flight is that reset
        #: Same-step autoreset: the state whose episode ran out of its budget while idle;
        #: the reset in flight answers with the step that cuts it short.
        self._budget_cut: Any = None
        self._in_pool = False
        self._failure: WorkerError | None = None  # set once the worker can take no more
        self._closing = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None  # the thread _loop was found running in

    # Users -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        where = "" if self.worker_id is None else f" {self.worker_id}"
        return f"{self.kind} worker{where} ({self.env_name})"

    @property
    def closed(self) -> bool:
        """True once the worker was asked to close (``aclose``, the ``CLOSE`` sentinel, or
        a pool giving it up): it takes no more actions. Its env may still be shutting
        down; ``aclose()`` waits for that."""
        return self._closing

    @property
    def restarts(self) -> int:
        """How many times this worker's env was rebuilt after a failure."""
        return self._supervisor.restarts

    def send_action(self, action: Any) -> None:
        """Send an action, ``RESET``, ``Reset(...)`` or ``CLOSE``. Returns at once.

        :raises StateNotTaken: the previous state has not been taken yet.
        :raises ClosedError: the worker is closed.
        :raises WorkerError: the worker failed for good earlier (that same error).
        """
        if self._closing:
            raise ClosedError(f"{self.name} is closed; it takes no more actions")
        if action is CLOSE:  # identity: never compares an action with ==
            self._close_by_sentinel()
            return
        if self._failure is not None:
            raise self._failure
        flight = self._flight
        if flight.inbox.is_owed(self.worker_id):
            raise StateNotTaken(
                f"{self.name} already has an action in flight or a state not yet taken; "
                "take it with get_state() before sending another action"
            )
        loop = self._loop
        # still_here(loop, self._loop_thread) inlined (a call per action costs more); where
        # it cannot tell, bind to the running loop, unless neither the worker nor this
        # thread has one (a worker needs a loop to wait, not to send)
        if (self._loop_thread != thread_id() or loop is None or not loop.is_running()) and (
            loop is not None or running_loop() is not None
        ):
            self._ensure_loop()
        if self._next_reset_seed is not None and is_reset(action):
            action, self._next_reset_seed = seeded_reset(action, self._next_reset_seed), None
        seq = flight.next_seq
        flight.next_seq = seq + 1
        flight.awaited = seq
        flight.inbox.owe(self.worker_id)
        self._sent = action
        supervisor = self._supervisor
        if supervisor.pending_restart is not None:
            self._restart_for(seq, action, supervisor.pending_restart)
            return
        request = action
        if supervisor.episode_timeout is not None:
            request = self._within_budget(seq, action)
            if request is None:
                return
        if supervisor.has_deadlines:  # a segment plays num_steps in each of its envs
            phase = request_phase(request, self._episode.autoreset, self._episode_ended)
            steps = request.num_steps * self.num_envs if phase == "rollout" else 1
            assert self._loop is not None  # before submitting: a sync worker answers inside
            supervisor.arm(self._loop, seq, phase, steps)
        try:
            self._submit(seq, request)
        except BaseException:
            # Nothing was sent (an action that does not pickle, say): the worker is untouched.
            supervisor.disarm()
            flight.forget(self.worker_id)
            raise

    async def get_state(self) -> S:
        """The state produced by the last action sent.

        :raises EnvError: the env raised (with the worker's traceback).
        :raises WorkerDied: the worker's process died.
        :raises WorkerTimeout: the request ran past its deadline.
        :raises NoActionInFlight: nothing was sent, or the worker belongs to a pool.
        """
        if self._in_pool:
            raise NoActionInFlight(
                f"{self.name} belongs to a pool; take its states with pool.get_state()"
            )
        if self._closing:
            raise ClosedError(f"{self.name} is closed")
        inbox, worker_id = self._flight.inbox, self.worker_id
        while True:
            outcome = inbox.pop(worker_id)
            if outcome is not None:
                if outcome.error is not None:
                    raise outcome.error
                if outcome.borrowed:
                    return outcome.state.owned()  # type: ignore[no-any-return]
                return outcome.state  # type: ignore[no-any-return]
            if not inbox.is_owed(worker_id):
                if self._closing:
                    raise ClosedError(f"{self.name} was closed while waiting for its state")
                raise NoActionInFlight(f"{self.name} has no action in flight; send_action() first")
            await inbox.wait(None)

    async def aclose(self, cleanup_time: float | None = None) -> None:
        """Close the env and stop the worker: ask it to close, wait ``cleanup_time``
        seconds (at most the worker's own), then force it. Idempotent; runs to the end
        even if cancelled."""
        timeout = self.cleanup_time
        if cleanup_time is not None:
            timeout = min(cleanup_time, timeout)
        with anyio.CancelScope(shield=True):
            self._ensure_loop(closing=True)  # a pool may be closed from a later event loop
            self._last = None  # it may view shared memory, which closing unmaps
            if not self._closing:
                self._closing = True
                self._supervisor.disarm()
                self._start_close()
            self._flight.inbox.forgive(self.worker_id)
            self._flight.controls.fail_all(ClosedError(f"{self.name} was closed"))
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

    def _close_by_sentinel(self) -> None:
        if self._flight.inbox.is_owed(self.worker_id):
            raise StateNotTaken(
                f"{self.name} has a state that was not taken; take it with get_state() "
                "before sending CLOSE, or call aclose() to close it discarding that state"
            )
        self._closing = True
        self._last = None
        self._supervisor.disarm()
        self._start_close()

    # Pools (the seam, _seam.Member) --------------------------------------------------
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
        flight = self._flight
        if flight.inbox.num_owed:
            raise StateNotTaken(f"{self.name} has a state not yet taken; take it before pooling it")
        if self._closing:
            raise ClosedError(f"{self.name} is closed and cannot join a pool")
        options = supervision.under(self._supervisor.options)
        self._check_budget(options)
        self._supervisor.configure(options)
        flight.inbox, self.worker_id = inbox, worker_id
        self._in_pool = True
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
        seq, future = self._flight.begin_control(self._ensure_loop())
        try:
            self._submit_control(seq, request)
        except BaseException:
            self._flight.controls.discard(seq)
            raise
        return future

    def forget_request(self) -> None:
        """Stop waiting for the reply to the request in flight (a cancelled rollout): it
        is dropped as stale when it comes, and the worker takes a new request at once (its
        env answers it after the forgotten one)."""
        if self._flight.awaited:
            self._supervisor.forget_in_flight()
        self._flight.forget(self.worker_id)

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
        old, flight = self._loop, self._flight
        if old is loop:
            self._loop_thread = thread_id()
            return loop
        if old is not None:
            if not closing:
                check_loop_move(self.name, old, bool(flight.awaited or flight.controls))
            self._supervisor.disarm()
            if flight.awaited:
                flight.forget(self.worker_id)
            flight.controls.fail_all(ClosedError(f"{self.name} was closed"))
        self._loop, self._loop_thread = loop, thread_id()
        self._bind_loop(loop)
        return loop

    # Kinds: replies and failures -------------------------------------------------------
    def _on_reply(self, seq: int, result: Any, borrowed: bool = False) -> None:
        """Deliver the reply to request ``seq``: a state, or a :class:`Failure`.
        ``borrowed``: the state's observation is a view of shared memory."""
        flight = self._flight
        if not seq or seq != flight.awaited:
            if seq in flight.controls:
                flight.controls.answer(seq, result, self._env_error)
            return  # a late reply to a request nobody waits for any more
        supervisor = self._supervisor
        if supervisor.answered() and self._check_first_reply is not None:
            mismatch = self._check_first_reply(self)
            if mismatch is not None:  # a configuration error: no restart would fix it
                self._fail_request(mismatch, True)
                return
        if isinstance(result, Failure):
            self._on_failure(self._env_error(result), env_gone=False)
            return
        reason = supervisor.succeeded()
        if supervisor.has_deadlines and self._episode.autoreset == "next_step":
            self._episode_ended = episode_ended(result)
        if reason is not None:
            result = self._restarted(result, reason)
        if supervisor.episode_timeout is not None:
            result = self._time_episode(result)
        flight.awaited = 0
        self._last = outcome = Outcome(self.worker_id, result, None, borrowed)
        flight.inbox.deliver(outcome)

    def _on_death(self, error: WorkerError) -> None:
        """The current env is gone (its process died)."""
        if not self._closing:
            self._on_failure(error, env_gone=True)

    def _on_failure(self, error: WorkerError, *, env_gone: bool) -> None:
        if self._closing:
            self._supervisor.disarm()
            self._flight.awaited = 0
            return
        assert self._loop is not None
        supervisor, in_flight = self._supervisor, self._flight.awaited
        self._episode_deadline, self._budget_cut, self._budget_reset = None, None, False
        last = self._last
        if last is not None and last.borrowed:
            # Kept, not viewed: the new env may write its observations where it viewed.
            self._last = Outcome(last.worker_id, last.state.owned())
        last = self._open_episode(self._sent) if in_flight else None
        self._cut_from = None
        if last is None or self._episode.autoreset == "same_step":
            # Restarted now: the new env's reset answers the request in flight (the
            # cut-short step carries it, under same-step autoreset).
            self._cut_from = last
            supervisor.failed(error, env_gone=env_gone, in_flight=in_flight, clock=self._loop)
            return
        # The episode ends here, as a truncated one: the new env is started by the next
        # request, whose state its reset is (as an autoreset's, next-step or by hand).
        supervisor.failed(error, env_gone=env_gone, in_flight=0, clock=self._loop)
        reason = supervisor.pending_restart
        if reason is not None:
            self._deliver_cut_short(last, reason)

    # Episodes cut short ----------------------------------------------------------------
    def _open_episode(self, action: Any) -> Any:
        """The state last handed out if ``action`` steps an episode it left open (which a
        failure now cuts short), else None."""
        last = self._last
        if last is None or is_reset(action) or type(action) is Rollout:
            return None
        return last.state if episode_open(last.state, self._episode.autoreset) else None

    def _restart_for(self, seq: int, action: Any, reason: str) -> None:
        """Request ``seq`` (``action``) comes to a worker whose env failed and was
        dropped: an episode that failure left open ends now (under same-step autoreset
        with the new env's reset), else the new env's reset answers the request."""
        self._reset_next = False  # the new env's reset answers this request anyway
        last = self._open_episode(action)
        if last is not None and self._episode.autoreset != "same_step":
            self._deliver_cut_short(last, reason)
            return
        self._cut_from = last
        assert self._loop is not None
        # A reset the user seeded seeds the new env: their episode starts where they said.
        seed = action.seed if isinstance(action, Reset) else None
        self._supervisor.restart_later(seq, reason, self._loop, seed)

    def _deliver_cut_short(self, last: Any, reason: str) -> None:
        """Answer the request in flight with the step that cuts ``last``'s episode short;
        the new env starts with the next request."""
        marker = restart_marker(reason)
        if type(last) is Step:
            state: Any = cut_short(last.observation, marker)
        else:
            state = cut_short_batch(last, marker)
        self._episode_deadline = None
        self._flight.awaited = 0
        self._last = outcome = Outcome(self.worker_id, state)
        self._flight.inbox.deliver(outcome)

    def _restarted(self, first: Any, reason: str) -> Any:
        """The restarted env's first state ``first`` as handed out: the step that cuts
        the failed env's episode short and carries it (same-step autoreset), else ``first``
        marked as a restart's."""
        last, self._cut_from = self._cut_from, None
        if last is None or type(first) is not type(last):
            return mark_restarted(first, reason)
        if type(last) is Step:
            return cut_short(last.observation, restart_marker(reason), first)
        return cut_short_batch(last, restart_marker(reason), first)

    # Episode budgets -------------------------------------------------------------------
    def _check_budget(self, options: Supervision) -> None:
        if options.episode_timeout is not None and self.num_envs > 1:
            raise ValueError(
                f"{self.name}: episode_timeout times one episode per worker; this worker "
                f"steps {self.num_envs} envs together (envs_per_worker): use one env per worker"
            )

    def _within_budget(self, seq: int, action: Any) -> Any:
        """What request ``seq`` sends for ``action`` under the open episode's budget: the
        action (the budget's end, if it comes while the step runs, abandons it), a reset
        (the episode ran out of its budget: same-step autoreset carries the cut-short step
        with its answer; else the budget's end was handed out already and this request
        starts the next episode), or None: the episode ran out of its budget now, and its
        cut-short step answers the request in place of sending the action."""
        self._budget_reset = False
        if type(action) is Rollout:  # the segment times its episodes between its steps
            fresh, self._reset_next = self._reset_next, False
            budget = self._supervisor.episode_timeout
            return dataclasses.replace(action, episode_timeout=budget, fresh=fresh)
        if is_reset(action):
            self._reset_next = False
            return action
        if self._reset_next:
            self._reset_next, self._budget_reset = False, True
            self._sent = RESET
            return RESET
        deadline, loop = self._episode_deadline, self._loop
        if deadline is None:
            return action
        assert loop is not None
        remaining = deadline - loop.time()
        if remaining > 0:
            self._supervisor.arm_budget(loop, remaining, self._budget_ran_out)
            return action
        last = self._kept_last()
        self._episode_deadline = None
        if self._episode.autoreset == "same_step":
            self._budget_cut = last
            return RESET
        self._reset_next = True
        self._deliver_cut_short(last, EPISODE_TIMEOUT)
        return None

    def _kept_last(self) -> Any:
        """The state last handed out, owned (not a view of memory its env writes)."""
        last = self._last
        assert last is not None  # an episode is timed only once a state was handed out
        return last.state.owned() if last.borrowed else last.state

    def _budget_ran_out(self) -> None:
        """The open episode ran past its budget while its step was in flight: the step is
        abandoned and its env dropped; the episode ends cut short (under same-step
        autoreset, with the new env's reset)."""
        seq = self._flight.awaited
        if not seq or self._closing:
            return
        assert self._loop is not None
        last = self._kept_last()
        self._episode_deadline = None
        self._flight.controls.fail_all(
            WorkerError(
                f"{self.name}: its env was dropped, its episode having run past "
                f"episode_timeout={self._supervisor.episode_timeout:g} s",
                worker_id=self.worker_id,
            )
        )
        self._discard_env(True)
        if self._episode.autoreset == "same_step":
            self._cut_from = last
            self._supervisor.end_episode(seq, self._loop)
        else:
            self._supervisor.end_episode(0, self._loop)
            self._deliver_cut_short(last, EPISODE_TIMEOUT)

    def _time_episode(self, state: Any) -> Any:
        """``state``, the answer to the request in flight, as handed out (the step that
        cuts an episode short, or a reset that starts one after a budget's end), and the
        budget of the episode it leaves open: a new one from an episode's first state,
        none once an episode ended."""
        cut, self._budget_cut = self._budget_cut, None
        if cut is not None and type(state) is Step:
            state = cut_short(cut.observation, restart_marker(EPISODE_TIMEOUT), state)
        elif self._budget_reset:
            self._budget_reset = False
            state = mark_restarted(state, EPISODE_TIMEOUT)
        if type(state) is not Step or type(self._sent) is Rollout:
            self._episode_deadline = None  # segments time their episodes themselves
            return state
        ended = state.terminated or state.truncated
        starts = is_reset(self._sent) or (is_restart_reset(state) if state.info else False)
        if ended and self._episode.autoreset == "same_step":
            starts = True  # the step carries the next episode's reset
        elif ended:
            self._episode_deadline = None
            return state
        if starts or self._episode_deadline is None:
            assert self._loop is not None
            self._episode_deadline = self._loop.time() + self._supervisor.episode_timeout  # type: ignore[operator]
        return state

    def _timed_out(self, seq: int, timeout: float, elapsed: float) -> None:
        phase = self._supervisor.phase
        cause = self._start_delay_cause() if phase == "start-up" else None
        reason = f"the env was {self._discard_verb}{'' if cause is None else f'; {cause}'}"
        error = timeout_error(self.name, self.worker_id, seq, phase, elapsed, timeout, reason)
        self._on_failure(error, env_gone=True)

    # Remedies: what the supervisor does through the worker ----------------------------
    def _awaiting(self, seq: int) -> bool:
        return not self._closing and seq == self._flight.awaited

    def _fail_request(self, error: WorkerError, for_good: bool) -> None:
        if for_good and self._failure is None:
            # The first error for good stays the worker's: a later one (the death of a
            # process it shared with a worker that timed out) is its consequence.
            self._failure = error
        self._flight.fail(self.worker_id, error)

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
            error = WorkerError(
                f"{self.name}: could not restart after {reason} ({type(exc).__name__}: {exc})",
                worker_id=self.worker_id,
            )
            error.__cause__ = exc
            self._fail_request(error, True)

    def _restart_reset(self) -> Any:
        """The reset a new env starts with: where it answers a reset the user gave
        options to (a task, say), with those options, so the episode starts as asked (the
        seed went to the new env already)."""
        sent = self._sent
        if isinstance(sent, Reset) and sent.options is not None:
            return Reset(options=sent.options)
        return RESET

    def _env_error(self, failure: Failure) -> EnvError:
        return EnvError.from_failure(failure, self.name, self.worker_id)

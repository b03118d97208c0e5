"""The interface every worker kind implements, and the bookkeeping they share.

Three faces:

- **Users**: ``send_action``, ``get_state``, ``aclose`` (and ``async with``).
- **Pools** (the pool↔worker seam, :class:`~aioenv.workers._seam.Member`): ``join_pool``,
  ``control``, ``seed_next_reset``, ``forget_request``, ``enter_loop``, what the worker
  is and whether it failed (:class:`~aioenv.workers._seam.Membership`, with the
  event loop the worker is bound to, and ``abandon`` for ``make_pool``, which drops the
  workers it built when a later one fails). A pool uses nothing else of a worker and
  never asks which kind it is.
- **Kinds** implement the hooks of :class:`~aioenv.workers._supervised.SupervisedEnv`
  (start an env, submit a request, drop a failed env, close) and hand replies to
  ``_on_reply``, which drops stale ones and delivers the rest to the worker's
  :class:`~aioenv.workers._inbox.Inbox`, or to the futures of its control requests (the
  requests it keeps in fields of :class:`~aioenv.workers._supervised.SupervisedEnv`);
  failures go through its :class:`~aioenv.core._supervisor.Supervisor`, whose remedies,
  the cut-short episodes and the episode budget are
  :class:`~aioenv.workers._supervised.SupervisedEnv`'s too.

Workers use asyncio's primitives (futures, ``call_later``, ``call_soon_threadsafe``) for
waiting and timers, and anyio only for cancel scopes (the shielded close).
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

import anyio

from ..core._commands import CLOSE, is_reset
from ..core._docs import documented_with
from ..core._environment import EnvSource, VectorSource, describe_source
from ..core._errors import ClosedError, EnvError, NoActionInFlight, StateNotTaken
from ..core._gymnasium import resolve_source
from ..core._messages import Failure
from ..core._seeds import checked_seed, seeded_reset
from ..core._supervision import SUPERVISION_DEFAULTS, Supervision, episode_ended
from ..core._supervisor import Supervisor
from ..loops._here import running_loop, thread_id, to_the_end
from ._inbox import Inbox, Outcome
from ._seam import FirstReplyCheck, Membership

__all__ = ["FirstReplyCheck", "Worker"]

S = TypeVar("S")


#: The supervision options a worker takes of its own, under their names in Supervision:
#: its constructor's keywords (beside the seed), and its docs' entries.
_OWN_OPTIONS = ("cleanup_time", "step_timeout", "start_timeout", "reset_timeout", "episode_timeout")


@documented_with(Supervision, _OWN_OPTIONS)
class Worker(Membership, Generic[S]):
    """One environment behind the worker interface: ``send_action`` then ``get_state``.

    ``send_action`` never blocks the event loop (a sync worker steps inline, which is its
    point). At most one action is in flight per worker, and its state must be taken before
    the next action is sent.

    Its deadlines and its episode budget are the worker's own: in a pool, the pool's
    apply where the worker sets none.

    :param env: a gymnasium id, a zero-argument factory, or an env instance.
    :param seed: the seed of the env's first reset (a non-negative int); later resets
        continue the env's RNG. None (the default): the env seeds itself.
    """

    kind: ClassVar[str]
    #: Its states are delivered inside ``send_action``, not by the event loop (see
    #: :attr:`~aioenv.workers._seam.Member.answers_in_line`).
    answers_in_line: ClassVar[bool] = False
    #: It can step several envs together (``make_pool``'s ``envs_per_worker``).
    steps_batches: ClassVar[bool] = True

    def __init__(
        self,
        env: EnvSource,
        *,
        seed: int | None = None,
        cleanup_time: float = SUPERVISION_DEFAULTS.cleanup_time,
        step_timeout: float | None = SUPERVISION_DEFAULTS.step_timeout,
        start_timeout: float | None = SUPERVISION_DEFAULTS.start_timeout,
        reset_timeout: float | None = SUPERVISION_DEFAULTS.reset_timeout,
        episode_timeout: float | None = SUPERVISION_DEFAULTS.episode_timeout,
    ) -> None:
        given = locals()  # its own supervision options, taken above under their own names
        seed = checked_seed(seed)
        if isinstance(env, VectorSource) and not self.steps_batches:
            raise TypeError(
                f"{self.kind} workers step one env each, and envs_per_worker gave this one "
                f"{len(env.sources)}: group envs in sync, thread, process or ray workers"
            )
        options = Supervision(**{name: given[name] for name in _OWN_OPTIONS})
        self.seed = seed
        self.cleanup_time = float(options.cleanup_time)
        self.env_name = describe_source(env)
        #: What the worker builds its env from (a gymnasium id becomes a factory over its
        #: spec, looked up in this process).
        self.source = resolve_source(env)
        #: Envs this worker steps together: k with ``envs_per_worker=k`` (states are then
        #: :class:`~aioenv.BatchStep`), else 1.
        self.num_envs = len(env.sources) if isinstance(env, VectorSource) else 1
        # (Its other fields start at their classes' defaults: SupervisedEnv's, Membership's.)
        self._inbox = Inbox(ordered=True)
        self._controls = {}
        self._check_budget(options)
        self._supervisor = Supervisor(options, seed, self)
        self._closed = False
        self._setup(seed)

    def _setup(self, seed: int | None) -> None:
        """Hook: set up what the kind keeps of its own and start its first env, seeded
        with ``seed``, once every option is set. (A kind with options of its own takes
        them in a constructor of its own, and starts its env there.)"""

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
        if self.worker_id in self._inbox.owed:
            raise StateNotTaken(
                f"{self.name} already has an action in flight or a state not yet taken; "
                "take it with get_state() before sending another action"
            )
        loop = self._loop
        # still_here(loop, self._loop_thread) inlined (a call per action costs more); where
        # it cannot tell, bind to the running loop, unless neither the worker nor this
        # thread has one (a worker needs a loop to wait, not to send, unless its deadlines
        # time what it sends: then binding refuses the action, untouched)
        if (self._loop_thread != thread_id() or loop is None or not loop.is_running()) and (
            loop is not None or running_loop() is not None or self._supervisor.has_deadlines
        ):
            self._ensure_loop()
        if self._next_reset_seed is not None and is_reset(action):
            action, self._next_reset_seed = seeded_reset(action, self._next_reset_seed), None
        seq = self._next_seq
        self._next_seq = seq + 1
        self._awaited = seq
        self._inbox.owed[self.worker_id] = None  # owe(), inlined
        self._sent = action
        supervisor = self._supervisor
        request = action
        if supervisor.has_deadlines or not (
            supervisor.pending_restart is None and supervisor.episode_timeout is None
        ):
            request = self._supervised_request(seq, action)
            if request is None:
                return
        try:
            self._submit(seq, request)
        except BaseException:
            # Nothing was sent (an action that does not pickle, say): the worker is untouched.
            supervisor.disarm()
            self._forget()
            raise

    async def get_state(self) -> S:
        """The state produced by the last action sent.

        :raises EnvError: the env raised (with the worker's traceback).
        :raises WorkerDied: the worker's process died.
        :raises WorkerTimeout: the request ran past its deadline.
        :raises NoActionInFlight: nothing was sent, or the worker belongs to a pool.
        """
        if self.worker_id is not None:  # in a pool
            raise NoActionInFlight(
                f"{self.name} belongs to a pool; take its states with pool.get_state()"
            )
        if self._closing:
            raise ClosedError(f"{self.name} is closed")
        inbox, worker_id = self._inbox, self.worker_id
        while (outcome := inbox.pop(worker_id)) is None:
            if worker_id not in inbox.owed:
                if self._closing:
                    raise ClosedError(f"{self.name} was closed while waiting for its state")
                raise NoActionInFlight(f"{self.name} has no action in flight; send_action() first")
            self._ensure_loop()  # sent before any loop ran (or on one now closed): bind here
            await inbox.wait(None)
        if outcome.error is not None:
            raise outcome.error
        if outcome.borrowed:
            return outcome.state.owned()  # type: ignore[no-any-return]
        return outcome.state  # type: ignore[no-any-return]

    async def aclose(self, cleanup_time: float | None = None) -> None:
        """Close the env and stop the worker: ask it to close, wait ``cleanup_time``
        seconds (at most the worker's own), then force it. Idempotent; runs to the end
        even if cancelled."""
        own = self.cleanup_time
        timeout = own if cleanup_time is None else min(cleanup_time, own)
        with anyio.CancelScope(shield=True):
            self._ensure_loop(closing=True)  # a pool may be closed from a later event loop
            self._last = None  # it may view shared memory, which closing unmaps
            if not self._closing:
                self._closing = True
                self._supervisor.disarm()
                self._start_close()
            self._inbox.forgive(self.worker_id)
            self._fail_controls(ClosedError(f"{self.name} was closed"))
            if not self._closed:  # (asyncio's own cancellation stops at the shield too)
                await to_the_end(self._closed_within(timeout))

    async def _closed_within(self, timeout: float) -> None:
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
        if self.worker_id in self._inbox.owed:
            raise StateNotTaken(
                f"{self.name} has a state that was not taken; take it with get_state() "
                "before sending CLOSE, or call aclose() to close it discarding that state"
            )
        self._last = None
        self._supervisor.disarm()
        self._start_close()  # first: one refused (no event loop to close on) leaves it open
        self._closing = True

    # Kinds: replies and failures -------------------------------------------------------
    def _on_reply(self, seq: int, result: Any, borrowed: bool = False) -> None:
        """Deliver the reply to request ``seq``: a state, or a :class:`Failure`.
        ``borrowed``: the state's observation is a view of shared memory."""
        if not seq or seq != self._awaited:
            # A control request's answer (its future gets it, or the error a Failure maps
            # to), else a late reply to a request nobody waits for any more (dropped).
            future = self._controls.pop(seq, None)
            if future is not None and not future.done():
                if isinstance(result, Failure):
                    future.set_exception(self._env_error(result))
                else:
                    future.set_result(result)
            return
        supervisor = self._supervisor
        failed = isinstance(result, Failure)
        reason = None
        if failed or not supervisor.settled:  # else the answer changes nothing there
            if supervisor.answered(state=not failed) and self._check_first_reply is not None:
                mismatch = self._check_first_reply(self)
                if mismatch is not None:  # a configuration error: no restart would fix it
                    self._fail_request(mismatch, True)
                    return
            if failed and result.blame != "the env":  # the caller's: no restart would fix it
                self._fail_request(self._env_error(result), False)
            elif failed:
                if result.ended is not None:  # the episode ended: its restart carries it
                    self._last = Outcome(self.worker_id, result.ended)
                self._on_failure(self._env_error(result), env_gone=False)
            if failed:
                return
            reason = supervisor.restart_completed
        if supervisor.has_deadlines:  # the next request's deadline (see request_phase)
            self._episode_ended = episode_ended(result)
        if reason is not None:
            result = self._restarted(result, reason)
        if supervisor.episode_timeout is not None:
            result = self._time_episode(result)
        self._awaited = 0
        self._last = outcome = Outcome(self.worker_id, result, None, borrowed)
        self._inbox.deliver(outcome)

    def _env_error(self, failure: Failure) -> EnvError:
        """``failure`` (an env's exception, as its runner reported it) as this worker's
        error."""
        return EnvError.from_failure(failure, self.name, self.worker_id)

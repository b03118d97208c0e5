"""Restarts of the envs a :class:`~aioenv.env_side._vector_runner.VectorRunner` steps in
the calling thread: envs in line (``mode="inline"``) and an engine child's envs
(:mod:`aioenv.engine._child`), with ``restart="on_failure"`` or an ``on_failure``.

Each env is supervised as a process worker of one env (``envs_per_worker=1``) is: by a
:class:`~aioenv.core._supervisor.Supervisor` of its own, the one implementation of
the restart budget (the crash-loop rule, or the rate rule with a ``restart_window``),
the backoff, the deterministic restart seeds and ``on_failure``; here it runs on
:class:`ThreadClock`, which calls what the supervisor schedules in the calling thread.
An env that raises is rebuilt and its episode ends by the cut-short rule of
:mod:`aioenv.core._restarts`, as :class:`~aioenv.workers._base.Worker` ends it (both
follow it through :class:`~aioenv.core._supervisor.RestartRule`): the
same transitions and infos as the process path, env by env; the other envs are
untouched. An env whose budget is spent is given up, as a pool gives up its worker: the
request raises its error, and the vector env cannot go on
(:func:`~aioenv.core._errors.env_given_up`).

Nothing of this runs while no env fails: the runner calls :meth:`EnvRestarts.recover`
in place of reporting a failure, an env waiting for its restart answers through a
stand-in runner (:class:`_Pending`), and answers are reported to the supervisors only of
the envs with a failure counted against them (:meth:`Supervisors.progress`). The module
imports nothing from the parent's side.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from ..core._commands import Reset
from ..core._environment import EnvSource, Step, describe_source
from ..core._errors import EnvError, WorkerError
from ..core._messages import Failure
from ..core._restarts import cut_short_state
from ..core._seeds import reset_mask
from ..core._supervision import Supervision
from ..core._supervisor import RestartRule, Supervisor
from ._runner import EnvRunner
from ._vector_runner import VectorRunner

__all__ = ["IN_FLIGHT", "RESTART_OPTIONS", "EnvRestarts", "Supervisors", "ThreadClock"]

#: The supervision options envs stepped in line take (deadlines need a worker to abandon).
RESTART_OPTIONS = frozenset(
    {"restart", "max_restarts", "restart_window", "restart_backoff", "on_failure"}
)


class _Supervised(Protocol):
    """What a :class:`Supervisors` supervises, one each: an env, or an engine child."""

    supervisor: Supervisor


_One = TypeVar("_One", bound=_Supervised)

#: The request in flight, as a supervisor in the calling thread numbers it: an env in
#: line, or an engine's child, has one at a time.
IN_FLIGHT = 1


class _Call:
    """A call :class:`ThreadClock` was asked to make later (cancellable)."""

    __slots__ = ("args", "callback", "cancelled", "delay")

    def __init__(self, delay: float, callback: Callable[..., object], args: tuple[Any, ...]):
        self.delay, self.callback, self.args = delay, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ThreadClock:
    """A :class:`~aioenv.core._supervisor.Clock` for supervisors in the calling thread:
    its time is the monotonic clock; a call asked for later is queued, and :meth:`run`
    makes the queued calls in order, each after sleeping its delay (a restart's backoff
    holds the caller up, as everything in line does). A call may queue more (a restart
    whose new env fails again): they run in the same loop, not nested."""

    def __init__(self) -> None:
        self._queue: collections.deque[_Call] = collections.deque()

    def time(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> _Call:
        call = _Call(delay, callback, args)
        self._queue.append(call)
        return call

    def run(self) -> None:
        queue = self._queue
        while queue:
            call = queue.popleft()
            if call.cancelled:
                continue
            if call.delay > 0:
                time.sleep(call.delay)
            call.callback(*call.args)


class Supervisors(Generic[_One]):
    """Supervisors in the calling thread, one for each of ``each`` (an env, or an engine
    child: :class:`~aioenv.engine._revivals.Revivals`; each with its ``supervisor``), on
    one :class:`ThreadClock`, told of progress only while a failure is counted against
    one of them."""

    def __init__(self, each: list[_One]) -> None:
        self.each = each
        self.clock = ThreadClock()
        #: Those whose supervisor an answer would change (every one, until it answered).
        self.unsettled: set[int] = set(range(len(each)))
        #: Those answered by a restart in the request being answered (no progress of theirs).
        self._restarted: set[int] = set()

    def progress(self, answered: Iterable[int]) -> None:
        """These answered the request (a state each): where a failure is counted against
        one (or it had not answered yet), its supervisor hears of it, unless a restart
        answered for it."""
        restarted, unsettled = self._restarted, self.unsettled
        for i in answered:
            if i in unsettled and i not in restarted:
                supervisor = self.each[i].supervisor
                supervisor.answered(state=True)
                if supervisor.settled:
                    unsettled.discard(i)
        restarted.clear()


class EnvRestarts(Supervisors["_OneEnv"]):
    """The supervision of every env of an :class:`~aioenv.env_side._vector_runner.VectorRunner`
    stepped in the calling thread: installed as its ``recover``, it answers an env's
    failure with what a process worker of that env would have answered. Its errors name
    env ``first + i`` of the vector env ``where`` it steps (``"inline env 3 (...)"``),
    as worker ``worker_id``'s."""

    def __init__(
        self,
        runner: VectorRunner,
        options: Supervision,
        *,
        where: str = "inline env",
        first: int = 0,
        worker_id: int = 0,
    ) -> None:
        self.runner = runner
        self.where, self.first, self.worker_id = where, first, worker_id
        # The restart options alone; each env's supervisor reports its failures to
        # on_failure, as a pool's worker's does.
        options = Supervision(**{name: getattr(options, name) for name in RESTART_OPTIONS})
        super().__init__([_OneEnv(self, i, options) for i in range(len(runner.runners))])
        #: The envs given up on, with the error that did it.
        self.removed: dict[int, WorkerError] = {}
        #: The error of the env given up on in the request being answered.
        self._given_up: WorkerError | None = None
        runner.recover = self.recover

    def recover(self, index: int, request: Any, failure: Failure) -> Any:
        """What env ``index`` answers to ``request`` in place of ``failure``: the step
        that cuts its episode short, or its new env's first state; ``failure`` (or the
        last of the new envs') where none answers (restarts off, or the budget spent)."""
        if index in self.removed:
            return failure
        return self.each[index].answer(request, failure)

    def progress_of(self, request: Any) -> None:
        """:meth:`progress` of the envs that answered ``request``, a batch of actions or a
        reset (whose mask leaves some out)."""
        options = request.options if isinstance(request, Reset) else None
        mask, _ = reset_mask(options, len(self.each))
        self.progress(range(len(self.each)) if mask is None else np.flatnonzero(mask).tolist())

    def take_given_up(self) -> WorkerError | None:
        """The error of the env the request just answered gave up on (then None)."""
        error, self._given_up = self._given_up, None
        self._restarted.clear()
        return error


class _OneEnv(RestartRule):
    """One env's supervision: what :class:`~aioenv.workers._base.Worker` does about a
    failure, for a worker of that one env, answered in the calling thread (the cut-short
    rule is :class:`~aioenv.core._supervisor.RestartRule`'s, a worker's too)."""

    def __init__(self, owner: EnvRestarts, index: int, options: Supervision) -> None:
        self.owner, self.index = owner, index
        self._runners: list[Any] = owner.runner.runners  # the vector runner's, by env
        # The env is rebuilt from the source its runner has, with the episode options the
        # runner gave it, and a restart's seed is drawn from the seed the runner gave it,
        # as a worker's is from the worker's (a process worker of one env has that seed).
        first: EnvRunner = self._runners[index]
        self.source: EnvSource = first.source
        self.name = f"{owner.where} {owner.first + index} ({describe_source(self.source)})"
        # One supervisor: ``supervisor`` to its Supervisors, ``_supervisor`` to RestartRule.
        self.supervisor = self._supervisor = Supervisor(options, first.seed, self)
        self._episode = first.episode
        # RestartRule's _sent is the request being answered.
        self._last: Any = None  # the state last handed out before it (a Step or a row)
        self._failure: Failure | None = None  # the failure being handled
        self._answer: Any = None  # what answers the request, once known

    # What the vector runner asks -------------------------------------------------------
    def answer(self, request: Any, failure: Failure | None = None) -> Any:
        """What answers ``request``: where the env's answer to it was ``failure``, what
        answers in its place; without (the env waits for its restart, its failure ended
        its episode cut short), the new env's reset (a reset the user seeded seeds the
        new env). Where none answers, the env's failure (or the last of the new envs')."""
        self._sent, self._answer = request, None
        if failure is not None:
            runner = self._runners[self.index]
            self._last = runner.previous if isinstance(runner, EnvRunner) else self._last
            self._on_reply(failure)
        else:
            reason = self.supervisor.pending_restart
            assert reason is not None
            # Its failure's cut-short step answered the request then, so no episode is
            # open: the new env's reset answers this one.
            self._restart_for(IN_FLIGHT, request, reason, self.owner.clock)
        self.owner.clock.run()
        # Its supervisor hears of the next answers, not of this one (see progress).
        self.owner.unsettled.add(self.index)
        self.owner._restarted.add(self.index)
        return self._failure if self._answer is None else self._answer

    # As Worker._on_reply and Worker._on_failure (the rule: RestartRule's) ------------
    def _on_reply(self, result: Any) -> None:
        supervisor = self.supervisor
        failed = isinstance(result, Failure)
        supervisor.answered(state=not failed)
        if failed:
            self._failure = result
            error = EnvError.from_failure(result, self.name, self.owner.worker_id)
            error.env = self.index  # which env of the batch, as a worker's EnvError says
            self._fail_over(error, env_gone=False, in_flight=IN_FLIGHT, clock=self.owner.clock)
            return
        reason = supervisor.restart_completed
        if reason is not None:
            result = self._restarted(result, reason)
        self._answer = self._last = result  # it answers, and is the state last handed out

    def _last_state(self) -> Any:
        """The state last handed out, as a Step."""
        last = self._last
        if type(last) is tuple:  # a runner's row: (observation, reward, flags, info)
            return Step(*last)
        return last

    def _deliver_cut_short(self, last: Any, reason: str) -> None:
        """The cut-short step answers; the env waits for its restart (:class:`_Pending`)."""
        self._answer = self._last = cut_short_state(last, reason)
        self._runners[self.index] = _Pending(self, self._runners[self.index])

    # Remedies --------------------------------------------------------------------------
    def _discard_env(self, env_gone: bool) -> None:
        self._runners[self.index].close()

    def _start_env(self, seq: int, seed: int | None, reason: str) -> None:
        """A new env, seeded ``seed``, whose reset answers the request (with the options
        of a reset it answers, a task say, as a worker's restart reset does)."""
        owner = self.owner
        runner = EnvRunner(self.source, seed, self._episode, owner.runner.policies)
        self._runners[self.index] = runner
        self._on_reply(runner.handle(self._restart_reset()))

    def _fail_request(self, error: WorkerError, for_good: bool) -> None:
        self._answer = None
        if for_good:  # given up: the request raises its error, as later ones do
            self.owner.removed.setdefault(self.index, error)
            if self.owner._given_up is None:
                self.owner._given_up = error


class _Pending:
    """The runner of an env waiting for its restart: a request it is asked starts the
    new env, whose reset answers it; whatever else goes to the old one (closed)."""

    def __init__(self, env: _OneEnv, old: Any) -> None:
        self._env, self._old = env, old

    def handle(self, request: Any) -> Any:
        return self._env.answer(request)

    step_row = handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self._old, name)

"""Restarts of the engine's children that die or hang (``restart="on_failure"``): the
parent's side of the engine's restarts. An env that merely raises is restarted in its
child, env by env (:mod:`aioenv.env_side._env_restarts`); a child that dies or runs past
its deadline takes all its envs with it, so the parent replaces the child.

Each child is supervised as a pool's process worker of its envs is: by a
:class:`~aioenv.core._supervisor.Supervisor` of its own (the restart budget, the backoff,
the deterministic restart seeds, ``on_failure``), on the calling thread's clock. The new
child is handed what answers the request the old one left: the request itself, where a
new episode may answer it (a reset; a step that left no episode open, or under
``autoreset="same_step"``, which the new child answers with its envs' resets, cutting
short the episodes left open, :class:`~aioenv.engine._child.Revived`); else the step that
cuts the open episodes short (truncated, by :func:`~aioenv.core._restarts.cut_short_batch`),
whose next step the new child answers with its resets. A control (a call, an attribute)
fails with the error, and the new child's first step cuts the episodes short. A child
whose budget is spent is given up: the request raises its error, and every later call
:class:`~aioenv.WorkerRemoved`.

**Episode budgets** through the engine (``episode_timeout``, :class:`EpisodeBudgets`): each
child steps one env, and the parent times that env's episode from the answer that opened
it to its end, the env's time and the wait for the next action alike, by the rule a pool's
worker follows (:class:`~aioenv.workers._supervised.SupervisedEnv`).

Past its budget the episode ends as an episode cut short ends (truncated, reward 0, the
last observation as final, ``info["aioenv"]["reason"] == "episode_timeout"``), and no
failure is counted:

- a step handed once the budget has run out is not stepped. Under same-step autoreset the
  child resets its env and answers with the step that cuts the episode short and carries
  that reset; else the parent answers through the child with the cut-short step, and the
  child answers its next step (or reset) with its env's reset. The env goes on.
- a step still in flight when the budget runs out is abandoned: the child is killed, as a
  hung one is, and a new child answers in its place
  (:meth:`Revivals.revive`).

A budget's end while a step is in flight is one of the child's deadlines, the earlier of
it and the step's own (:attr:`~aioenv.engine._family.Child.due`); the parent's one timed
sleep ends there, as for any deadline.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..core._commands import is_reset
from ..core._environment import BatchStep
from ..core._errors import WorkerError, restart_failed
from ..core._restarts import EPISODE_TIMEOUT, cut_short_state, open_episode, restart_answers
from ..core._supervision import Supervision, budget_end, report_failure
from ..core._supervisor import Remedies, Supervisor
from ..env_side._env_restarts import IN_FLIGHT, Supervisors
from ._child import ChildPlan, Revived
from ._family import Child

__all__ = ["EpisodeBudgets", "Revivals"]


class Children(Protocol):
    """What a revival asks of the children (:class:`~aioenv.engine._children.EngineChildren`)."""

    children: list[Any]  # each child (:class:`~aioenv.engine._family.Child`)

    def respawn(self, w: int, plan: ChildPlan) -> WorkerError | None: ...
    def hand(self, w: int, request: Any, op: str = "step") -> None: ...
    def last_state(self, w: int) -> BatchStep[Any]: ...


class Revivals(Supervisors["_OneChild"]):
    """The supervision of every child of ``plans`` (one each), under ``options`` (its
    ``on_failure`` is called with each failure), for envs of ``autoreset``."""

    def __init__(
        self, children: Children, plans: list[ChildPlan], options: Supervision, autoreset: str
    ) -> None:
        self.children = children
        self.autoreset = autoreset
        self.on_failure = options.on_failure
        super().__init__([_OneChild(self, w, plan, options) for w, plan in enumerate(plans)])

    def revive(
        self, w: int, error: WorkerError | None, sent: tuple[str, Any]
    ) -> WorkerError | None:
        """Child ``w`` died or hung (``error``) with ``sent`` (its op and request) in
        flight: None where a new child was handed what answers it, else the error that
        gave the child up (the request's). ``error`` None: child ``w``'s env ran past its
        episode budget with ``sent`` in flight, and the child was killed: a new child is
        handed what answers it, as after a death, but no failure is counted
        (:meth:`Supervisor.end_episode`). None, or the error of a new child that could
        not start."""
        self.unsettled.add(w)
        return self.each[w].failed(error, sent)

    def report(self, errors: list[WorkerError]) -> None:
        """The failures a child reported with its answer (its envs restarted or given
        up), passed to ``on_failure``, whose own error is a warning, not the caller's."""
        for error in errors:
            report_failure(self.on_failure, error)


class _OneChild(Remedies):
    """One child's supervision: what :class:`~aioenv.workers._base.Worker` does about a
    process worker's death, for the child's envs, in the calling thread."""

    def __init__(self, owner: Revivals, w: int, plan: ChildPlan, options: Supervision) -> None:
        self.owner, self.w, self.plan = owner, w, plan
        self.supervisor = Supervisor(options, plan.seed, self)
        # What the new child answers (see _start_env): the request in flight with its op,
        # the episodes its rows left open (None: none is), and the error that lost it.
        self._sent: tuple[str, Any] = ("step", None)
        self._open: BatchStep[Any] | None = None
        self._error: WorkerError | None = None
        self._given_up: WorkerError | None = None

    def failed(self, error: WorkerError | None, sent: tuple[str, Any]) -> WorkerError | None:
        """The child died or hung (``error``) with ``sent`` in flight: the error that gave it
        up, or None (see :meth:`Revivals.revive`). ``error`` None: the episode ran past its
        budget with ``sent`` in flight (a step, never a reset: only a step's deadline is
        its episode's end, see :meth:`EpisodeBudgets.handed`), so
        the open episode is the one its rows left, whatever its flags: under same-step
        autoreset the new child answers it with its env's reset, carried by the step that
        cuts the episode short; else that step answers it, and the new child answers its
        next step with its reset."""
        op, request = sent
        clock = self.owner.clock
        # A control in flight cuts short the episode its child's envs left open too.
        asked = request if op == "step" else None
        last = None if is_reset(asked) else self.owner.children.last_state(self.w)
        self._open = last if error is None else open_episode(last, asked, self.owner.autoreset)
        self._sent, self._error, self._given_up = sent, error, None
        # Either way the restart (after its backoff) hands the new child what answers
        # ``sent`` (_start_env).
        if error is None:  # no failure is counted
            self.supervisor.end_episode(IN_FLIGHT, clock)
        else:
            self.supervisor.failed(error, env_gone=True, in_flight=IN_FLIGHT, clock=clock)
        clock.run()
        return self._given_up

    def _discard_env(self, env_gone: bool) -> None:
        """The child is dead or killed, nothing to discard: its new one ends it. A dead
        child is ended when its new one starts (:meth:`EngineChildren.respawn`)."""

    def _start_env(self, seq: int, seed: int | None, reason: str) -> None:
        """A new child, seeded ``seed``, handed what answers the request in flight."""
        # Its envs' seeds are drawn from ``seed``, as a restarted worker's are (not its
        # predecessor's first ones); an env alone in it takes ``seed``, as one alone in one.
        env_seeds = (seed,) if self.plan.rows.stop - self.plan.rows.start == 1 else seed
        op, request = self._sent
        cut = self._open  # the rows whose episodes the new child's first step cuts short
        if op != "step":
            # A control fails; the new child's first step then starts new episodes,
            # cutting short those still open.
            op, request = "echo", self._error
        elif not restart_answers(cut, self.owner.autoreset):
            # A step ends the open episodes here, truncated, echoed; the new child's first
            # step then starts new episodes. (Else the new child's answer to the request
            # answers it.)
            op, request, cut = "echo", cut_short_state(cut, reason), None
        revived = Revived(reason, cut)
        plan = dataclasses.replace(self.plan, seed=seed, env_seeds=env_seeds, revived=revived)
        children = self.owner.children
        try:
            error = children.respawn(self.w, plan)
        except Exception as exc:  # no new child could be started: given up, as a pool worker
            self.supervisor.restart_failed()
            self._given_up = restart_failed(children.children[self.w].name, self.w, reason, exc)
            return
        if error is not None:  # the new child failed too: a failure like any other
            self.supervisor.failed(
                error, env_gone=True, in_flight=IN_FLIGHT, clock=self.owner.clock
            )
            return
        children.hand(self.w, request, op)

    def _fail_request(self, error: WorkerError, for_good: bool) -> None:
        self._given_up = error  # a child's death is for good where no restart follows


class EpisodeBudgets:
    """The budget (``seconds``) of the episode of each of ``n`` children's envs (one env
    each), under ``autoreset``."""

    def __init__(self, seconds: float, n: int, autoreset: str) -> None:
        self.seconds = seconds
        self.autoreset = autoreset
        #: When each child's open episode runs out of its budget (``time.monotonic``);
        #: None: no episode is timed (none is open yet, or the last one ended).
        self.ends: list[float | None] = [None] * n

    def any_over(self) -> bool:
        """Some open episode has run out of its budget (the lockstep step then goes the
        general way, which hands that child what ends it)."""
        now = time.monotonic()
        return any(end is not None and end <= now for end in self.ends)

    def instead(
        self, w: int, request: Any, last_state: Callable[[], BatchStep[Any]]
    ) -> tuple[str, Any] | None:
        """What child ``w`` is handed in place of step ``request``, as ``(op, payload)``,
        where its episode has run out of its budget (``last_state``: the rows the child
        left); None where the step goes as it is."""
        end = self.ends[w]
        if end is None or end > time.monotonic() or is_reset(request):
            return None
        self.ends[w] = None
        last = last_state()
        if restart_answers(last, self.autoreset):
            # The child resets its env and answers the step that cuts ``last`` short with it.
            return "expire", (Revived(EPISODE_TIMEOUT, last, env_kept=True), "step", request)
        # The cut-short step answers now; the child's next step answers with its reset.
        cut = cut_short_state(last, EPISODE_TIMEOUT)
        return "expire", (Revived(EPISODE_TIMEOUT, env_kept=True), "echo", cut)

    def handed(self, w: int, child: Child) -> None:
        """Child ``w`` was handed a step: its deadline is its episode's end where that
        comes first (:attr:`Child.ends_episode` then says so)."""
        end = self.ends[w]
        child.ends_episode = end is not None and end < child.due
        if child.ends_episode:
            child.due = end  # type: ignore[assignment]

    def opened(self, w: int, sent: tuple[str, Any], answer: Any) -> None:
        """Child ``w``'s ``answer`` to ``sent`` (its op and request), as its env's episode
        budget hears of it: a reset's or a step's rows (a control's result is not)."""
        if type(answer) is BatchStep:
            op, request = sent
            ended = bool(answer.terminated[0] or answer.truncated[0])
            self._answered(w, op == "step" and is_reset(request), ended)

    def stepped(self, terminated: Any, truncated: Any) -> None:
        """Every child answered a lockstep step (its row of these flags)."""
        for w in range(len(self.ends)):
            self._answered(w, False, bool(terminated[w] or truncated[w]))

    def _answered(self, w: int, reset: bool, ended: bool) -> None:
        """Child ``w`` answered a reset (``reset``) or a step that ``ended`` an episode or
        not: a new episode opens its budget (a reset, a step that carries one under
        same-step autoreset, or the first state after an episode ended), an episode's end
        closes it."""
        now = time.monotonic()
        self.ends[w] = budget_end(self.ends[w], reset, ended, self.autoreset, now, self.seconds)

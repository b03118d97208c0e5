"""Episode budgets through the engine (``episode_timeout``): each child steps one env, and
the parent times that env's episode from the answer that opened it to its end, the env's
time and the wait for the next action alike, by the rule a pool's worker follows
(:class:`~aioenv.workers._supervised.SupervisedEnv`).

Past its budget the episode ends as an episode cut short ends (truncated, reward 0, the
last observation as final, ``info["aioenv"]["reason"] == "episode_timeout"``), and no
failure is counted:

- a step handed once the budget has run out is not stepped. Under same-step autoreset the
  child resets its env and answers with the step that cuts the episode short and carries
  that reset; else the parent answers through the child with the cut-short step, and the
  child answers its next step (or reset) with its env's reset. The env goes on.
- a step still in flight when the budget runs out is abandoned: the child is killed, as a
  hung one is, and a new child answers in its place
  (:meth:`~aioenv.engine._revivals.Revivals.revive`).

A budget's end while a step is in flight is one of the child's deadlines, the earlier of
it and the step's own (:attr:`~aioenv.engine._family.Child.due`); the parent's one timed
sleep ends there, as for any deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..core._commands import is_reset
from ..core._environment import BatchStep
from ..core._restarts import EPISODE_TIMEOUT, cut_short_state, restart_answers
from ..core._supervision import budget_end
from ._child import Revived
from ._family import Child

__all__ = ["EpisodeBudgets"]


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

"""Whether a vector env's children poll for the next lockstep step or sleep: tried, not
guessed.

Polling (``idle_spin``) saves a child the wake-up between two steps, and on a machine with
a core per child it pays: on the 2-core machine of ``make bench`` 2 children of 4 Pong
envs step 10-18% faster polling. But on 16 vCPUs of a virtual machine the same rule cost
16% (``benchmarks/results/16-cores.md``): a child that polls there slows the children
still stepping beside it, through hardware the vCPUs share and do not report. Nothing a
process can read tells the two machines apart, so the vector env measures: now and then
it runs a few windows of lockstep steps with its children asleep and a few polling,
alternately, and keeps the faster. :class:`SpinTrial` is that rule; the vector env
feeds it each step's start and applies what it decides.

A trial measures whole cycles (one ``step()`` call's start to the next), the script's
own work between steps included, since a polling child takes a core that work could
use. Each window's median cycle stands for it (a training update between two steps is
one slow cycle, not a trend), the first cycle after a switch is left out (its child
waited the old way), and the other way is only chosen where it was faster in every
round by :data:`MARGIN`: a noisy machine keeps the way it has. Trials come ever rarer
while their answer stays the same (the first after :data:`FIRST_TRIAL` steps, then after
twice as many each time, at most :data:`LONGEST_GAP`), and sooner again once it changes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

__all__ = ["FIRST_TRIAL", "LONGEST_GAP", "MARGIN", "ROUNDS", "WINDOW", "SpinTrial"]

#: Lockstep steps before the first trial (the envs' first episodes, caches warming).
FIRST_TRIAL = 200
#: The most steps between two trials that gave the same answer.
LONGEST_GAP = 200 * 2**10
#: Cycles measured in each window of a trial.
WINDOW = 16
#: Windows of each way in a trial, alternating (the other way first).
ROUNDS = 3
#: How much faster (as a share of the cycle) the other way must be in every round.
MARGIN = 0.03


class SpinTrial:
    """Decides whether children poll (``spinning``) between lockstep steps. ``switch``
    applies a decision (True: poll); ``clock``: seconds. Call :meth:`step_started` at the
    start of each lockstep step, :meth:`interrupted` when something else (a reset) came
    between two steps."""

    def __init__(
        self,
        switch: Callable[[bool], None],
        *,
        clock: Callable[[], float] = time.perf_counter,
        first_trial: int = FIRST_TRIAL,
        longest_gap: int = LONGEST_GAP,
        window: int = WINDOW,
        rounds: int = ROUNDS,
        margin: float = MARGIN,
    ) -> None:
        self.spinning = True  # the way the children wait now (polling, as the rule gave)
        self.trials = 0  # trials finished
        self._switch, self._clock = switch, clock
        self._first, self._longest, self._window = first_trial, longest_gap, window
        self._rounds, self._margin = rounds, margin
        self._gap = first_trial  # steps from one trial's end to the next one's start
        self._until_trial = first_trial
        self._last: float | None = None  # when the step before this one started
        self._plan: list[bool] = []  # the ways of this trial's windows still to run
        self._cycles: list[float] = []  # the current window's cycles
        self._medians: list[tuple[bool, float]] = []  # each finished window's way, median
        self._counting = False  # whether this window counts the next step's cycle
        self._applied = True  # the way the children were last told

    def interrupted(self) -> None:
        """The next step's cycle does not count: something else ran in between."""
        self._last = None

    def step_started(self) -> None:
        now = self._clock()
        last, self._last = self._last, now
        if not self._plan:
            self._until_trial -= 1
            if self._until_trial <= 0:
                self._plan = [not self.spinning, self.spinning] * self._rounds
                self._medians = []
                self._enter_window()
            return
        if last is not None and self._counting:
            self._cycles.append(now - last)
        self._counting = True  # from the second step of a window on
        if len(self._cycles) < self._window:
            return
        self._medians.append((self._plan.pop(0), statistics.median(self._cycles)))
        if self._plan:
            self._enter_window()
        else:
            self._decide()

    def _enter_window(self) -> None:
        way = self._plan[0]
        self._cycles = []
        # This step's cycle ends after the switch, but its child waited the old way.
        self._counting = False
        self._apply(way)

    def _decide(self) -> None:
        current = self.spinning
        other = [median for way, median in self._medians if way != current]
        kept = [median for way, median in self._medians if way == current]
        better = all(o < k * (1 - self._margin) for o, k in zip(other, kept, strict=True))
        chosen = not current if better else current
        self._apply(chosen)
        self.spinning = chosen
        self.trials += 1
        self._gap = self._first if better else min(self._longest, 2 * self._gap)
        self._until_trial = self._gap

    def _apply(self, way: bool) -> None:
        if way != self._applied:
            self._switch(way)
            self._applied = way

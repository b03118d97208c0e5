"""How an :class:`~aioenv.AioVectorEnv`'s envs are grouped into workers (or the engine's
children) across the machine's cores: ``envs_per_worker``, the default for process
workers (a core for the script, one child per other core), whether their children poll
between steps (``idle_spin``), and how busy the cores are (the default's rule reads it);
and which placements step through the engine's children (:mod:`aioenv.engine`) rather
than a pool of process workers, and in which groups (:func:`engine_envs`); and whether
the children poll for the next lockstep step or sleep: tried, not guessed
(:class:`SpinTrial`).

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

import numbers
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core._environment import EnvSource, VectorSource
from ..core._seeds import checked_count, worker_seeds
from ..engine._buffer import NoLayout
from ..engine._children import ENGINE_OPTIONS, EngineChildren
from ._probe import Probe

__all__ = [
    "LOCKSTEP_IDLE_SPIN",
    "SpinTrial",
    "busy_cores",
    "engine_envs",
    "envs_per_worker",
    "group_size",
    "groups_of",
    "usable_cores",
]

#: The ``idle_spin`` (seconds) of grouped process workers that have a core each: longer
#: than a small policy's forward pass between two steps, so a child is still awake when
#: the next step comes (waking a sleeping one costs the parent's send 100 µs and more on a
#: virtual machine), and short enough to be noise if the script computes longer. A child
#: that polls yields its core to any other runnable process, the script's among them.
LOCKSTEP_IDLE_SPIN = 0.002


def group_size(
    num_envs: int,
    mode: str | Sequence[str],
    options: dict[str, Any],
    batch_size: int | None = None,
) -> int:
    """How many consecutive envs of the ``num_envs`` each worker steps, ``k``:
    ``envs_per_worker=k`` if given (popped from ``options``), else for process workers
    ``k`` chosen from the cores (a core for the script, the others for the children: 16
    envs on 2 cores run as 1 worker of 16, on 16 cores as 8 workers of 2) unless
    ``envs_per_process`` is given; 1 otherwise (:func:`groups_of` makes the groups). One
    message per worker and step instead of one per env. Process workers that each have a
    core of their own poll for the next step a moment before they sleep (``idle_spin``,
    unless given; in a list of modes too).
    The chosen ``k`` also divides ``batch_size``: each ``recv`` returns whole workers."""
    if "envs_per_worker" in options:
        per_worker = checked_count(options.pop("envs_per_worker"), "envs_per_worker")
        if num_envs % per_worker:
            raise ValueError(
                f"envs_per_worker must be an int >= 1 that divides the {num_envs} envs, "
                f"got {per_worker!r}"
            )
    elif mode == "process" and "envs_per_process" not in options:
        # A budget (episode_timeout) times each env's episodes on a worker of its own:
        # place_envs gives each env a worker then (envs_per_worker=1, where the mode
        # choice, which leaves the grouping to the pool given a budget, chose none).
        per_worker = envs_per_worker(num_envs, usable_cores(), batch_size)
    else:
        per_worker = 1
    # idle_spin (unless given) where each child has a core of its own: the script's core
    # is free for one while a lockstep script waits, but not while the parent steps envs
    # itself (workers of a kind that runs in the parent, in a list of modes), and a child
    # of several (envs_per_process) counts once.
    per_process = options.get("envs_per_process", 1)
    kinds = [mode] * (num_envs // per_worker) if isinstance(mode, str) else list(mode)
    process_workers = kinds.count("process")
    unasked = "idle_spin" not in options and isinstance(per_process, (int, np.integer))
    if process_workers and unasked:
        processes = -(-process_workers // max(1, per_process))
        cores = usable_cores()
        parent_steps = process_workers < len(kinds)
        if cores > 1 and processes <= cores - parent_steps:
            options["idle_spin"] = LOCKSTEP_IDLE_SPIN
    return per_worker


def groups_of(sources: list[EnvSource], size: int, seed: int | None = None) -> list[VectorSource]:
    """``sources`` in groups of ``size`` consecutive envs, one per worker (or child), each
    env seeded from ``seed`` as it is in line, however the envs are grouped."""
    seeds = tuple(worker_seeds(seed, len(sources)))
    return [
        VectorSource(tuple(sources[i : i + size]), seeds[i : i + size])
        for i in range(0, len(sources), size)
    ]


def engine_envs(
    mode: str | Sequence[str],
    batch_size: int | None,
    per_worker: int,
    sources: list[EnvSource],
    probe: Probe,
    autoreset: object,
    options: dict[str, Any],
    copy: bool = True,
) -> EngineChildren | None:
    """The envs in child processes, stepped through the engine (:mod:`aioenv.engine`), a
    child per worker's ``per_worker`` envs (each env a child of its own where that is 1);
    None where they do not go there: ``mode`` is not ``"process"``, or the pool must step
    them: a pool option beyond the engine's
    (:data:`~aioenv.engine._children.ENGINE_OPTIONS`: deadlines, restarts and episode
    budgets are the engine's; so are ``shared_memory``, but False, and
    ``envs_per_process=k``, ``k`` envs to a child where whole children make up the envs
    and each pipelined batch), or spaces with no fixed layout in memory. ``batch_size``:
    the pipelined calls' (their envs grouped to fit it by then). Parallel envs' lanes step
    as the envs they make up (:class:`~aioenv.core._agents.AgentLanesEnv`), whose spaces
    are a batch of one agent's per lane."""
    options = dict(options)  # the pool's, untouched, where the engine does not take them
    per_process = options.pop("envs_per_process", 1)
    # The shared_memory values the engine fulfils: its buffer is shared memory, so every
    # observation of a fixed layout travels there. Any other (False, never through shared
    # memory) is a pool's process workers' to fulfil, or to refuse (0 and 1 among them).
    shared = options.pop("shared_memory", True)
    if (
        mode != "process"
        or not (shared is True or shared == "auto")
        or set(options) - ENGINE_OPTIONS
    ):
        return None
    # envs_per_process=k makes whole children of the envs for the engine where it is an
    # int that divides them and each pipelined batch: k envs to a child (a worker's k
    # envs are a child already; several such workers to a process are the pool's).
    if per_worker == 1 and (
        isinstance(per_process, (int, np.integer))
        and type(per_process) is not bool
        and per_process >= 1
        and len(sources) % per_process == 0
        # a batch size that is no int is refused by the vector env as in any mode
        and (not isinstance(batch_size, numbers.Integral) or batch_size % per_process == 0)
    ):
        per_worker = int(per_process)  # a child per env, or per envs_per_process envs
    elif per_process != 1:
        return None  # the pool's, which says what is wrong where something is
    groups = groups_of(sources, per_worker)
    sizes = [per_worker] * len(groups)
    try:
        return EngineChildren(
            groups,
            sizes,
            *probe.env_spaces(),  # parallel envs' lanes: a batch of one agent's per lane
            autoreset=autoreset,
            copy=copy,
            **options,
        )
    except NoLayout:
        return None


def envs_per_worker(num_envs: int, cores: int, batch_size: int | None = None) -> int:
    """The largest divisor of ``num_envs`` (and of ``batch_size``, if given) that is at
    most ``ceil(num_envs / children)``, with one child per core but one (the training
    script's), at least one child."""
    target = -(-num_envs // max(1, cores - 1))
    batch = batch_size if isinstance(batch_size, numbers.Integral) and batch_size > 0 else num_envs
    return max(k for k in range(1, target + 1) if num_envs % k == 0 and batch % k == 0)


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: How long :func:`busy_cores` watches the machine (seconds): 5 ticks of the kernel's
#: CPU accounting at its usual 100 Hz.
LOAD_WINDOW = 0.05


def busy_cores(window: float = LOAD_WINDOW) -> float:
    """How much of the cores this process may run on other work kept busy over the next
    ``window`` seconds, while this thread sleeps: the sum of each core's busy share (1.0
    for a core that a CPU-heavy job holds), read from ``/proc/stat``; 0.0 where that
    cannot be read (not on Linux)."""
    try:
        cores = os.sched_getaffinity(0)
        before = _core_times(cores)
        time.sleep(window)
        after = _core_times(cores)
    except (OSError, AttributeError, ValueError):
        return 0.0
    busy = 0.0
    for core, (busy_then, total_then) in before.items():
        busy_now, total_now = after.get(core, (busy_then, total_then))
        if total_now > total_then:
            busy += (busy_now - busy_then) / (total_now - total_then)
    return busy


def _core_times(cores: set[int]) -> dict[int, tuple[int, int]]:
    """Each core's busy and total time so far (clock ticks), for the ``cores`` given."""
    times: dict[int, tuple[int, int]] = {}
    with open("/proc/stat") as stat:
        for line in stat:
            if not line.startswith("cpu"):
                break  # the per-core lines come first
            name, *fields = line.split()
            core = int(name[3:] or -1)  # -1: the "cpu" line, all cores summed
            if core not in cores:
                continue
            # user nice system idle iowait irq softirq steal: idle and iowait are idle;
            # steal (another virtual machine ran on the core) is not free for this one.
            ticks = [int(field) for field in fields[:8]]
            total = sum(ticks)
            times[core] = (total - ticks[3] - ticks[4], total)
    return times


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

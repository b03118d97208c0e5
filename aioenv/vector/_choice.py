"""Where :class:`~aioenv.AioVectorEnv`'s envs step by default (``mode="auto"``): in the
calling thread, or in child processes, and how many.

A lockstep vector step waits for its slowest part. In line, ``N`` envs cost ``N`` steps of
one env, ``t`` each. In ``W`` child processes of ``k = N / W`` envs, they cost ``k`` steps
plus the hand-off: the actions out and the states back, which costs the parent and a child
about :data:`HAND_OFF` for the first child and :data:`PER_CHILD` more for each other one
(the parent reads and writes them one after the other). The probe env the vector env
builds anyway is stepped for ``t``; children are chosen when their estimate beats stepping
in line by :data:`MARGIN`, with at most one child per core (a lockstep script waits while
they step, so its own core is free for one of them).

Cores that other work keeps busy when the vector env is made are not counted (see
:func:`~aioenv.vector._grouping.busy_cores`): beside a CPU-heavy job, children wait for its
time slices at every hand-off, and the envs step faster in line. The choice is made once;
while the envs run, a child only adapts how it waits (see
:mod:`aioenv.env_side._idle_spin`), since an env's state cannot move between processes.

Restarts (``restart="on_failure"``, its budget, ``on_failure``) do not move the envs: envs
in line are restarted env by env, as a process worker of one env is (see
:mod:`aioenv.env_side._env_restarts`), so a cheap env that asks for restarts steps as fast as one
that does not. Deadlines (``step_timeout=`` and the like, ``episode_timeout=``: a step in
the calling thread cannot be abandoned) and the other pool options need workers, so the
envs cannot step in line; where the rule places children, they still step in those
children. Where it would step them in
line, they are grouped as ``mode="process"`` groups them (on 2 cores, one child of all
of them: such cheap envs pay for each further child more than it saves). An option that
groups the envs itself (:data:`LAYOUT_OPTIONS`) leaves the grouping to the pool.

Pipelined use (``batch_size`` below ``N``) follows the same rule: a ``recv`` of ``B`` envs
costs per env what a lockstep step does, in line or through children, so whichever wins
one wins the other; children's groups then divide ``B``, so that a ``recv`` returns
whole groups.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any

from ..core._agents import LaneSource
from ..core._environment import EnvSource
from ..core._gymnasium import refuse_shared, resolve_source
from ..pool._factory import canonical_mode, make_pool, old_spellings, worker_modes
from ..pool._options import POOL_OPTIONS, PoolOptions
from ._grouping import busy_cores, engine_envs, group_size, groups_of, usable_cores
from ._inline import INLINE_OPTIONS, InlineEnvs
from ._probe import Probe, probe_env
from ._runtime import Envs, Runtime

__all__ = [
    "AUTO",
    "BUSY_SHARE",
    "HAND_OFF",
    "LAYOUT_OPTIONS",
    "MARGIN",
    "PER_CHILD",
    "ModeChoice",
    "Placement",
    "auto_choice",
    "check_mode",
    "check_num_envs",
    "choose_mode",
    "in_parent",
    "place_envs",
    "vector_modes",
]

AUTO = "auto"
#: The modes whose envs run in the parent's own process.
IN_PARENT = frozenset({"inline", "sync", "thread", "coroutine", "async"})
#: Seconds a lockstep step through one child process costs beyond its envs' own work
#: (parent and child together), and what each further child adds (the parent sends and
#: reads them one after the other, and on few cores shares a core with one). Measured by
#: ``python benchmarks/choice.py`` on 2 cores (1 child: 190-240 µs beyond 8 steps of 25 to
#: 400 µs; 2 children: 285-305 µs); with more cores than children the second figure may
#: be smaller, so the rule may choose fewer children there than would pay.
HAND_OFF = 190e-6
PER_CHILD = 100e-6
#: Pool options that decide how envs are grouped into workers themselves: given one, the
#: pool's own grouping applies (see :func:`~aioenv.vector._grouping.group_size`).
LAYOUT_OPTIONS = frozenset({"envs_per_worker", "envs_per_process", "episode_timeout"})
#: Pool options that hold a step to a deadline (an episode to its budget): a step in the
#: calling thread cannot be abandoned, so they need the envs in workers.
DEADLINE_OPTIONS = frozenset({"step_timeout", "reset_timeout", "start_timeout", "episode_timeout"})
#: Children must be estimated this much faster than stepping in line to be chosen: in
#: line there is nothing to start and nothing to lose.
MARGIN = 1.1
#: A core counts as taken when other work kept it busy this share of the time the choice
#: watched it (a CPU-heavy job: all of it; a quiet machine's daemons: a few percent).
BUSY_SHARE = 0.6


@dataclasses.dataclass(frozen=True)
class ModeChoice:
    """A vector env's mode, its envs per worker (0: the pool's own default) and why."""

    mode: str | Sequence[str]
    envs_per_worker: int
    reason: str


@dataclasses.dataclass(frozen=True)
class Placement:
    """A vector env's envs, started nowhere yet: in line or behind a pool's runtime, the
    envs each worker steps, the probe env's findings and the choice that placed them."""

    envs: Envs
    sizes: list[int]
    probe: Probe
    choice: ModeChoice
    #: ``batch_size`` in envs (a parallel env's lanes counted as one env).
    batch_size: int | None = None
    #: Whether the children poll between steps by the rule, not as asked (``idle_spin``):
    #: the vector env then tries them asleep now and then (:class:`._grouping.SpinTrial`).
    spin_by_rule: bool = False


def place_envs(
    env: EnvSource | Sequence[EnvSource],
    num_envs: int | None,
    mode: str | Sequence[str],
    autoreset: Any,
    batch_size: int | None,
    options: dict[str, Any],
    *,
    alike: bool = True,
    copy: bool = True,
) -> Placement:
    """Where ``AioVectorEnv(env, num_envs, mode=mode, ...)`` steps its envs: the pool
    options' values are checked first, then the probe env is built (and timed, for
    ``"auto"``) before any worker starts; ``options`` are the pool options left (grouping
    takes its own out). ``alike``: every env must have the probe env's spaces
    (``observation_mode="same"``), so envs in child processes can step through the
    engine's buffer, laid out for those spaces (see :func:`engine_envs`); ``copy``: the
    vector env's (the engine's steps copy the observations out, or not)."""
    check_mode(mode)
    PoolOptions(autoreset=autoreset, **{k: v for k, v in options.items() if k in POOL_OPTIONS})
    sources = _sources(env, num_envs)
    probe = probe_env(
        sources[0],
        timed=mode == AUTO,
        in_child=not in_parent(mode),
        context=options.get("context"),
    )
    if probe.agents is not None:
        # Parallel envs: each worker builds its envs as their agent lanes.
        batch_size = _envs_of_lanes(batch_size, len(probe.agents))
        sources = [LaneSource(source) for source in sources]
    choice = choose_mode(mode, probe, len(sources), batch_size, options)
    if choice.mode == "inline":  # the envs of mode='inline', or why the options need another mode
        unknown = sorted(set(options) - INLINE_OPTIONS)
        if unknown:
            raise TypeError(
                f"mode='inline' steps the envs in the calling thread, with no pool, and "
                f"{_why_not_inline(unknown)}; pass mode='sync', 'thread' or 'process' (or leave "
                "mode='auto' to choose)"
            )
        inline = InlineEnvs(sources, autoreset, **options)
        return Placement(inline, [len(sources)], probe, choice, batch_size)
    if choice.envs_per_worker or options.get("episode_timeout") is not None:
        # A budget (episode_timeout) times each env's episodes on a worker of its own.
        options.setdefault("envs_per_worker", choice.envs_per_worker or 1)
    asked_spin = "idle_spin" in options
    per_worker = group_size(len(sources), choice.mode, options, batch_size)
    spin_by_rule = not asked_spin and "idle_spin" in options
    placed = (choice.mode, batch_size, per_worker, sources, probe)
    engine = alike and engine_envs(*placed, autoreset, options, copy)
    if engine:
        return Placement(engine, engine.sizes, probe, choice, batch_size, spin_by_rule)
    # The vector env copies observations once, into what it returns (its own ``copy``):
    # the pool hands them over as they arrive, views of shared memory included.
    options["copy"] = False
    grouping = sources if per_worker == 1 else groups_of(sources, per_worker, options.get("seed"))
    count = len(sources) // per_worker
    pool = make_pool(grouping, count, mode=choice.mode, autoreset=autoreset, **options)
    sizes = [worker.num_envs for worker in pool.workers]
    return Placement(Runtime(pool, alike=alike), sizes, probe, choice, batch_size, spin_by_rule)


def _sources(env: EnvSource | Sequence[EnvSource], num_envs: int | None) -> list[EnvSource]:
    """The env sources of ``AioVectorEnv(env, num_envs)``, one per env, resolved (one
    source every env is built from is listed once per env: the same object, which a
    pool builds as it builds one source given for every worker)."""
    if isinstance(env, (list, tuple)):
        refuse_shared(env, "AioVectorEnv()")
        sources = [resolve_source(source) for source in env]
        if not sources:
            raise ValueError("AioVectorEnv needs at least one env factory")
        if num_envs is not None and num_envs != len(sources):
            raise ValueError(f"num_envs={num_envs} but {len(sources)} env factories")
        return sources
    if num_envs is None:
        raise TypeError("AioVectorEnv(env, num_envs): num_envs is needed for one env")
    check_num_envs(num_envs, "AioVectorEnv(env, num_envs)")
    refuse_shared([env], "AioVectorEnv()", num_envs)
    return [resolve_source(env)] * num_envs  # an unknown id fails here


def vector_modes() -> tuple[str, ...]:
    """The modes :class:`~aioenv.AioVectorEnv` takes as one string: ``"auto"``,
    ``"inline"`` and the worker modes (a list of modes takes worker modes only)."""
    return (AUTO, "inline", *worker_modes())


def check_mode(
    mode: str | Sequence[str],
    got: str = "AioVectorEnv() got mode",
    also: str = f" (old spellings taken: {old_spellings()})",
) -> None:
    """ValueError for a ``mode`` that :class:`~aioenv.AioVectorEnv` does not take, listing
    those it does: as one string, :func:`vector_modes`; in a list, worker modes. ``got``
    names the call and its parameter, ``also`` what else it takes (``make_vec``: "async",
    gymnasium's name for "process", which the modes take as the old spelling of
    "coroutine", so both take the same strings)."""
    if isinstance(mode, str):
        if mode not in vector_modes() and canonical_mode(mode) == mode:
            raise ValueError(
                f"{got}={mode!r}; choose one of {', '.join(map(repr, vector_modes()))}{also}, "
                "or a list of worker modes, one per env"
            )
        return
    for index, kind in enumerate(mode):
        if canonical_mode(kind) not in worker_modes():
            raise ValueError(
                f"{got}[{index}]={kind!r}; a list of modes takes worker modes, one of "
                f"{', '.join(map(repr, worker_modes()))}{also}"
            )


def check_num_envs(num_envs: object, call: str) -> None:
    """ValueError, naming ``call``, unless ``num_envs`` is an int >= 1."""
    if not isinstance(num_envs, numbers.Integral) or isinstance(num_envs, bool) or num_envs < 1:
        raise ValueError(
            f"{call} got num_envs={num_envs!r}: num_envs is how many envs to step, "
            "and must be an int >= 1"
        )


def auto_choice(env: EnvSource, num_envs: int) -> tuple[Probe, ModeChoice]:
    """What ``AioVectorEnv(env, num_envs)`` (``mode="auto"``, no options) would find and
    choose: its probe env, timed, and the mode with its reason; no worker is started."""
    check_num_envs(num_envs, "auto_choice(env, num_envs)")
    source = resolve_source(env)
    probe = probe_env(source, timed=True, in_child=not in_parent(AUTO))
    return probe, choose_mode(AUTO, probe, num_envs, None, {})


def _envs_of_lanes(batch_size: int | None, lanes: int) -> int | None:
    """A ``batch_size`` given in lanes, as the whole envs it stands for."""
    if batch_size is None:
        return None
    if not isinstance(batch_size, numbers.Integral) or batch_size < 1 or batch_size % lanes:
        raise ValueError(
            f"batch_size={batch_size!r} counts lanes, and each env has {lanes} (one per "
            "agent), which step together: pass a multiple of that"
        )
    return batch_size // lanes


def in_parent(mode: str | Sequence[str]) -> bool:
    """Every env of ``mode`` runs in the parent's process (``"auto"`` may choose child
    processes)."""
    return all(kind in IN_PARENT for kind in ([mode] if isinstance(mode, str) else mode))


def choose_mode(
    mode: str | Sequence[str],
    probe: Probe,
    num_envs: int,
    batch_size: int | None,
    options: dict[str, Any],
    cores: int | None = None,
) -> ModeChoice:
    """The mode ``mode`` stands for: itself, unless it is ``"auto"``. ``cores``: the
    cores to place children on; None: those this process may run on, less those other
    work keeps busy (watched only when children would be chosen)."""
    if mode != AUTO:
        return ModeChoice(mode, 0, "given")
    if probe.is_async:
        return ModeChoice("coroutine", 0, "auto: the env's reset and step are async def")
    pool_only = sorted(set(options) - INLINE_OPTIONS)
    step = probe.step_seconds
    workers_asked = _needs_workers(pool_only) if pool_only else None
    layout = sorted(LAYOUT_OPTIONS.intersection(pool_only))
    if workers_asked is not None and layout:
        grouping = f"{_listed(layout)} {'say' if len(layout) > 1 else 'says'}"
        return ModeChoice(
            "process",
            0,
            f"auto (process): {workers_asked}; they step in child processes, grouped as "
            f"{grouping}.",
        )
    if step is None:
        why, envs = ("", "the envs") if workers_asked is None else (f"{workers_asked}; ", "they")
        return ModeChoice(
            "process",
            0,
            f"auto (process): {why}the probe env could not be stepped to time it, so {envs} "
            "step in child processes, grouped as mode='process' groups them.",
        )
    batch = _below(batch_size, num_envs)
    given = cores is not None  # then other work's share of them is not watched
    cores = usable_cores() if cores is None else cores
    choice = _by_cost(step, num_envs, cores, batch, workers_asked=workers_asked)
    if given or choice.mode != "process":
        return choice
    taken = int(busy_cores() + 1 - BUSY_SHARE)
    if not taken:
        return choice
    note = f"; {min(taken, cores)} of {cores} cores busy with other work when it was made"
    return _by_cost(step, num_envs, max(1, cores - taken), batch, note, workers_asked)


def _below(batch_size: object, num_envs: int) -> int | None:
    """``batch_size`` where it is a whole number of envs below ``num_envs`` (pipelined use
    to choose for); None otherwise (the vector env refuses a batch size that cannot work)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
        return None
    size = int(batch_size)
    return size if 1 <= size < num_envs else None


def _by_cost(
    step: float,
    num_envs: int,
    cores: int,
    batch_size: int | None = None,
    note: str = "",
    workers_asked: str | None = None,
) -> ModeChoice:
    """The lockstep rule, for pipelined use too: a ``recv`` of ``batch_size`` envs pays
    what a lockstep step pays per env, in line or through children, so what wins one
    wins the other; the children's groups then divide ``batch_size`` (a ``recv``
    returns whole groups). ``workers_asked``: why the envs cannot step in line (pool
    options given): the children the rule places where it places children, else the
    pool's own grouping (see :func:`~aioenv.vector._grouping.group_size`)."""
    inline = num_envs * step
    fits = num_envs if batch_size is None else math.gcd(num_envs, batch_size)
    per_worker, children = min(
        ((k, num_envs // k) for k in range(1, fits + 1) if not fits % k),
        key=lambda group: _children_cost(step, *group) if group[1] <= cores else float("inf"),
    )
    estimate = _children_cost(step, per_worker, children)
    figures = (
        f"a step takes {step * 1e6:.0f} µs: {num_envs} in line ~{inline * 1e3:.2f} ms, "
        f"{children} child process{'es' if children > 1 else ''} of {per_worker} "
        f"~{estimate * 1e3:.2f} ms"
    )
    if batch_size is not None:
        figures += f"; each recv() of batch_size={batch_size} steps "
    if estimate * MARGIN < inline:
        if batch_size is not None:
            figures += "in the children while the script computes"
        if workers_asked is None:
            return ModeChoice("process", per_worker, f"auto (process): {figures}{note}")
        return ModeChoice(
            "process",
            per_worker,
            f"auto (process): {workers_asked}; they step in the child processes the rule "
            f"places without them, which are faster anyway ({figures}{note}).",
        )
    if batch_size is not None:
        figures += "its envs in line, when asked"
    if workers_asked is not None:
        # Envs this cheap pay a hand-off per child: the pool's grouping, as few children
        # as its rule allows (one on 2 cores), beats the rule's estimate for them.
        return ModeChoice(
            "process",
            0,
            f"auto (process): {workers_asked}; they step in child processes, grouped as "
            f"mode='process' groups them, though in line would be faster ({figures}{note}).",
        )
    return ModeChoice("inline", num_envs, f"auto (inline): {figures}{note}")


def _listed(options: list[str]) -> str:
    """``["a", "b", "c"]`` as ``"a=, b= and c="``."""
    names = [f"{option}=" for option in options]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _needs_workers(options: list[str]) -> str:
    """Why pool options keep the envs out of line, as a clause of a reason (restarts do
    not: envs in line are restarted too)."""
    no_pool = " (mode='inline' has no pool)" if set(options) - DEADLINE_OPTIONS else ""
    return f"{_why_not_inline(options)}, so the envs cannot step in line{no_pool}"


def _why_not_inline(options: list[str]) -> str:
    """What ``options`` are that envs in line cannot have: deadlines (a step in the
    calling thread cannot be abandoned) and the options of a pool."""
    deadlines = [option for option in options if option in DEADLINE_OPTIONS]
    others = [option for option in options if option not in DEADLINE_OPTIONS]
    clauses = []
    if deadlines:
        what = "sets a deadline" if len(deadlines) == 1 else "set deadlines"
        clauses.append(
            f"{_listed(deadlines)} {what}, which a step in the calling thread cannot be held "
            "to (it cannot be abandoned; a worker's can)"
        )
    if others:
        what = "is a pool option" if len(others) == 1 else "are pool options"
        clauses.append(f"{_listed(others)} {what}, which only a pool of workers applies")
    return ", and ".join(reversed(clauses))


def _children_cost(step: float, per_worker: int, children: int) -> float:
    return per_worker * step + HAND_OFF + PER_CHILD * (children - 1)

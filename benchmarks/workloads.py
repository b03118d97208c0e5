"""W1-W13: what is measured, against which configurations, in which order.

``CONFIGS`` is the one table of what runs. Each row is a plain dict: an aioenv row passes
its ``options`` straight to ``aioenv.make_pool`` (via :func:`runners.run_aioenv`), a
gymnasium row passes them to the vector env. Adding a configuration is adding a row.

Repetitions are interleaved: every repetition runs every (case, configuration) once, in an
order rotated from one repetition to the next, so slow drifts of the machine spread over
all configurations instead of landing on one.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import time
from collections.abc import Callable
from typing import Any, Literal, TypedDict

import envs
from bare import run_bare
from bare_ray import run_bare_ray
from envs import EnvFactory, Policy
from floors import FLOORS
from lockstep import LIMIT, VECTORS, run_limit, run_lockstep
from machine import CpuAccount, cpu_hog, idle_probe
from peers import (
    INSTALL_HINTS,
    PUFFER_PIPELINED,
    REQUIRES,
    TORCHRL_PARALLEL,
    TORCHRL_POOL,
    run_torchrl,
)
from pipelined import BARE_PIPELINED, PIPELINED, PIPELINED_CHILDREN, run_pipelined
from policies import (
    BatchPolicy,
    CalibratedCartpolePolicy,
    Mlp,
    OnParts,
    PolicyMaker,
    RandomBox,
    RandomDiscrete,
)
from rollouts import ROLLOUT_ROWS, run_rollout_row
from runners import Api, Sample, Timing, calibrate_sleep, run_aioenv, run_bare_tasks, run_gym

__all__ = [
    "CONFIGS",
    "QUICK_DEFAULT",
    "REFERENCE",
    "REAL_N",
    "REFERENCE_SYNC",
    "SIZES",
    "WORKLOADS",
    "Case",
    "Config",
    "Row",
    "Workload",
    "WorkloadResult",
    "build_workloads",
    "measurements_per_rep",
    "run_workload",
]

Runner = Literal[
    "aioenv",
    "gym_sync",
    "gym_async",
    "bare",
    "bare_tasks",
    "lockstep",
    "rollout",
    "limit",
    "pipelined",
    "torchrl",
]


class _ConfigRequired(TypedDict):
    label: str
    runner: Runner
    workloads: tuple[str, ...]  # the workloads this row runs in


class Config(_ConfigRequired, total=False):
    api: Api  # aioenv only: "state" (get_state loop) or "batch" (get_batch loop)
    options: dict[str, Any]  # make_pool(**options) for aioenv, the vector env's kwargs else
    requires: tuple[str, ...]  # modules the row needs; skipped, saying so, without them


_ALL = ("W1", "W2", "W3", "W4", "W5")  # W6 to W8 run only the rows that name them
#: Ray actors reserve a quarter CPU each: eight of them fit on a 2-core machine (Ray
#: counts reservations, not use; a whole CPU each would leave six of eight pending).
_RAY = {"mode": "ray", "num_cpus": 0.25}
#: The coroutine workloads' reference: the same waits on bare asyncio tasks.
BARE_TASKS = "reference: bare asyncio tasks"
#: Seconds after each Ray measurement for its actors to exit (measured: within 0.5 s).
RAY_SETTLE_S = 1.0

CONFIGS: list[Config] = [
    {
        "label": "aioenv process / state",
        "runner": "aioenv",
        "api": "state",
        "options": {"mode": "process"},
        "workloads": ("W1", "W2", "W3", "W4", "W8"),
    },
    {
        "label": "aioenv process / batch",
        "runner": "aioenv",
        "api": "batch",
        "options": {"mode": "process"},
        "workloads": ("W1", "W2", "W3"),
    },
    # The same, with observations through the socket instead of shared memory (W3's
    # frames are 28 KB and more, so "auto" puts them in shared memory).
    {
        "label": "aioenv process, socket / state",
        "runner": "aioenv",
        "api": "state",
        "options": {"mode": "process", "shared_memory": False},
        "workloads": ("W3",),
    },
    # Several envs hosted by one process: one hand-off per batch of cheap envs.
    {
        "label": "aioenv process x4 / state",
        "runner": "aioenv",
        "api": "state",
        "options": {"mode": "process", "envs_per_process": 4},
        "workloads": ("W1",),
    },
    {
        "label": "aioenv process x4 / batch",
        "runner": "aioenv",
        "api": "batch",
        "options": {"mode": "process", "envs_per_process": 4},
        "workloads": ("W1", "W3"),
    },
    {
        "label": "aioenv process x8 / batch",
        "runner": "aioenv",
        "api": "batch",
        "options": {"mode": "process", "envs_per_process": 8},
        "workloads": ("W1", "W3"),
    },
    # Workers that step several envs together: one message per batch each way, one
    # BatchStep per worker (envs_per_worker), first ready per worker.
    {
        "label": "aioenv process, 4 envs/worker",
        "runner": "aioenv",
        "api": "vector",
        "options": {"mode": "process", "envs_per_worker": 4},
        "workloads": ("W1", "W3"),
    },
    {
        "label": "aioenv process, 8 envs/worker",
        "runner": "aioenv",
        "api": "vector",
        "options": {"mode": "process", "envs_per_worker": 8},
        "workloads": ("W1",),
    },
    {
        "label": "aioenv thread / state",
        "runner": "aioenv",
        "api": "state",
        "options": {"mode": "thread"},
        "workloads": (*_ALL, "W7"),
    },
    {
        "label": "aioenv thread / batch",
        "runner": "aioenv",
        "api": "batch",
        "options": {"mode": "thread"},
        "workloads": ("W1", "W2", "W3", "W5", "W7"),
    },
    # Coroutine envs (W7 and W14 only: the case's coroutine twin of its env), tasks on one
    # loop, and the same waits on bare asyncio tasks without aioenv (see run_bare_tasks).
    {
        "label": "aioenv async / state",
        "runner": "aioenv",
        "api": "state",
        "options": {"mode": "async"},
        "workloads": ("W7", "W14"),
    },
    {
        "label": "aioenv async / batch",
        "runner": "aioenv",
        "api": "batch",
        "options": {"mode": "async"},
        "workloads": ("W7", "W14"),
    },
    {
        "label": BARE_TASKS,
        "runner": "bare_tasks",
        "workloads": ("W7", "W14"),
    },
    {
        "label": "aioenv sync / state",
        "runner": "aioenv",
        "api": "state",
        "options": {"mode": "sync"},
        "workloads": ("W1", "W3", "W4"),
    },
    # Ray actors on a local Ray instance (started by the first measurement, outside its
    # window): the cost of a worker that could live on another machine.
    {
        "label": "aioenv ray / state",
        "runner": "aioenv",
        "api": "state",
        "options": _RAY,
        "workloads": ("W4", "W8"),
    },
    # Four envs to an actor: one frame (or actor call) carries each loop iteration's
    # messages for all four, a quarter of the round trips of an actor per env.
    {
        "label": "aioenv ray x4 / state",
        "runner": "aioenv",
        "api": "state",
        "options": {**_RAY, "envs_per_actor": 4},
        "workloads": ("W8",),
    },
    # The same two with every message as an actor call (direct_connection=False): what
    # the direct connection saves, in the same run.
    *(
        {
            "label": f"aioenv ray{' x4' if k > 1 else ''} calls / state",
            "runner": "aioenv",
            "api": "state",
            "options": {**_RAY, "envs_per_actor": k, "direct_connection": False},
            "workloads": ("W8",),
        }
        for k in (1, 4)
    ),
    # Ray's own call paths, nothing of aioenv's (see bare_ray.py): what bounds the rows
    # above on the same machine.
    *(
        {
            "label": f"reference: bare Ray {path}{' x4' if k > 1 else ''}",
            "runner": "bare_ray",
            "options": {"envs_per_actor": k, "compiled": path == "compiled graph"},
            "workloads": ("W8",),
            "requires": ("ray",),
        }
        for path in ("actor call", "compiled graph")
        for k in (1, 4)
    ),
    {
        "label": "aioenv ray x8 / batch",
        "runner": "aioenv",
        "api": "batch",
        "options": {**_RAY, "envs_per_actor": 8},
        "workloads": ("W1",),
    },
    # Not a pool: the leanest batch-per-hand-off process design (see bare.py), for scale;
    # with a child per env, the same design behind the per-state rows' loop.
    {
        "label": "reference: bare vectorized x8",
        "runner": "bare",
        "options": {"envs_per_process": 8},
        "workloads": ("W1",),
    },
    {
        "label": "reference: bare per-state (a child per env)",
        "runner": "bare",
        "options": {"envs_per_process": 1},
        "workloads": ("W1",),
    },
    {
        "label": "reference: bare engine per-state (a child per env)",
        "runner": "bare",
        "options": {"envs_per_process": 1, "engine": True},
        "workloads": ("W1",),
    },
    {
        "label": "gym SyncVectorEnv",
        "runner": "gym_sync",
        "workloads": _ALL,
    },
    {
        "label": "gym AsyncVectorEnv",
        "runner": "gym_async",
        "options": {"shared_memory": True},
        "workloads": _ALL,
    },
    # TorchRL's pools, a process per env: ParallelEnv in lockstep, AsyncEnvPool first-ready
    # (see peers.run_torchrl).
    *(
        {"label": label, "runner": "torchrl", "workloads": ("W1", "W2"), "requires": ("torchrl",)}
        for label in (TORCHRL_PARALLEL, TORCHRL_POOL)
    ),
]

# W6, W11 to W13: the same synchronous training loop over each vector env (see
# lockstep.py, peers.py); W13's pipelined loops, aioenv's and PufferLib's (pipelined.py);
# the computed machine limit last.
CONFIGS += [
    {
        "label": label,
        "runner": "lockstep",
        "workloads": workloads,
        **({"requires": ("envpool",)} if label.startswith("EnvPool") else {}),
        **({"requires": REQUIRES[label]} if label in REQUIRES else {}),
    }
    for label, (_, workloads) in VECTORS.items()
]
CONFIGS += [
    {"label": PIPELINED, "runner": "pipelined", "workloads": ("W13",)},
    {"label": PIPELINED_CHILDREN, "runner": "pipelined", "workloads": ("W13",)},
    {
        "label": PUFFER_PIPELINED,
        "runner": "pipelined",
        "workloads": ("W13",),
        "requires": REQUIRES[PUFFER_PIPELINED],
    },
    {"label": BARE_PIPELINED, "runner": "pipelined", "workloads": ("W13",)},
    {"label": LIMIT, "runner": "limit", "workloads": ("W6", "W11", "W12", "W13")},
]
# W9 and W10: rollouts in the workers vs the policy in the parent; collect() vs a hand loop
# (see rollouts.py).
CONFIGS += [
    {"label": label, "runner": "rollout", "workloads": (workload,)}
    for label, (workload, _) in ROLLOUT_ROWS.items()
]

#: The ratio columns divide by these rows' medians in the same case ("vs async", "vs
#: sync"; the sync one for the training-script workloads, whose targets are stated
#: against SyncVectorEnv).
REFERENCE = "gym AsyncVectorEnv"
REFERENCE_SYNC = "gym SyncVectorEnv"

#: Case sizes: N (number of envs) per workload, and W3's observation shapes.
SIZES: dict[str, dict[str, list[Any]]] = {
    "full": {
        "W1": [1, 2, 4, 8, 16],
        "W2": [8, 32],
        "W3": [4, 8],
        "W3 shapes": [(84, 84, 4), (210, 160, 3)],
        "W5": [4, 16, 64, 256],
        "W6": [4, 16],
        "W6 beside a CPU hog": [16],
        "W7": [100, 1000],
        "W14": [10_000],
        "W11 policies": ["random", "MLP"],
        "W11 policies beside a CPU hog": ["random"],
    },
    "quick": {
        "W1": [1, 4, 16],
        "W2": [8, 32],
        "W3": [4],
        "W3 shapes": [(84, 84, 4), (210, 160, 3)],
        "W5": [4, 64],
        "W6": [4, 16],
        "W6 beside a CPU hog": [16],
        "W7": [100, 1000],
        "W14": [2_000],
        "W11 policies": ["MLP"],  # W11 and W12 alike
        "W11 policies beside a CPU hog": ["random"],
    },
}

STRAGGLER = (1e-3, 1.0)  # W2: lognormal step time, mean 1 ms, sigma 1
FIXED_SLEEP = (1e-3, 0.0)  # W5: every step sleeps 1 ms
AWAITED_SLEEP = (1e-2, 0.0)  # W7: every step waits 10 ms (asyncio.sleep or time.sleep)
REMOTE_SLEEP = (5e-3, 0.0)  # W8: every step sleeps 5 ms
#: W14: the time every step awaits, by scale; both make N / wait = 10,000 steps/s, the
#: quick one with shorter waits so that its windows fit a quick run.
MANY_WAIT = {"full": 1.0, "quick": 0.2}
#: W14's windows, in step times: a warm-up past every env's first (spread) step, then a
#: window that counts each env several times.
MANY_TIMING = Timing(warmup=2.5, budget=5.0)
W5_MAX_PROCESSES = 64  # W5 at N=256 would start 256 processes: skipped for process rows
REAL_N = 8  # W11, W12: envs per vector env (run.py --envs sets another)
PONG_MLP = (4 * 84 * 84, 32, 32, 6)  # a few hundred µs per batch of 8 stacked frames
CHEETAH_MLP = (17, 64, 64, 6)
#: W11's and W12's MLP policies (W13's per B envs), by seed.
PONG_POLICY: PolicyMaker = functools.partial(Mlp, sizes=PONG_MLP, input_scale=1 / 255)
CHEETAH_POLICY: PolicyMaker = functools.partial(Mlp, sizes=CHEETAH_MLP, continuous=True)
#: W11 to W13's measurements start processes that import ALE or MuJoCo: about this long
#: each beyond the windows (for the estimate printed at the start).
PROCESS_START_S = 1.5


@dataclasses.dataclass(frozen=True)
class Case:
    """One env at one N: a row group in the table."""

    key: str
    n: int
    env: EnvFactory
    policy: Policy
    async_env: Callable[[], Any] | None = None  # the coroutine twin, for mode="async" rows
    # What the twin awaits per step (and whether its first waits are spread, see
    # envs.AsyncSleepyEnv): the bare asyncio reference waits the same.
    awaited: float | None = None
    spread: bool = False
    # The training-script rows' policy (seed -> batched policy; W6's MLP when None), and
    # for W13 the envs each recv() returns (lockstep rows run the policy on such slices).
    batch_policy: PolicyMaker | None = None
    batch_size: int | None = None
    requires: tuple[str, ...] = ()  # modules the env needs; its rows skip without them
    # Each measurement runs beside a CPU hog (machine.cpu_hog: a busy loop on every core but
    # one, started for the measurement and stopped after it), as another CPU-heavy job on
    # the machine would be: every row of the case meets the same hog.
    hog: bool = False


@dataclasses.dataclass(frozen=True)
class Workload:
    key: str
    title: str
    cases: list[Case]
    sleep: tuple[float, float] | None = None  # SleepyEnv (mean_s, sigma): compute the ideal
    max_processes: int | None = None  # skip rows that would start more processes than this
    floors: bool = False  # W4: also run the transport floors (round trips, not steps)
    prepare: Callable[[], str] | None = None  # once before the first repetition: a note
    overhead_s: float | None = None  # per measurement beyond its windows, for the estimate
    # Windows of its own (scaled to its step time) in place of the run's, and the step
    # time of its ideal, N / step time, when no SleepyEnv is calibrated for it.
    timing: Timing | None = None
    step_time: float | None = None


def build_workloads(scale: Literal["full", "quick"], real_n: int = REAL_N) -> dict[str, Workload]:
    """The workloads at ``scale``; W11 and W12 step ``real_n`` envs per vector env."""
    sizes = SIZES[scale]
    shapes: list[tuple[int, ...]] = sizes["W3 shapes"]
    policies: list[str] = sizes["W11 policies"]
    pong_policies: dict[str, PolicyMaker] = {
        "random": functools.partial(RandomDiscrete, n=6),
        "MLP": PONG_POLICY,
    }
    cheetah_policies: dict[str, PolicyMaker] = {
        "random": functools.partial(RandomBox, dims=6),
        "MLP": CHEETAH_POLICY,
    }
    cartpole_mlp = CalibratedCartpolePolicy(envs.cartpole(), 8)
    many_wait = MANY_WAIT[scale]
    return {
        "W1": Workload(
            "W1",
            "CartPole-v1",
            [Case(f"N={n}", n, envs.cartpole(), envs.cartpole_policy) for n in sizes["W1"]],
        ),
        "W2": Workload(
            "W2",
            "stragglers: each step sleeps lognormal(mean 1 ms, sigma 1), seeded",
            [Case(f"N={n}", n, envs.sleepy(*STRAGGLER), envs.zero_policy) for n in sizes["W2"]],
            sleep=STRAGGLER,
        ),
        "W3": Workload(
            "W3",
            "large uint8 observations",
            [
                Case(
                    f"{'x'.join(map(str, shape))} N={n}",
                    n,
                    envs.large_obs(shape),
                    envs.zero_policy,
                )
                for shape in shapes
                for n in sizes["W3"]
            ],
        ),
        "W4": Workload(
            "W4",
            "round-trip floors (one no-op env, N=1)",
            [Case("N=1", 1, envs.noop(), envs.zero_policy)],
            floors=True,
        ),
        "W5": Workload(
            "W5",
            "dispatch scaling: every step sleeps 1 ms",
            [Case(f"N={n}", n, envs.sleepy(*FIXED_SLEEP), envs.zero_policy) for n in sizes["W5"]],
            sleep=FIXED_SLEEP,
            max_processes=W5_MAX_PROCESSES,
        ),
        "W6": Workload(
            "W6",
            "training script: lockstep CartPole, a numpy MLP policy between steps",
            [Case(f"N={n}", n, envs.cartpole(), envs.cartpole_policy) for n in sizes["W6"]]
            + [
                Case(f"N={n} beside a CPU hog", n, envs.cartpole(), envs.cartpole_policy, hog=True)
                for n in sizes["W6 beside a CPU hog"]
            ],
        ),
        "W7": Workload(
            "W7",
            "waiting envs: every step awaits asyncio.sleep(10 ms) (async) or time.sleep (thread)",
            [
                Case(
                    f"N={n}",
                    n,
                    envs.sleepy(*AWAITED_SLEEP),
                    envs.zero_policy,
                    envs.sleepy_coroutine(AWAITED_SLEEP[0]),
                    awaited=AWAITED_SLEEP[0],
                )
                for n in sizes["W7"]
            ],
            sleep=AWAITED_SLEEP,
        ),
        "W14": Workload(
            "W14",
            f"many coroutine envs on one loop: every step awaits asyncio.sleep({many_wait:g} s), "
            "first steps spread over one wait",
            [
                Case(
                    f"N={n}",
                    n,
                    envs.sleepy(many_wait, 0.0),
                    envs.zero_policy,
                    envs.sleepy_coroutine(many_wait, spread=True),
                    awaited=many_wait,
                    spread=True,
                )
                for n in sizes["W14"]
            ],
            timing=Timing(MANY_TIMING.warmup * many_wait, MANY_TIMING.budget * many_wait),
            step_time=many_wait,
        ),
        "W8": Workload(
            "W8",
            "remote-sized steps: every step sleeps 5 ms (Ray actors vs processes)",
            [Case("N=8", 8, envs.sleepy(*REMOTE_SLEEP), envs.zero_policy)],
            sleep=REMOTE_SLEEP,
        ),
        "W9": Workload(
            "W9",
            "policy in the workers vs in the parent: CartPole-v1, 8 process workers, "
            "a numpy MLP 4-64-2",
            [Case("N=8", 8, envs.cartpole(), envs.cartpole_policy)],
        ),
        "W10": Workload(
            "W10",
            "collect() vs a hand-written get_batch loop keeping the same transitions "
            "(CartPole-v1, 8 process workers, a numpy MLP 4-64-2 in the parent)",
            [Case("N=8", 8, envs.cartpole(), envs.cartpole_policy)],
        ),
        "W11": Workload(
            "W11",
            "Atari Pong (84x84 grey, 4 frames a step, 4 stacked), lockstep training script",
            [
                Case(
                    f"N={real_n} {name}" + (" beside a CPU hog" if hog else ""),
                    real_n,
                    envs.pong(),
                    envs.zero_policy,
                    batch_policy=pong_policies[name],
                    requires=("ale_py", "cv2"),
                    hog=hog,
                )
                for hog, names in (
                    (False, policies),
                    (True, sizes["W11 policies beside a CPU hog"]),
                )
                for name in names
            ],
            overhead_s=PROCESS_START_S,
        ),
        "W12": Workload(
            "W12",
            "MuJoCo HalfCheetah-v5, lockstep training script",
            [
                Case(
                    f"N={real_n} {name}",
                    real_n,
                    envs.half_cheetah(),
                    envs.zero_policy,
                    batch_policy=cheetah_policies[name],
                    requires=("mujoco",),
                )
                for name in policies
            ],
            overhead_s=PROCESS_START_S,
        ),
        "W13": Workload(
            "W13",
            "pipelined send/recv (AioVectorEnv batch_size=B) against lockstep loops, the "
            "same policy per B envs",
            [
                Case(
                    "CartPole N=16 B=8",
                    16,
                    envs.cartpole(),
                    envs.cartpole_policy,
                    batch_policy=cartpole_mlp,
                    batch_size=8,
                ),
                Case(
                    "Pong N=8 B=4",
                    8,
                    envs.pong(),
                    envs.zero_policy,
                    batch_policy=PONG_POLICY,
                    batch_size=4,
                    requires=("ale_py", "cv2"),
                ),
                Case(
                    "HalfCheetah N=8 B=4",
                    8,
                    envs.half_cheetah(),
                    envs.zero_policy,
                    batch_policy=CHEETAH_POLICY,
                    batch_size=4,
                    requires=("mujoco",),
                ),
            ],
            prepare=cartpole_mlp.calibrate,
            overhead_s=PROCESS_START_S,
        ),
    }


WORKLOADS = (
    "W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "W9", "W10", "W11", "W12", "W13", "W14"
)  # fmt: skip
#: What --quick runs unless --only names others: the real envs' workloads (W11 to W13)
#: start processes that load emulators and physics engines, too slow for a quick run.
QUICK_DEFAULT = (*WORKLOADS[:10], "W14")


@dataclasses.dataclass
class Row:
    """All repetitions of one configuration in one case."""

    case: str
    n: int
    label: str
    kind: str  # the config's runner, or "floor"
    api: str | None
    options: dict[str, Any]
    samples: list[Sample] = dataclasses.field(default_factory=list)
    skipped: str | None = None
    errors: list[str] = dataclasses.field(default_factory=list)  # failed measurements


@dataclasses.dataclass
class WorkloadResult:
    workload: Workload
    rows: list[Row]
    step_times: list[float]  # calibrated mean step time per repetition (sleep workloads)
    seconds: float
    notes: list[str] = dataclasses.field(default_factory=list)  # what prepare() found


Progress = Callable[[str], None]
_Measure = Callable[[int], Sample]  # seed -> one measurement


def run_workload(
    workload: Workload,
    configs: list[Config],
    *,
    reps: int,
    timing: Timing,
    account: CpuAccount,
    progress: Progress,
) -> WorkloadResult:
    started = time.monotonic()
    timing = workload.timing or timing
    plan: list[list[tuple[Row, _Measure | None]]] = []  # per case: rows in base order
    for case in workload.cases:
        entries: list[tuple[Row, _Measure | None]] = []
        if workload.floors:
            for floor in FLOORS:
                row = Row(case.key, case.n, floor.label, "floor", None, {})
                entries.append((row, _floor_measure(floor.run, timing, account)))
        for config in configs:
            if workload.key not in config["workloads"]:
                continue
            options = dict(config.get("options", {}))
            row = Row(
                case.key, case.n, config["label"], config["runner"], config.get("api"), options
            )
            skip = _skip_reason(workload, case, config)
            if skip is not None:
                row.skipped = skip
                entries.append((row, None))
            else:
                entries.append((row, _config_measure(config, case, timing, account)))
        if entries:  # a --rows filter may leave a case with none
            plan.append(entries)

    notes: list[str] = []
    if workload.prepare is not None and plan:
        notes.append(workload.prepare())
        progress(f"{workload.key} {notes[-1]}")
    step_times: list[float] = []
    for rep in range(reps):
        seed = 1000 * (rep + 1)  # the same seeds for every configuration in a repetition
        if workload.sleep is not None:
            mean_s, sigma = workload.sleep
            step_time = calibrate_sleep(mean_s, sigma, min(0.5, timing.budget), seed)
            step_times.append(step_time)
            progress(
                f"{workload.key} rep {rep + 1}/{reps}: mean step {step_time * 1e3:.3f} ms "
                f"(nominal {mean_s * 1e3:g} ms)"
            )
        elif workload.step_time is not None:
            step_times.append(workload.step_time)
        for entries in plan:
            shift = rep % len(entries)
            for row, measure in entries[shift:] + entries[:shift]:
                if measure is None:
                    continue
                try:
                    sample = measure(seed)
                except Exception as exc:  # report it and go on with the other rows
                    row.errors.append(f"{type(exc).__name__}: {exc}")
                    progress(f"{workload.key} {row.case} {row.label}: FAILED {row.errors[-1]}")
                    continue
                row.samples.append(sample)
                if row.options.get("mode") == "ray" or row.kind == "bare_ray":
                    # Ray's actor processes exit after the pool has closed, and their CPU
                    # time leaves this process tree's count with them: let that happen in
                    # a probe of its own, or the next row's window reads it as the CPU of
                    # other programs and is marked busy for nothing.
                    idle_probe(account, RAY_SETTLE_S)
                unit = "round trips/s" if workload.floors else "steps/s"
                progress(
                    f"{workload.key} rep {rep + 1}/{reps} {row.case:<14} {row.label:<46} "
                    f"{sample.rate:>12,.0f} {unit}"
                )
    rows = [row for entries in plan for row, _ in entries]
    return WorkloadResult(workload, rows, step_times, time.monotonic() - started, notes)


def measurements_per_rep(workload: Workload, configs: list[Config]) -> int:
    """How many measurements one repetition of ``workload`` takes (for the estimate)."""
    count = 0
    for case in workload.cases:
        count += len(FLOORS) if workload.floors else 0
        count += sum(
            workload.key in config["workloads"] and _skip_reason(workload, case, config) is None
            for config in configs
        )
    return count


def _floor_measure(
    run: Callable[[Timing, CpuAccount], Sample], timing: Timing, account: CpuAccount
) -> _Measure:
    def measure(seed: int) -> Sample:
        return run(timing, account)

    return measure


def _config_measure(config: Config, case: Case, timing: Timing, account: CpuAccount) -> _Measure:
    options = dict(config.get("options", {}))
    runner = config["runner"]

    def measure(seed: int) -> Sample:
        if case.hog:
            with cpu_hog():
                return run(seed)
        return run(seed)

    def run(seed: int) -> Sample:
        common = {"policy": case.policy, "seed": seed, "timing": timing, "account": account}
        if runner == "aioenv":
            api = config.get("api", "state")
            env = case.async_env if options.get("mode") == "async" else case.env
            return run_aioenv(env, case.n, api=api, **common, **options)
        if runner == "bare":
            return run_bare(case.env, case.n, **common, **options)
        if runner == "bare_ray":
            return run_bare_ray(case.env, case.n, num_cpus=_RAY["num_cpus"], **common, **options)
        if runner == "bare_tasks":
            assert case.awaited is not None
            return run_bare_tasks(case.n, case.awaited, spread=case.spread, **common)
        if runner == "rollout":
            return run_rollout_row(
                config["label"], case.env, case.n, seed=seed, timing=timing, account=account
            )
        if runner in ("lockstep", "limit"):
            policy = _lockstep_policy(case, seed)
            if runner == "limit":
                return run_limit(
                    case.env, case.n, policy, seed=seed, timing=timing, account=account
                )
            return run_lockstep(
                config["label"], case.env, case.n, policy, seed=seed, timing=timing, account=account
            )
        if runner == "pipelined":
            assert case.batch_policy is not None
            assert case.batch_size is not None
            return run_pipelined(
                config["label"],
                case.env,
                case.n,
                case.batch_size,
                case.batch_policy(seed),
                seed=seed,
                timing=timing,
                account=account,
            )
        if runner == "torchrl":
            return run_torchrl(config["label"], case.env, case.n, **common)
        kind: Literal["sync", "async"] = "sync" if runner == "gym_sync" else "async"
        return run_gym(kind, case.env, case.n, **common, **options)

    return measure


def _lockstep_policy(case: Case, seed: int) -> BatchPolicy:
    """The case's batched policy; on slices of ``batch_size`` envs where it has one."""
    policy: BatchPolicy = (case.batch_policy or Mlp)(seed)
    if case.batch_size is not None and case.batch_size < case.n:
        policy = OnParts(policy, case.n // case.batch_size)
    return policy


def _processes(config: Config, n: int) -> int:
    """How many child processes a configuration starts for ``n`` envs."""
    options = config.get("options", {})
    if config["runner"] in ("gym_async", "torchrl") or config["label"] == "gym AsyncVectorEnv":
        return n
    if config["runner"] == "bare" or (
        config["runner"] == "aioenv" and options.get("mode") == "process"
    ):
        per_process = int(options.get("envs_per_process", 1))
        per_process *= int(options.get("envs_per_worker", 1))
        return -(-n // per_process)
    return 0


def _skip_reason(workload: Workload, case: Case, config: Config) -> str | None:
    missing = [
        module
        for module in (*case.requires, *config.get("requires", ()))
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        hint = next((INSTALL_HINTS[module] for module in missing if module in INSTALL_HINTS), None)
        if hint is not None:
            return f"needs {', '.join(missing)}: {hint}"
        where = (
            " (installed on Linux with CPython 3.11 to 3.14, where EnvPool has wheels)"
            if "envpool" in missing
            else ""
        )
        return f"needs {', '.join(missing)}: pip install 'aioenv[bench]'{where}"
    per_worker = int(config.get("options", {}).get("envs_per_worker", 1))
    if per_worker > 1 and (case.n % per_worker or case.n < 2 * per_worker):
        return f"needs N a multiple of {per_worker} with at least two workers"
    if config.get("options", {}).get("mode") == "async" and case.async_env is None:
        return "no coroutine twin of this env"
    if config["runner"] == "bare_tasks" and case.awaited is None:
        return "no awaited step time"
    limit = workload.max_processes
    processes = _processes(config, case.n)
    if limit is not None and processes > limit:
        return f"would start {processes} processes (limit {limit} for {workload.key})"
    return None

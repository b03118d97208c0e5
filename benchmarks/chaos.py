"""A chaos run at scale: thousands of rollouts over a thousand envs that hang, crash and
wedge, with nothing left behind (``--short`` is the version CI runs).

The pool: ``--envs`` envs in all (default 1,000), of which ``--process-envs`` (50) are
process workers whose env starts a helper process at construction, as a sandbox would
(a ``sleep`` child), and the rest coroutine envs; every env's tool latency (each reset
and step) is lognormal with mean ``--latency-ms`` (50) and ``--sigma`` (0.5: its tail
stays far below the step deadline, so no healthy step ever meets it). Deadlines: steps
``--step-timeout`` (2 s), resets ``--reset-timeout`` (5 s); ``restart="on_failure"`` under
the default restart budget: a worker is given up only in a crash loop (the 11th failure
in a row with no progress between, under ``max_restarts=10``). An env here fails about
once per 14 requests, far more often than a real one, yet makes progress between its
faults, so the budget keeps every worker however long the run (a run fails if one is
given up), while a crash loop would use it up at once. ``--restart-window`` asks for the
rate rule instead (``max_restarts`` restarts within that many seconds).

The driver plays ``--rollouts`` rollouts (10,000) of ``--steps`` steps (20) through the
pool's public ``get_batch``/``send_action`` loop: each rollout starts with an explicit
reset (``autoreset="disabled"``), and a worker starts the next rollout as soon as its
last one ends. The driver injects the faults (seeded), so it knows each one and when it
started: ``--hang-rate`` of steps hang (5%: the env awaits, or sleeps, forever),
``--crash-rate`` crash (2%: a coroutine env raises; a process env's process kills
itself), ``--wedge-rate`` of resets wedge (1%: the reset never returns; only the resets
of live envs, those after a finished rollout, are picked, more often, since a reset after
a fault starts a new env under the start-up deadline; the first live reset always
wedges, so that every run has one). A step fault
cuts its rollout short (the step comes back truncated, marked restarted); a wedged
reset is answered by the new env's reset, and its rollout goes on. The new env is handed
the wedged reset's options, as every restarted env is: a wedge is the live env's (an
env wedges only a reset after its first), so the new one answers.

Three runs, each in a child process whose environment carries a marker that every
process of the run inherits (its process workers, their helpers, multiprocessing's
forkserver and resource tracker): a fault-free run, the chaos run, and the chaos run
again with the parent killed by SIGKILL once half its rollouts have ended. Checks (the
script exits non-zero when one fails):

1. every rollout ends, counted: finished, truncated by its budget (``--episode-timeout``,
   where the pool takes that option), or failed (cut short by a fault); no worker is
   given up (none is in a crash loop: the default budget must keep them all, see
   ``pool.removed`` at the end), and no restart comes without an injected fault;
2. every hang and wedge is answered at most ``--lateness`` (1 s) after its deadline,
   measured from the request's sending (the fault's start) to the pool's answer (a
   wedge's answer carries the new env's start-up and reset);
3. no process of the run is left, found by scanning ``/proc`` for the marker: after
   ``aclose`` (the run's own scan, bar Python's forkserver and resource tracker), once
   the run's process has exited, and after the parent's SIGKILL (within
   ``--kill-grace`` s: the children notice their parent is gone and end their process
   groups). The open-files limit is raised to its hard limit first (it says so);
4. throughput at least ``1 - --tolerance`` (90%) of what the faults cost by construction
   on top of the fault-free run of the same envs in the same invocation (not checked
   when a rollout ran out of its budget: the model has no cost for that). The fault-free
   run's rate is reported against the ideal rate (envs over mean latency), which a
   machine whose CPU cannot keep up with the envs does not reach: the model then takes
   a request's cost from a run held up by the CPU, and a chaos run whose workers spend
   much of their time waiting on faults (no CPU) may beat the model, which is no
   failure.

``--episode-timeout`` gives each rollout a budget where the pool takes that option (a
rollout it cuts short ends truncated, its reason ``"episode_timeout"``); by default none.

The throughput model. Throughput is taken over the busy window: from the first rollout's
start until the first worker finds no rollout left to start, a span in which every worker
is always busy on a request (the tail, when workers run out of rollouts, is left out).
In the fault-free run, ``N`` workers answer ``A0`` requests in ``W0`` seconds: one
request costs a worker ``c = N * W0 / A0`` seconds, loop overhead included. A fault costs
what its construction says, in place of that: a hang its step deadline ``Ds``; a crash
``c`` (it fails after its latency); a wedge its reset deadline ``Dr`` plus ``c`` (the new
env's reset answers it); and each fault's restart the cost ``r`` of rebuilding an env of
its kind, paid by the worker's next request. ``r`` is measured after the fault-free run's
window, on an otherwise idle pool: the mean latency of a reset just after an env failed,
less that of a reset just before, over many workers (a process worker's is that of a new
process and helper), and never below 0. So
a chaos run that answers ``H`` healthy requests, ``C`` crashes, and has ``h`` hangs,
``w`` wedges and ``R_k`` restarts of kind ``k`` in its window costs the workers::

    T = (H + C) * c + h * Ds + w * (Dr + c) + sum_k R_k * r_k + F

where ``F`` is the time the ``N`` requests still in flight at the window's end had spent
by then, each at most its cost above (a run whose faults take most of the workers' time
ends its window with many workers half-way through a hang). Its expected rate of answers
is ``(H + C + h + w) * N / T``, against the measured ``(H + C + h + w) / W``: their ratio
is ``T / (N * W)``, which must be at least ``1 - tolerance``. A pool that answered faults
late, restarted slowly, or lost time to the faulty workers would fall short of it.

    python benchmarks/chaos.py            # the full run: minutes
    python benchmarks/chaos.py --short    # 100 envs, 500 rollouts: under a minute
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

import aioenv
from aioenv.pool._options import POOL_OPTIONS

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests" / "faults")]
from soak import LoopStalls  # noqa: E402  (the soak's watch on the event loop)

#: The environment variable that marks every process of a run (inherited by each).
MARK = "AIOENV_CHAOS_RUN"
#: Step actions: what the driver asks of a step.
HEALTHY, HANG, CRASH = 0, 1, 2
FOREVER = 10**6  # seconds: a hang, cut short by the deadline
#: Python's own helpers, which live as long as the interpreter that started them.
#: Workers restarted to measure a restart's cost (``r``): process workers one after
#: another, coroutine workers in small groups.
RESTART_SAMPLES_PROCESS = 8
RESTART_SAMPLES_COROUTINE, RESTART_GROUP_COROUTINE = 200, 20

INTERPRETER_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


class ToolLatency:
    """A seeded lognormal latency with the given mean, in seconds."""

    def __init__(self, seed: int | None, mean_s: float, sigma: float) -> None:
        self.rng = random.Random(seed)
        self.mu, self.sigma = math.log(mean_s) - sigma**2 / 2, sigma

    def draw(self) -> float:
        return self.rng.lognormvariate(self.mu, self.sigma)


class AgentTask(gymnasium.Env[np.ndarray, int]):
    """A coroutine env whose resets and steps await a tool call; its step hangs or
    crashes when the action says so, its reset wedges when its options say so (any reset
    but its first: a restarted env, handed the same options, answers)."""

    observation_space = gymnasium.spaces.Box(0.0, np.inf, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(3)

    def __init__(self, steps: int, mean_s: float, sigma: float) -> None:
        self.steps, self.mean_s, self.sigma = steps, mean_s, sigma
        self.latency = ToolLatency(None, mean_s, sigma)
        self.t = 0
        self.resets = 0

    async def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self.latency = ToolLatency(seed, self.mean_s, self.sigma)
        self.resets += 1
        if options and options.get("wedge") and self.resets > 1:
            await asyncio.sleep(FOREVER)
        await asyncio.sleep(self.latency.draw())
        self.t = 0
        return np.zeros(1, np.float32), {}

    async def step(  # type: ignore[override]
        self, action: int
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        await asyncio.sleep(FOREVER if action == HANG else self.latency.draw())
        if action == CRASH:
            raise RuntimeError("the tool crashed")
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, self.t >= self.steps, False, {}


class SandboxTask(gymnasium.Env[np.ndarray, int]):
    """A process worker's env: starts a helper process, as a sandbox would; its tool
    calls block; a crash kills its own process."""

    observation_space = AgentTask.observation_space
    action_space = AgentTask.action_space

    def __init__(self, steps: int, mean_s: float, sigma: float) -> None:
        self.steps, self.mean_s, self.sigma = steps, mean_s, sigma
        self.latency = ToolLatency(None, mean_s, sigma)
        self.t = 0
        self.resets = 0
        self.helper = subprocess.Popen(["sleep", str(FOREVER)])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self.latency = ToolLatency(seed, self.mean_s, self.sigma)
        self.resets += 1
        wedge = options and options.get("wedge") and self.resets > 1
        time.sleep(FOREVER if wedge else self.latency.draw())
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        time.sleep(FOREVER if action == HANG else self.latency.draw())
        if action == CRASH:
            os.kill(os.getpid(), signal.SIGKILL)
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, self.t >= self.steps, False, {}

    def close(self) -> None:
        self.helper.kill()
        self.helper.wait()


# Processes of a run --------------------------------------------------------------------
def marked_processes(marker: str, skip_interpreter_helpers: bool = False) -> list[str]:
    """The processes (``pid command``) whose environment carries ``marker``, this one
    aside; zombies too (a process not yet reaped is not gone)."""
    needle = f"{MARK}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:  # gone, or not ours to read
            continue
        if needle not in environ.split(b"\0"):
            continue
        text = command.decode(errors="replace").strip() or "(zombie)"
        if skip_interpreter_helpers and any(name in text for name in INTERPRETER_HELPERS):
            continue
        found.append(f"{entry} {text}")
    return found


def wait_gone(marker: str, within: float) -> tuple[list[str], float]:
    """Wait up to ``within`` seconds for the run's processes to end: what is left, and
    how long it took."""
    started = time.monotonic()
    while (left := marked_processes(marker)) and time.monotonic() - started < within:
        time.sleep(0.05)
    return left, time.monotonic() - started


def raise_open_files_limit() -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft >= hard:
        return f"open-files limit {soft} (already the hard limit)"
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return f"open-files limit raised from {soft} to {hard}"


# One run (in its own process) ------------------------------------------------------------
@dataclasses.dataclass
class Pending:
    kind: str  # "reset", "step"
    fault: str | None  # None, "hang", "crash", "wedge"
    sent: float


class Driver:
    """Plays the rollouts through a pool, injecting the faults and counting everything."""

    def __init__(self, args: argparse.Namespace, faults: bool, kill_at: int | None) -> None:
        self.args = args
        self.faults = faults
        self.kill_at = kill_at
        self.rng = random.Random(args.seed)
        self.kinds = ["process"] * args.process_envs + ["coroutine"] * (
            args.envs - args.process_envs
        )
        self.counts: dict[str, int] = {}
        self.lateness: dict[str, float] = {"hang": 0.0, "wedge": 0.0, "crash": 0.0}
        self.violations: list[str] = []
        self.pending: dict[int, Pending] = {}  # by worker: its request in flight
        self.open: set[int] = set()  # workers whose rollout is open
        #: Workers whose last answer was a fault's: the new env's first answer is marked
        #: restarted too, and says why the old one was replaced.
        self.after_fault: set[int] = set()
        self.played: set[int] = set()  # workers whose env has answered a reset
        self.wedged = False
        #: The requests in flight when the busy window ended: (fault, seconds in flight).
        self.in_flight_at_end: list[tuple[str | None, float]] = []
        self.started = 0
        self.ended = 0
        self.window: tuple[float, float] | None = None
        self.window_start = 0.0
        finished = (1 - args.hang_rate - args.crash_rate) ** args.steps  # of rollouts
        self.wedge_rate_when_live = min(1.0, args.wedge_rate / finished)
        self.latency_sum: dict[str, float] = {}  # by kind of request
        self.window_cpu = 0.0  # this process's CPU time when the window ended
        self.late_sum: dict[str, float] = {"hang": 0.0, "wedge": 0.0, "crash": 0.0}
        self.last_progress = 0.0

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def pool(self) -> aioenv.WorkerPool[Any]:
        args = self.args
        env = (args.steps, args.latency_ms / 1000, args.sigma)
        sources = [
            (lambda: SandboxTask(*env)) if kind == "process" else (lambda: AgentTask(*env))
            for kind in self.kinds
        ]
        budget: dict[str, float] = {}
        if args.episode_timeout is not None:
            budget["episode_timeout"] = args.episode_timeout
        if args.restart_window is not None:  # the rate rule, else the default's crash loops
            budget["restart_window"] = args.restart_window
        return aioenv.make_pool(
            sources,
            mode=self.kinds,
            seed=args.seed,
            autoreset="disabled",
            step_timeout=args.step_timeout,
            reset_timeout=args.reset_timeout,
            restart="on_failure",
            **budget,
        )

    def send(self, pool: aioenv.WorkerPool[Any], worker_id: int, now: float) -> None:
        """The worker's next request: a step of its open rollout, else a new rollout's
        reset, else nothing (the first worker left idle ends the busy window)."""
        if worker_id not in self.open:
            if self.started >= self.args.rollouts:
                if self.window is None:
                    self.window = (self.window_start, now)
                    self.window_cpu = time.process_time()
                    self.in_flight_at_end = [(p.fault, now - p.sent) for p in self.pending.values()]
                return
            self.started += 1
            # Only a live env's reset can wedge under the reset deadline: after a fault,
            # the reset starts a new env, under the start-up deadline. So wedges go to
            # the resets after a finished rollout, often enough to make --wedge-rate of
            # all resets.
            live = worker_id not in self.after_fault and worker_id in self.played
            wedge = self.faults and live and self.rng.random() < self.wedge_rate_when_live
            wedge = wedge or (self.faults and live and not self.wedged)  # every run has one
            self.wedged = self.wedged or bool(wedge)
            self.pending[worker_id] = Pending("reset", "wedge" if wedge else None, now)
            reset = aioenv.Reset(options={"wedge": True}) if wedge else aioenv.RESET
            pool.send_action(reset, worker_id)
            return
        draw = self.rng.random() if self.faults else 1.0
        fault = "hang" if draw < self.args.hang_rate else None
        if fault is None and draw < self.args.hang_rate + self.args.crash_rate:
            fault = "crash"
        self.pending[worker_id] = Pending("step", fault, now)
        pool.send_action({None: HEALTHY, "hang": HANG, "crash": CRASH}[fault], worker_id)

    def answer(self, worker_id: int, state: aioenv.Step[Any], now: float) -> None:
        """Check and count one answer; end its rollout if it ended."""
        pending = self.pending.pop(worker_id)
        kind = self.kinds[worker_id]
        marker = state.info.get("aioenv", {})
        restarted = bool(marker.get("restarted"))
        reason = str(marker.get("reason", ""))
        latency = now - pending.sent
        in_window = self.window is None
        after_fault = worker_id in self.after_fault
        self.after_fault.discard(worker_id)
        what = pending.fault or (pending.kind + (" after a fault" if after_fault else ""))
        self.latency_sum[what] = self.latency_sum.get(what, 0.0) + latency
        self.count(f"latency:{what}")
        if pending.fault is not None:
            self.after_fault.add(worker_id)
            # How late: past the deadline for a hang or wedge, past the send for a crash.
            deadline = {"hang": self.args.step_timeout, "wedge": self.args.reset_timeout}
            late = latency - deadline.get(pending.fault, 0.0)
            self.lateness[pending.fault] = max(self.lateness[pending.fault], late)
            self.late_sum[pending.fault] += late
            if not restarted:
                self.violations.append(f"worker {worker_id}: its {pending.fault} not restarted")
            elif (
                pending.fault in deadline
                and "WorkerTimeout" not in reason
                and not after_fault
                and "episode_timeout" not in reason  # the rollout's budget came first
            ):
                self.violations.append(f"worker {worker_id}: its {pending.fault}: {reason}")
            if in_window:
                self.count(f"window:{pending.fault}")
                self.count(f"window:restart:{kind}")
            self.count(f"answered:{pending.fault}")
        elif restarted and not after_fault and "episode_timeout" not in reason:
            self.violations.append(f"worker {worker_id}: restarted without a fault: {reason}")
        elif in_window:
            self.count("window:healthy")
        if pending.kind == "reset":
            self.played.add(worker_id)
            self.open.add(worker_id)
        elif "episode_timeout" in reason and state.truncated:
            self.end(worker_id, "truncated by its budget")
        elif restarted:
            self.end(worker_id, "failed")
        elif state.terminated:
            self.end(worker_id, "finished")

    def end(self, worker_id: int, outcome: str) -> None:
        self.count(f"rollouts {outcome}")
        self.open.discard(worker_id)
        self.ended += 1

    async def run(self) -> dict[str, Any]:
        started = time.monotonic()
        stalls = LoopStalls()
        async with self.pool() as pool, stalls.watching():
            pool.reset()
            await pool.get_batch(min_size=len(self.kinds))  # every env built and reset
            startup = time.monotonic() - started
            self.window_start = now = time.monotonic()
            cpu_started = time.process_time()
            for worker_id in range(len(self.kinds)):
                self.send(pool, worker_id, now)
            while self.ended < self.args.rollouts:
                try:
                    batch = await pool.get_batch(timeout=self.args.reset_timeout * 4)
                except aioenv.WorkerError as error:
                    self.violations.append(f"worker {error.worker_id} given up: {error}")
                    if error.worker_id in self.pending:
                        del self.pending[error.worker_id]
                        self.end(error.worker_id, "failed")
                    continue
                except asyncio.TimeoutError:
                    self.violations.append(f"no answer in {self.args.reset_timeout * 4} s")
                    break
                now = time.monotonic()
                for state, worker_id in batch:
                    self.answer(worker_id, state, now)
                    self.send(pool, worker_id, now)
                self.progress(now)
            elapsed = time.monotonic() - self.window_start
            restart_costs = await self.restart_costs(pool) if not self.faults else {}
            restarts = pool.restarts
            for worker_id, error in getattr(pool, "removed", {}).items():  # no crash loop here
                self.violations.append(f"worker {worker_id} left the pool: {error}")
        closed_in = time.monotonic() - started - startup - elapsed
        window = self.window or (self.window_start, time.monotonic())
        window_cpu = (self.window_cpu or time.process_time()) - cpu_started
        return {
            "mean_latency": {
                what: total / self.counts[f"latency:{what}"]
                for what, total in sorted(self.latency_sum.items())
            },
            "longest_stall_s": stalls.longest,
            "stalls_over_100ms": stalls.over_100ms,
            "cpu_share": window_cpu / (window[1] - window[0]),
            "mean_lateness": {
                fault: total / max(self.counts.get(f"answered:{fault}", 0), 1)
                for fault, total in self.late_sum.items()
            },
            "counts": self.counts,
            "lateness": self.lateness,
            "violations": self.violations,
            "rollouts_started": self.started,
            "startup_s": startup,
            "elapsed_s": elapsed,
            "window_s": window[1] - window[0],
            "restarts": restarts,
            "restart_costs": restart_costs,
            "in_flight_at_end": self.in_flight_at_end,
            "close_s": closed_in,
            "left_after_close": marked_processes(self.args.marker, skip_interpreter_helpers=True),
        }

    def progress(self, now: float) -> None:
        if self.kill_at is not None and now - self.last_progress > 0.2:
            self.last_progress = now
            print(f"ended {self.ended}", flush=True)

    async def restart_costs(self, pool: aioenv.WorkerPool[Any]) -> dict[str, float]:
        """Per kind: how much longer a reset takes just after a crash than just before, on
        the otherwise idle pool, never below 0 (a restart saves no time). A reset's own
        latency is a lognormal draw (its standard deviation about half its mean), so a few
        one-off differences can come out tens of milliseconds off either way: the cost is
        the difference of two means over many workers, taken a few at a time (restarts
        come one here, one there in the run; hundreds at once would queue on the loop).
        Process workers, whose new processes compete for the cores, one at a time."""
        costs: dict[str, float] = {}
        for kind, most, together in (
            ("process", RESTART_SAMPLES_PROCESS, 1),
            ("coroutine", RESTART_SAMPLES_COROUTINE, RESTART_GROUP_COROUTINE),
        ):
            workers = [i for i, k in enumerate(self.kinds) if k == kind][:most]
            before: list[float] = []
            after: list[float] = []
            for start in range(0, len(workers), together):
                group = workers[start : start + together]
                before += await self.timed_together(pool, group, aioenv.RESET)
                await self.timed_together(pool, group, CRASH)
                after += await self.timed_together(pool, group, aioenv.RESET)
            costs[kind] = max(0.0, float(np.mean(after) - np.mean(before))) if workers else 0.0
        return costs

    async def timed_together(
        self, pool: aioenv.WorkerPool[Any], workers: list[int], action: Any
    ) -> list[float]:
        return list(await asyncio.gather(*(self.timed(pool, w, action) for w in workers)))

    @staticmethod
    async def timed(pool: aioenv.WorkerPool[Any], worker_id: int, action: Any) -> float:
        started = time.monotonic()
        pool.send_action(action, worker_id)
        await pool.get_state(worker_id=worker_id)
        return time.monotonic() - started


def run_child(args: argparse.Namespace) -> int:
    kill_at = args.rollouts // 2 if args.phase == "killed" else None
    driver = Driver(args, faults=args.phase != "clean", kill_at=kill_at)
    result = asyncio.run(driver.run())
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# The three runs, from the parent ---------------------------------------------------------
class Run:
    """One run in a process of its own, marked; killed if it outlives ``--run-timeout``.
    Its error output goes to a file, copied to ours when it ends: a process it leaked
    must not hold our own output open."""

    def __init__(self, args: argparse.Namespace, phase: str) -> None:
        self.marker = uuid.uuid4().hex
        command = [sys.executable, __file__, *sys.argv[1:], "--phase", phase]
        self.errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by wait)
        self.child = subprocess.Popen(
            [*command, "--marker", self.marker],
            env={**os.environ, MARK: self.marker},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
        )
        watchdog = threading.Timer(args.run_timeout, self.child.kill)
        watchdog.daemon = True
        watchdog.start()

    def read_until(self, done: Callable[[str], bool]) -> str | None:
        """The first line of its output for which ``done`` holds (None at the end of its
        output). Reads no further: a process the run leaked may hold the pipe open."""
        assert self.child.stdout is not None
        for line in self.child.stdout:
            if done(line):
                return line
        return None

    def wait(self) -> int:
        returncode = self.child.wait()
        self.errors.seek(0)
        sys.stderr.write(self.errors.read())
        self.errors.close()
        return returncode


def finish_run(args: argparse.Namespace, phase: str) -> tuple[dict[str, Any], list[str]]:
    """Run ``phase`` to its end: its result, and its problems."""
    run = Run(args, phase)
    line = run.read_until(lambda line: line.startswith("RESULT "))
    returncode = run.wait()
    problems = []
    if line is None or returncode != 0:
        problems.append(f"{phase}: the run exited with {returncode}, without its result")
    result: dict[str, Any] = json.loads(line[len("RESULT ") :]) if line else {}
    left, _ = wait_gone(run.marker, args.kill_grace)
    problems += [f"{phase}: left after the run's process exited: {p}" for p in left]
    problems += [f"{phase}: left after close: {p}" for p in result.get("left_after_close", [])]
    problems += [f"{phase}: {v}" for v in result.get("violations", [])[:20]]
    return result, problems


def killed_run(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """The chaos run, killed by SIGKILL once half its rollouts ended: what was running
    then, what was left after ``--kill-grace`` seconds, and how long it took to go."""
    run = Run(args, "killed")
    half = args.rollouts // 2
    line = run.read_until(lambda line: line.startswith("ended ") and int(line[6:]) >= half)
    ended = int(line[6:]) if line else 0
    running = marked_processes(run.marker)
    run.child.kill()
    run.wait()
    left, took = wait_gone(run.marker, args.kill_grace)
    problems = [f"killed: left {args.kill_grace:g} s after the SIGKILL: {p}" for p in left]
    if ended < half:
        problems.append(f"killed: the run ended before half its rollouts ({ended})")
    helpers = sum(" sleep " in f" {p} " for p in running)
    if helpers < args.process_envs // 2:
        problems.append(f"killed: only {helpers} helpers were running at the kill")
    return {
        "ended": ended,
        "running": len(running),
        "helpers": helpers,
        "gone_in_s": took,
    }, problems


def expected_ratio(
    args: argparse.Namespace, clean: dict[str, Any], chaos: dict[str, Any]
) -> tuple[float, float]:
    """The chaos run's measured rate of answers in its busy window, and the rate its
    faults allow by construction (see the module's docstring)."""
    n = args.envs
    cost = n * clean["window_s"] / clean["counts"]["window:healthy"]
    counts = chaos["counts"]
    healthy, crashes = counts.get("window:healthy", 0), counts.get("window:crash", 0)
    hangs, wedges = counts.get("window:hang", 0), counts.get("window:wedge", 0)
    restarts = sum(
        counts.get(f"window:restart:{kind}", 0) * clean["restart_costs"][kind]
        for kind in ("process", "coroutine")
    )
    worker_time = (
        (healthy + crashes) * cost
        + hangs * args.step_timeout
        + wedges * (args.reset_timeout + cost)
        + restarts
    )
    # The requests in flight at the window's end took their time up to it, at most what
    # they cost by construction.
    costs = {
        None: cost,
        "crash": cost,
        "hang": args.step_timeout,
        "wedge": args.reset_timeout + cost,
    }
    worker_time += sum(min(spent, costs[fault]) for fault, spent in chaos["in_flight_at_end"])
    answers = healthy + crashes + hangs + wedges
    return answers / chaos["window_s"], answers * n / worker_time


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--short", action="store_true", help="100 envs (5 process), 500 rollouts (for CI)")
    add("--envs", type=int, default=1000, help="envs in all (1000)")
    add("--process-envs", type=int, default=50, help="of them process workers (50)")
    add("--rollouts", type=int, default=10_000, help="rollouts to play (10000)")
    add("--steps", type=int, default=20, help="steps of a rollout (20)")
    add("--latency-ms", type=float, default=50.0, help="mean tool latency (50)")
    add("--sigma", type=float, default=0.5, help="the latency's lognormal sigma (0.5)")
    add("--step-timeout", type=float, default=2.0)
    add("--reset-timeout", type=float, default=5.0)
    add(
        "--restart-window",
        type=float,
        default=None,
        help="the rate rule: max_restarts=10 within it (default: none, the crash-loop rule)",
    )
    add("--episode-timeout", type=float, default=None, help="a rollout's budget, if supported")
    add("--hang-rate", type=float, default=0.05)
    add("--crash-rate", type=float, default=0.02)
    add("--wedge-rate", type=float, default=0.01)
    add("--lateness", type=float, default=1.0, help="seconds a fault's answer may be late (1)")
    add("--tolerance", type=float, default=0.10, help="throughput against the model (0.10)")
    add("--kill-grace", type=float, default=10.0, help="seconds for the run's processes to go")
    add("--run-timeout", type=float, default=1800.0, help="seconds a run may take (1800)")
    add("--seed", type=int, default=0)
    add("--phase", choices=("clean", "chaos", "killed"), help=argparse.SUPPRESS)
    add("--marker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.short:
        args.envs, args.process_envs, args.rollouts = 100, 5, 500
    if args.episode_timeout is not None and "episode_timeout" not in POOL_OPTIONS:
        parser.error("--episode-timeout: this aioenv's pools have no episode_timeout")
    if not 0 <= args.process_envs <= args.envs:
        parser.error("--process-envs must be between 0 and --envs")
    return args


def main() -> int:
    args = parse()
    if args.phase is not None:
        return run_child(args)
    print(
        f"chaos: {args.envs} envs ({args.process_envs} process workers with a helper each), "
        f"{args.rollouts} rollouts of {args.steps} steps; {raise_open_files_limit()}",
        flush=True,
    )
    clean, problems = finish_run(args, "clean")
    chaos, more = finish_run(args, "chaos")
    problems += more
    killed, more = killed_run(args)
    problems += more
    rows: list[tuple[str, Any]] = []
    if clean.get("counts") and chaos.get("counts"):
        counts = chaos["counts"]
        outcomes = {k: v for k, v in counts.items() if k.startswith("rollouts ")}
        if sum(outcomes.values()) != args.rollouts or chaos["rollouts_started"] != args.rollouts:
            problems.append(f"chaos: {outcomes} of {args.rollouts} rollouts")
        for fault in ("hang", "crash", "wedge"):
            if not counts.get(f"answered:{fault}"):
                problems.append(f"chaos: no {fault} was injected and answered")
        for fault in ("hang", "wedge"):
            if chaos["lateness"][fault] > args.lateness:
                problems.append(
                    f"chaos: a {fault} answered {chaos['lateness'][fault]:.2f} s past its deadline"
                )
        measured, expected = expected_ratio(args, clean, chaos)
        clean_rate = clean["counts"]["window:healthy"] / clean["window_s"]
        ideal = args.envs / (args.latency_ms / 1000)
        budget_ends = outcomes.get("rollouts truncated by its budget", 0)
        if budget_ends:  # the model has no cost for them
            print(f"chaos: {budget_ends} rollouts ran out of budget: no throughput check")
        elif measured < (1 - args.tolerance) * expected:
            problems.append(
                f"chaos: {measured:.0f} answers/s, {measured / expected:.0%} of the "
                f"{expected:.0f}/s its faults allow on top of the fault-free run"
            )
        rows += [
            (
                "fault-free: answers/s in the busy window (ideal; share)",
                f"{clean_rate:.0f} ({ideal:.0f}; {clean_rate / ideal:.0%})",
            ),
            ("fault-free: the run's own CPU use in the window", f"{clean['cpu_share']:.0%}"),
            (
                "fault-free: start-up, run, close",
                _seconds(clean, "startup_s", "elapsed_s", "close_s"),
            ),
            (
                "restart cost (process, coroutine)",
                f"{clean['restart_costs']['process'] * 1000:.0f} ms, "
                f"{clean['restart_costs']['coroutine'] * 1000:.1f} ms",
            ),
            ("chaos: start-up, run, close", _seconds(chaos, "startup_s", "elapsed_s", "close_s")),
            *[(f"chaos: {name}", n) for name, n in sorted(outcomes.items())],
            *[
                (f"chaos: {faults} injected and answered", counts.get(f"answered:{fault}", 0))
                for fault, faults in (("hang", "hangs"), ("crash", "crashes"), ("wedge", "wedges"))
            ],
            ("chaos: restarts", chaos["restarts"]),
            *[
                (f"chaos: latest {fault} past its deadline", f"{chaos['lateness'][fault]:.3f} s")
                for fault in ("hang", "wedge")
            ],
            *[
                (
                    f"chaos: {fault} past its deadline, mean",
                    f"{chaos['mean_lateness'][fault]:.3f} s",
                )
                for fault in ("hang", "wedge")
            ],
            ("chaos: the run's own CPU use in the window", f"{chaos['cpu_share']:.0%}"),
            (
                "chaos: the event loop's longest stall (stalls over 100 ms)",
                f"{chaos['longest_stall_s'] * 1000:.0f} ms ({chaos['stalls_over_100ms']})",
            ),
            *[
                (f"{phase}: mean latency of a {what}", f"{seconds * 1000:.0f} ms")
                for phase, result in (("fault-free", clean), ("chaos", chaos))
                for what, seconds in result["mean_latency"].items()
            ],
            ("chaos: answers/s in the busy window", f"{measured:.0f}"),
            ("chaos: answers/s its faults allow (model)", f"{expected:.0f}"),
            ("chaos: measured / model", f"{measured / expected:.3f}"),
            ("chaos: processes left after close", len(chaos["left_after_close"])),
        ]
    rows += [
        ("killed: rollouts ended at the SIGKILL", killed["ended"]),
        (
            "killed: processes of the run then (helpers)",
            f"{killed['running']} ({killed['helpers']})",
        ),
        ("killed: all gone after", f"{killed['gone_in_s']:.2f} s"),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"\n| {'what':<{width}} | value |\n|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    if problems:
        print(f"\nFAILED ({len(problems)}):", *problems[:40], sep="\n  ")
        return 1
    print("\nevery check passed")
    return 0


def _seconds(result: dict[str, Any], *keys: str) -> str:
    return ", ".join(f"{result[key]:.1f} s" for key in keys)


if __name__ == "__main__":
    sys.exit(main())

"""A seeded random fault-injection soak over every worker kind and both faces (``make soak``).

The pool face: an ``AsyncWorkerPool`` of every worker kind and arrangement (process
workers with shared memory, two sharing a child, one stepping a group of envs; threads;
a sync worker; a coroutine env; a Ray actor, and two sharing one where ray imports),
restarts on. The vector face, in a thread of its own: an ``AioVectorEnv`` with one env in
each worker kind, and one of grouped process workers, restarts off. Every action carries
an id that the env echoes, so each state is checked against the action that asked for it.

Faults: each worker goes through every fault its kind can suffer (env exceptions,
garbage, failing resets, deaths by exit/SIGKILL/SIGSEGV, hangs, steps past the deadline,
slow steps that are no fault), one every ``--interval`` seconds or so, in a shuffled
order, beside env exceptions at random (``--fault-rate`` per step). The invariants,
checked continuously: every healthy step answered exactly once by its own state; every
fault answered by a restart (the vector env: by the error the fault stands for); no
worker of the pool given up (it runs the default restart budget, which gives a worker up
only in a crash loop, while every worker here makes progress between its faults); nothing
hangs; and afterwards no process, thread, file descriptor, shared-memory file or Ray actor
is left. The run must also prove itself: each fault of each worker kind that can suffer
it, restarts and checked states at least a number that grows with ``--seconds``, else it
fails saying which count fell short. It prints the event loop's longest stall and the
Ray calls made on an event loop's thread (the longest, and how many took over
:data:`RAY_CALL_LIMIT`): there must be none but a pool's read of the cluster's free
resources as it is made (aioenv makes the others in threads of its own). Exits
non-zero on any violation or shortfall.

    python tests/faults/soak.py --seconds 600 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import gc
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import gymnasium
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import faulty_env  # noqa: E402
from faulty_env import AsyncFaultyEnv, FaultyEnv  # noqa: E402
from leaks import memory_files, new_fds, open_fds  # noqa: E402
from support import wait_until, worker_processes, worker_threads  # noqa: E402

import aioenv  # noqa: E402
from aioenv.core._environment import VectorSource  # noqa: E402

cloudpickle.register_pickle_by_value(faulty_env)

#: The pool's workers, by arrangement: how many of each (``*_hosted``: two workers
#: sharing one child process or Ray actor; ``grouped``: one worker stepping GROUP envs).
ARRANGEMENTS = {
    "process": 1,
    "process_hosted": 2,
    "grouped": 1,
    "thread": 2,
    "sync": 1,
    "coroutine": 1,
    "ray": 1,
    "ray_hosted": 2,
}
#: Envs a ``grouped`` worker steps (one process, one message per step for all of them).
GROUP = 3
#: Long enough for a step on two busy cores, short enough for many faults.
STEP_TIMEOUT = 1.0
#: Kinds with deadlines of their own. A Ray actor's step crosses Ray's scheduler and
#: object store: on two busy cores a healthy one may take longer than STEP_TIMEOUT. A
#: coroutine env's step runs on the event loop, which a sync worker's slow step (and any
#: busy core) holds up for a while.
STEP_TIMEOUTS = {"ray": 3.0, "coroutine": 2.0}
RAY_STEP_TIMEOUT = STEP_TIMEOUTS["ray"]
HANG_LIMIT = 30.0  # a request unanswered this long is a hang
#: How long after a fault that ended a shared host its other workers may still be told.
SIBLING_SLACK = 10.0
#: The Ray calls on an event loop's thread that took longer are counted (not a violation:
#: on busy cores any call may wait that long for a core).
RAY_CALL_LIMIT = 0.05

IN_PROCESS = ("raise", "garbage", "reset_raise", "slow")
DEATHS = ("exit", "sigkill", "sigsegv")
#: The faults each worker kind can suffer: a thread cannot be killed (its hang is a step
#: past the deadline, abandoned), a sync worker's env runs on the event loop itself.
FAULTS_OF_KIND: dict[str, tuple[str, ...]] = {
    "process": (*IN_PROCESS, *DEATHS, "hang", "past_deadline"),
    "ray": (*IN_PROCESS, *DEATHS, "hang", "past_deadline"),
    "thread": (*IN_PROCESS, "past_deadline"),
    "coroutine": (*IN_PROCESS, "hang", "past_deadline"),
    "sync": IN_PROCESS,
}
#: What a restart's reason names for each fault.
RESTART_REASONS = {
    "raise": "EnvError",
    "garbage": "EnvError",
    "reset_raise": "EnvError",
    **dict.fromkeys(DEATHS, "WorkerDied"),
    "hang": "WorkerTimeout",
    "past_deadline": "WorkerTimeout",
}


def restart_reasons(kind: str, fault: str) -> tuple[str, ...]:
    """The errors a restart after ``fault`` may name: Ray may notice a killed actor's
    death only after the step's deadline (seconds, on busy cores)."""
    if kind == "ray" and fault in DEATHS:
        return ("WorkerDied", "WorkerTimeout")
    return (RESTART_REASONS[fault],)


#: Faults that end the env's process (or, for a host of several workers, every env in it).
KILLING = {*DEATHS, "hang", "past_deadline"}
#: A worker's scheduled faults come about once per ``interval + RECOVERY[kind]`` seconds
#: (a Ray actor takes seconds to replace). Asked of a run: a third (MARGIN) of what that
#: schedule gives, at least one, of a kind's faults together, and each fault's share of
#: that (so a short run asks for each fault only where it comes several times).
RECOVERY = {"process": 0.5, "ray": 7.0, "thread": 0.2, "coroutine": 0.2, "sync": 0.1}
MARGIN = 3.0
#: Checked states asked of each worker of a kind per second: a fraction of what two cores
#: busy with everything else manage (a Ray actor waits seconds for each replacement).
STATES_PER_SECOND = {"process": 3.0, "thread": 5.0, "sync": 100.0, "coroutine": 3.0, "ray": 0.1}
#: Checked states asked of each vector env per second.
VECTOR_STATES_PER_SECOND = {"mixed": 10.0, "grouped": 10.0, "ray": 0.5}


def kind_of(arrangement: str) -> str:
    return {"process_hosted": "process", "grouped": "process", "ray_hosted": "ray"}.get(
        arrangement, arrangement
    )


class Soak:
    """The pool face: sends, injects, checks, counts."""

    def __init__(self, seed: int, fault_rate: float, interval: float, arrangements: list[str]):
        self.rng = np.random.default_rng(seed)
        self.fault_rate = fault_rate
        self.interval = interval
        self.counts: collections.Counter[str] = collections.Counter()
        self.violations: list[str] = []
        self.expect: dict[int, tuple[Any, str | None, float]] = {}  # id, fault, sent at
        self.t: dict[tuple[int, int], int] = {}
        self.armed_reset_fault: set[int] = set()
        #: Workers whose last state ended an episode cut short by a failure: their next
        #: state is the new env's reset, whatever was asked.
        self.cut: set[int] = set()
        self.next_id = 0
        self.arrangement: list[str] = []  # by worker id
        self.siblings: dict[int, list[int]] = {}  # workers sharing a child or an actor
        #: When each worker's last fault that ends its host was answered (inf until it
        #: is): the workers sharing that host restart too.
        self.killed: dict[int, float] = {}
        self.cycle: dict[int, list[str]] = {}
        self.due: dict[int, float] = {}
        self.pending: set[int] = set()  # workers whose scheduled fault is not answered yet
        #: Workers whose env was restarted and has answered no healthy step since: their
        #: next scheduled fault waits for one, so that every env makes progress between
        #: its faults, as a flaky env does (back-to-back faults with none between are a
        #: crash loop, which the default restart budget gives up).
        self.fresh: set[int] = set()
        self.arrangements = arrangements
        self.stalls = LoopStalls()

    # Building ---------------------------------------------------------------------------
    def workers(self) -> list[aioenv.Worker[Any]]:
        workers: list[aioenv.Worker[Any]] = []
        for arrangement in self.arrangements:
            for _ in range(ARRANGEMENTS[arrangement] if "hosted" not in arrangement else 1):
                made = self.build(arrangement)
                ids = list(range(len(workers), len(workers) + len(made)))
                for worker_id in ids:
                    self.siblings[worker_id] = [i for i in ids if i != worker_id]
                workers += made
                self.arrangement += [arrangement] * len(made)
        return workers

    def build(self, arrangement: str) -> list[aioenv.Worker[Any]]:
        seed = int(self.rng.integers(2**31))
        if arrangement == "process":  # every observation in shared memory, however small
            return [aioenv.ProcessWorker(FaultyEnv, seed=seed, shared_memory=True)]
        if arrangement == "process_hosted":
            return list(aioenv.ProcessWorker.hosted(FaultyEnv, [seed, seed + 1], 2))
        if arrangement == "grouped":
            return [aioenv.ProcessWorker(VectorSource((FaultyEnv,) * GROUP), seed=seed)]
        if arrangement == "thread":
            return [aioenv.ThreadWorker(FaultyEnv, seed=seed)]
        if arrangement == "coroutine":
            return [
                aioenv.AsyncEnvWorker(
                    AsyncFaultyEnv, seed=seed, step_timeout=STEP_TIMEOUTS["coroutine"]
                )
            ]
        if arrangement == "sync":
            return [aioenv.SyncWorker(FaultyEnv, seed=seed)]
        options = {"num_cpus": 0, "step_timeout": RAY_STEP_TIMEOUT}
        if arrangement == "ray":
            return [aioenv.RayWorker(FaultyEnv, seed=seed, **options)]
        return list(aioenv.RayWorker.hosted(FaultyEnv, [seed, seed + 1], 2, **options))

    # Choosing ---------------------------------------------------------------------------
    def choose(self, worker_id: int, done: bool, now: float) -> tuple[Any, str | None]:
        if done or worker_id in self.armed_reset_fault:
            return aioenv.RESET, "reset_raise" if worker_id in self.armed_reset_fault else None
        action, fault = self._action(worker_id, now)
        if self.arrangement[worker_id] != "grouped":
            return action, fault
        rest = [{"id": self._new_id()} for _ in range(GROUP - 1)]
        return [action, *rest], fault  # a fault rides on the group's first env only

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _scheduled(self, worker_id: int, now: float) -> str | None:
        """The worker's next fault in its shuffled cycle through its kind's faults, once
        its time has come (measured from its last recovery) and its env made progress
        since its last restart."""
        due = self.due.setdefault(worker_id, now + self._gap())
        if now < due or worker_id in self.fresh:
            return None
        if not self.cycle.get(worker_id):
            faults = list(FAULTS_OF_KIND[kind_of(self.arrangement[worker_id])])
            self.cycle[worker_id] = [faults[i] for i in self.rng.permutation(len(faults))]
        self.due[worker_id] = math.inf  # until the fault is answered
        self.pending.add(worker_id)
        return self.cycle[worker_id].pop()

    def _gap(self) -> float:
        return float(self.interval * self.rng.uniform(0.5, 1.5))

    def _action(self, worker_id: int, now: float) -> tuple[dict[str, Any], str | None]:
        action: dict[str, Any] = {"id": self._new_id()}
        fault = self._scheduled(worker_id, now)
        if fault is None and self.rng.random() < self.fault_rate:
            fault = "raise"
        if fault is None:
            return action, None
        kind = kind_of(self.arrangement[worker_id])
        self.counts[f"sent:{kind}:{fault}"] += 1
        self.counts[f"sent:{kind}"] += 1
        if fault == "reset_raise":
            action["arm_reset_fault"] = "raise"
            self.armed_reset_fault.add(worker_id)
            return action, None  # this step is healthy; the next reset fails
        if fault == "past_deadline":
            action.update(fault="sleep", arg=STEP_TIMEOUTS.get(kind, STEP_TIMEOUT) * 2)
        elif fault == "slow":
            action.update(fault="sleep", arg=STEP_TIMEOUT / 5)
        else:
            action["fault"] = fault
        if fault in KILLING:
            self.killed[worker_id] = math.inf  # until it is answered
        return action, fault

    # Checking ---------------------------------------------------------------------------
    def check(self, worker_id: int, state: Any, now: float) -> None:
        if worker_id not in self.expect:
            self.violations.append(f"worker {worker_id}: a state nobody asked for (duplicate)")
            return
        action, fault, _ = self.expect.pop(worker_id)
        if isinstance(state, aioenv.BatchStep):  # a group: one row per env
            rows = [(state.observations[r], state.infos.get(r, {})) for r in range(len(state))]
            actions = action if isinstance(action, list) else [action] * len(rows)
        else:
            rows, actions = [(state.observation, state.info)], [action]
        marker = rows[0][1].get("aioenv", {})
        restarted = all(info.get("aioenv", {}).get("restarted", False) for _, info in rows)
        # A failed step ends its episode truncated, at its last observation; the new env's
        # reset answers the next request.
        cut = restarted and bool(np.all(state.truncated))
        due = worker_id in self.cut
        self.cut.discard(worker_id)
        if cut:
            self.cut.add(worker_id)
        reason = str(marker.get("reason"))
        arrangement = self.arrangement[worker_id]
        kind = kind_of(arrangement)
        must_restart = fault not in (None, "slow")
        # A fault that ends a host shared by several workers restarts each of them, for
        # its death or for a step that waited behind the hung one past its deadline
        # (whose timeout may end the host before the faulty worker's own does): while
        # the fault is unanswered, or shortly after.
        excused = (
            restarted
            and any(name in reason for name in ("WorkerDied", "WorkerTimeout"))
            and bool(self.siblings[worker_id])
            and (
                fault in KILLING
                or any(
                    now - self.killed.get(s, -math.inf) < SIBLING_SLACK
                    for s in self.siblings[worker_id]
                )
            )
        )
        if fault in KILLING:
            self.killed[worker_id] = now  # answered
        if due and restarted and not cut:
            pass  # the new env's reset, after the episode its failure cut short
        elif must_restart and restarted and any(r in reason for r in restart_reasons(kind, fault)):
            self.counts[f"answered:{kind}:{fault}"] += 1
            self.counts[f"answered:{kind}"] += 1
        elif fault == "slow" and not restarted:
            self.counts[f"answered:{kind}:slow"] += 1
            self.counts[f"answered:{kind}"] += 1
        elif not restarted and not must_restart:
            pass  # a healthy step
        elif excused:
            self.counts["sibling restarts"] += 1
        elif restarted != must_restart:
            what = (
                f"restarted without a fault ({reason})"
                if restarted
                else f"no restart after {fault}"
            )
            self.violations.append(f"worker {worker_id} ({arrangement}): {what}")
            self.counts["wrong"] += 1
        else:
            self.violations.append(
                f"worker {worker_id} ({arrangement}): restarted after {fault} for another "
                f"reason ({reason})"
            )
            self.counts["wrong"] += 1
        if restarted:
            self.fresh.add(worker_id)
        else:
            self.fresh.discard(worker_id)  # a healthy step or reset: progress
        if restarted and not due:  # a cut-short step, or a reset answering a failed reset
            self.counts["restarts seen"] += 1
            self.counts[f"restarts:{arrangement}"] += 1
            self.armed_reset_fault.discard(worker_id)
        if worker_id in self.pending and worker_id not in self.armed_reset_fault:
            self.pending.discard(worker_id)  # its scheduled fault is answered: the next
            self.due[worker_id] = now + self._gap()  # comes after a gap
        for row, ((observation, _), asked) in enumerate(zip(rows, actions, strict=True)):
            key = (worker_id, row)
            if cut:
                pass  # the last observation again
            elif asked is aioenv.RESET or restarted:
                self.t[key] = 0
            else:
                self.t[key] = self.t.get(key, 0) + 1
                if observation[1] != asked["id"]:
                    self.violations.append(
                        f"worker {worker_id} env {row}: state of action {observation[1]:.0f} "
                        f"answered action {asked['id']} (stale or lost)"
                    )
                    self.counts["wrong"] += 1
            if observation[0] != self.t[key]:
                self.violations.append(
                    f"worker {worker_id} env {row}: step count skipped (lost state)"
                )
                self.counts["wrong"] += 1
            self.counts["states"] += 1
            self.counts[f"states:{self.arrangement[worker_id]}"] += 1

    # Running ----------------------------------------------------------------------------
    async def run(self, seconds: float) -> None:
        pool = aioenv.AsyncWorkerPool(
            self.workers(),
            step_timeout=STEP_TIMEOUT,
            start_timeout=60.0,
            restart="on_failure",  # under the default restart budget: see the docstring
            cleanup_time=2.0,
        )
        async with pool, self.stalls.watching():
            for worker_id in range(len(pool)):
                self.expect[worker_id] = (aioenv.RESET, None, time.monotonic())
            pool.reset()
            deadline = time.monotonic() + seconds
            last_report = time.monotonic()
            while self.expect:
                try:
                    result = await pool.get_state(timeout=1.0)
                except aioenv.WorkerError as error:  # a worker given up: its error, once
                    self.violations.append(
                        f"worker {error.worker_id} given up by the default restart budget "
                        f"(no crash loop here): {error!r}"
                    )
                    self.expect.pop(error.worker_id, None)  # type: ignore[arg-type]
                    continue
                now = time.monotonic()
                for worker_id, (_, fault, sent) in self.expect.items():
                    if now - sent > HANG_LIMIT:
                        self.violations.append(
                            f"worker {worker_id}: no answer in {HANG_LIMIT} s ({fault})"
                        )
                        self.counts["hangs"] += 1
                        return
                if now - last_report > 10:
                    last_report = now
                    states = ", ".join(
                        f"{a} {self.counts['states:' + a]}" for a in self.arrangements
                    )
                    print(
                        f"  {now - deadline + seconds:6.0f} s: {self.counts['states']} states "
                        f"({states}), {pool.restarts} restarts, "
                        f"{len(worker_processes())} worker processes",
                        flush=True,
                    )
                    children = sum(kind_of(a) == "process" for a in self.arrangement)
                    # Per process worker: its child and the child's keeper, twice over
                    # while a restart's new child starts as the old one ends.
                    if len(worker_processes()) > 4 * children + 4:
                        self.violations.append("worker processes pile up (not reaped)")
                if result is None:
                    continue
                step, worker_id = result
                self.check(worker_id, step, now)
                if now >= deadline:
                    continue  # wind down: take every state still owed, send nothing new
                done = bool(np.any(step.dones)) if isinstance(step, aioenv.BatchStep) else step.done
                action, fault = self.choose(worker_id, done, now)
                self.expect[worker_id] = (action, fault, now)
                pool.send_action(action, worker_id)
            self.counts["pool restarts"] = pool.restarts
            self.counts["pool failures"] = pool.failures


class LoopStalls:
    """How late the event loop wakes a task that sleeps a few milliseconds at a time: the
    longest stall, and how many exceeded 100 ms (a sync worker's slow step stalls it by
    design, STEP_TIMEOUT / 5)."""

    TICK = 0.005

    def __init__(self) -> None:
        self.longest = 0.0
        self.over_100ms = 0

    @contextlib.asynccontextmanager
    async def watching(self) -> Any:
        task = asyncio.create_task(self._watch())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.TICK)
            late = time.monotonic() - before - self.TICK
            self.longest = max(self.longest, late)
            self.over_100ms += late > 0.1


class RayCalls:
    """The Ray calls made on a thread running an event loop and how long each took, by
    call: Ray's module functions and the ``.remote()`` of actor classes and actor methods.
    None may be made there: each is a violation (aioenv makes them in threads of its own;
    ``ray.init``, made once where a pool first needs it, is not watched)."""

    FUNCTIONS = ("kill", "get", "wait", "put", "available_resources", "cancel")
    OFF_THE_LOOP = frozenset(
        (
            "creating an actor (ActorClass._remote)",
            "calling an actor (ActorMethod._remote)",
            *(f"ray.{name}" for name in FUNCTIONS),
        )
    )

    def __init__(self) -> None:
        self.longest: dict[str, float] = collections.defaultdict(float)
        self.over_limit: collections.Counter[str] = collections.Counter()
        self.made: collections.Counter[str] = collections.Counter()
        self.calls = 0

    def install(self) -> None:
        import ray
        import ray.actor

        for name in self.FUNCTIONS:
            setattr(ray, name, self._timed(f"ray.{name}", getattr(ray, name)))
        ray.actor.ActorClass._remote = self._timed(  # type: ignore[method-assign]
            "creating an actor (ActorClass._remote)", ray.actor.ActorClass._remote
        )
        ray.actor.ActorMethod._remote = self._timed(  # type: ignore[method-assign]
            "calling an actor (ActorMethod._remote)", ray.actor.ActorMethod._remote
        )

    def _timed(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(call)
        def timed(*args: Any, **kwargs: Any) -> Any:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return call(*args, **kwargs)  # not on an event loop's thread
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                took = time.perf_counter() - started
                self.calls += 1
                self.made[name] += 1
                self.longest[name] = max(self.longest[name], took)
                self.over_limit[name] += took > RAY_CALL_LIMIT

        return timed

    def slowest(self) -> tuple[str, float]:
        if not self.longest:
            return "none", 0.0
        name = max(self.longest, key=self.longest.__getitem__)
        return name, self.longest[name]


# The vector face ------------------------------------------------------------------------
#: The faults each kind can suffer behind a vector env (restarts off: the error comes back).
VECTOR_FAULTS: dict[str, tuple[str, ...]] = {
    "process": ("raise", "garbage", *DEATHS, "hang"),
    "ray": ("raise", "garbage", *DEATHS, "hang"),
    "thread": ("raise", "garbage", "past_deadline"),
    "coroutine": ("raise", "garbage", "hang"),
    "sync": ("raise", "garbage"),
}
#: What a fault comes back as from the vector env's ``step``.
VECTOR_ERRORS: dict[str, type[BaseException] | tuple[type[BaseException], ...]] = {
    "raise": RuntimeError,  # the env's own exception
    "garbage": TypeError,  # aioenv's own, naming the env's step: not a 5-tuple
    **dict.fromkeys(DEATHS, aioenv.WorkerDied),
    "hang": aioenv.WorkerTimeout,
    "past_deadline": aioenv.WorkerTimeout,
}
#: A fault after which the vector env cannot go on (restarts off): it is closed and made
#: again, which costs about this many seconds (a Ray actor takes longer to start).
VECTOR_FATAL = {*DEATHS, "hang", "past_deadline"}
VECTOR_REBUILD = {"mixed": 1.0, "grouped": 1.0, "ray": 8.0}


class VectorFace:
    """One ``AioVectorEnv`` of the vector face: how it is made, the worker kind of each of
    its envs, and its own schedule of faults (a shuffled cycle through every fault of
    every kind it holds, one every ``interval`` seconds or so)."""

    def __init__(self, name: str, kinds: list[str], make: Callable[[], aioenv.AioVectorEnv]):
        self.name = name
        self.kinds = kinds
        self.make = make
        self.pairs = sorted({(kind, fault) for kind in kinds for fault in VECTOR_FAULTS[kind]})
        self.cycle: list[tuple[str, str]] = []
        self.due = 0.0
        self.t = np.zeros(len(kinds))

    def minimum(self, seconds: float, interval: float) -> float:
        """How many faults a run of ``seconds`` shows at the least (a fault that ends a
        worker costs a new vector env)."""
        fatal = sum(fault in VECTOR_FATAL for _, fault in self.pairs) / len(self.pairs)
        return seconds / (interval + fatal * VECTOR_REBUILD[self.name]) / MARGIN


def vector_faces(kinds: list[str]) -> list[VectorFace]:
    """The vector envs: one env in each worker kind but Ray (``mixed``), grouped process
    workers (``grouped``), and Ray actors (``ray``) where ray imports; restarts off."""
    options: dict[str, Any] = {
        "autoreset": "disabled",
        "step_timeout": STEP_TIMEOUT,
        "restart": "never",
        "cleanup_time": STEP_TIMEOUT * 2.5,  # a thread past its deadline finishes first
    }
    makers: dict[str, Callable[[], aioenv.Worker[Any]]] = {
        "thread": lambda: aioenv.ThreadWorker(FaultyEnv),
        "process": lambda: aioenv.ProcessWorker(FaultyEnv),
        "sync": lambda: aioenv.SyncWorker(FaultyEnv),
        "coroutine": lambda: aioenv.AsyncEnvWorker(AsyncFaultyEnv),
    }
    mixed = ["thread", "process", "sync", "coroutine"]

    def make_mixed() -> aioenv.AioVectorEnv:
        workers = [makers[kind]() for kind in mixed]
        return aioenv.AioVectorEnv.from_pool(aioenv.AsyncWorkerPool(workers, **options))

    def make_grouped() -> aioenv.AioVectorEnv:
        return aioenv.AioVectorEnv(FaultyEnv, 4, mode="process", envs_per_worker=2, **options)

    def make_ray() -> aioenv.AioVectorEnv:
        ray_options = {**options, "step_timeout": RAY_STEP_TIMEOUT, "num_cpus": 0}
        return aioenv.AioVectorEnv(FaultyEnv, 1, mode="ray", **ray_options)

    faces = [
        VectorFace("mixed", mixed, make_mixed),
        VectorFace("grouped", ["process"] * 4, make_grouped),
    ]
    if "ray" in kinds:
        faces.append(VectorFace("ray", ["ray"], make_ray))
    return faces


class VectorDriver:
    """Drives one vector face in a thread of its own until ``deadline``. Every env echoes
    the id of its action and counts its steps. Restarts are off: a fault injected into
    one env must come back as its error (an env exception as itself), after which every
    env is reset, or, where the worker is gone, the vector env is closed and made again.
    Episodes end on their own (autoreset disabled: masked resets)."""

    def __init__(self, seed: int, deadline: float, interval: float, face: VectorFace):
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.deadline = deadline
        self.interval = interval
        self.face = face
        self.counts: collections.Counter[str] = collections.Counter()
        self.violations: list[str] = []
        self.next_id = 0
        self.thread = threading.Thread(target=self.run, name=f"soak-vector-env-{face.name}")

    def run(self) -> None:
        try:
            self._drive()
        except BaseException as exc:  # anything unexpected is a violation, not a crash
            self.violations.append(f"vector env {self.face.name}: {type(exc).__name__}: {exc}")

    def _drive(self) -> None:
        face = self.face
        envs = face.make()
        try:
            envs.reset(seed=self.seed)
            face.due = time.monotonic() + self._gap()
            while time.monotonic() < self.deadline:
                if self._step(envs, self._fault()):
                    continue
                # The worker is gone (restarts off): a new vector env takes its place.
                envs.close()
                envs = face.make()
                envs.reset(seed=self.seed)
                face.t[:] = 0
                face.due = time.monotonic() + self._gap()
                self.counts[f"rebuilt:{face.name}"] += 1
        finally:
            envs.close()

    def _gap(self) -> float:
        return float(self.interval * self.rng.uniform(0.5, 1.5))

    def _fault(self) -> tuple[int, str] | None:
        """The env and fault due now, if one is (an env of the fault's kind)."""
        face = self.face
        if time.monotonic() < face.due:
            return None
        face.due = time.monotonic() + self._gap()
        if not face.cycle:
            face.cycle = [face.pairs[i] for i in self.rng.permutation(len(face.pairs))]
        kind, fault = face.cycle.pop()
        env = int(self.rng.choice([i for i, k in enumerate(face.kinds) if k == kind]))
        return env, fault

    def _step(self, envs: aioenv.AioVectorEnv, fault: Any) -> bool:
        """One step of ``envs``, checked; False when the vector env cannot go on."""
        face = self.face
        n, t, name = len(face.kinds), face.t, face.name
        ids = np.arange(self.next_id, self.next_id + n, dtype=float)
        self.next_id += n
        actions: list[dict[str, Any]] = [{"id": int(i)} for i in ids]
        if fault is not None:
            env, what = fault
            actions[env]["fault"] = "sleep" if what == "past_deadline" else what
            actions[env]["arg"] = STEP_TIMEOUT * 2
            self.counts[f"sent:{name}:{face.kinds[env]}:{what}"] += 1
            self.counts[f"sent:{name}"] += 1
        try:
            observations, _, terminated, truncated, _ = envs.step(actions)
        except Exception as exc:
            if fault is None:
                self.violations.append(f"vector env {name}: unexpected {exc!r}")
                return False
            env, what = fault
            expected = VECTOR_ERRORS[what]
            if face.kinds[env] == "ray" and what in DEATHS:  # see restart_reasons
                expected = (aioenv.WorkerDied, aioenv.WorkerTimeout)
            words = {"raise": "injected fault", "garbage": "5-tuple"}.get(what, "")
            if not isinstance(exc, expected) or words not in str(exc):
                self.violations.append(
                    f"vector env {name}: env {env}'s {what} raised {exc!r}, not {expected}"
                )
            else:
                self.counts[f"answered:{name}:{face.kinds[env]}:{what}"] += 1
                self.counts[f"answered:{name}"] += 1
            if what in VECTOR_FATAL:
                return False
            envs.reset()
            t[:] = 0
            return True
        if fault is not None:
            self.violations.append(f"vector env {name}: env {fault[0]}'s {fault[1]} not raised")
        t += 1
        if not np.array_equal(observations[:, 1], ids):
            self.violations.append(f"vector env {name}: ids {observations[:, 1]} for {ids}")
        if not np.array_equal(observations[:, 0], t):
            self.violations.append(f"vector env {name}: step counts {observations[:, 0]}, {t}")
        self.counts["states"] += n
        self.counts[f"states:{name}"] += n
        ended = terminated | truncated
        if ended.any():
            envs.reset(options={"reset_mask": ended})
            t[ended] = 0
        return True


# Leaks and setup --------------------------------------------------------------------------
async def warm_up(ray: bool) -> None:
    """Start what serves the whole run before the file descriptors are counted: the
    forkserver, Ray's connections to its actors, and what the first event loop made in a
    thread other than the main one opens for the process (once: a second opens nothing)."""
    workers: list[aioenv.Worker[Any]] = [aioenv.ProcessWorker(FaultyEnv)]
    if ray:
        workers.append(aioenv.RayWorker(FaultyEnv, num_cpus=0))
    async with aioenv.AsyncWorkerPool(workers) as pool:
        pool.reset()
        await pool.get_batch(min_size=len(workers))

    def vector_env_in_a_thread() -> None:
        # A pool option keeps it on a pool, whose event loop is the one made in a thread
        # (without one, its children step through the engine, with no event loop).
        with aioenv.AioVectorEnv(FaultyEnv, 2, mode="process", shared_memory=False) as envs:
            envs.reset(seed=0)

    await asyncio.to_thread(vector_env_in_a_thread)


def start_ray() -> bool:
    """The local Ray instance the ``ray`` workers run on (its daemons are not leaks)."""
    try:
        import ray_support
    except ImportError:
        return False
    try:
        ray_support.start()
    except ImportError:
        return False
    return True


def tcp_sockets() -> set[str]:
    """This process's TCP sockets, as ``/proc/self/fd`` names them. aioenv opens none:
    they are Ray's connections to its actors, which Ray keeps after an actor dies."""
    inodes = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                inodes.add(f"socket:[{line.split()[9]}]")
    return inodes


def memory_files_mapped() -> int:
    gc.collect()
    return Path(f"/proc/{os.getpid()}/maps").read_text().count("memfd:aioenv")


# Minimums ---------------------------------------------------------------------------------
def minimums(
    seconds: float, interval: float, arrangements: list[str], faces: list[VectorFace]
) -> Iterator[tuple[str, str, int]]:
    """(what, counter, the least count a run of ``seconds`` must show)."""
    workers: collections.Counter[str] = collections.Counter()
    for arrangement in arrangements:
        workers[kind_of(arrangement)] += ARRANGEMENTS[arrangement]
    for kind, count in sorted(workers.items()):
        faults = FAULTS_OF_KIND[kind]
        # A worker goes through its kind's faults, one per interval + recovery or so.
        scheduled = seconds * count / (interval + RECOVERY[kind]) / MARGIN
        yield f"pool: {kind} workers: faults", f"answered:{kind}", max(1, math.floor(scheduled))
        for fault in faults:  # asked of runs long enough for each to come several times
            yield (
                f"pool: {kind} workers: {fault}",
                f"answered:{kind}:{fault}",
                math.floor(scheduled / len(faults)),
            )
    for arrangement in arrangements:
        rate = STATES_PER_SECOND[kind_of(arrangement)] * ARRANGEMENTS[arrangement]
        yield f"pool: restarts of {arrangement}", f"restarts:{arrangement}", 1
        yield (
            f"pool: states of {arrangement}",
            f"states:{arrangement}",
            max(1, math.floor(seconds * rate)),
        )
    yield "pool: restarts", "restarts seen", max(1, math.floor(seconds))
    for face in faces:
        scheduled = face.minimum(seconds, interval)
        what = f"vector env {face.name}"
        yield f"{what}: faults", f"vector:answered:{face.name}", max(1, math.floor(scheduled))
        for kind, fault in face.pairs:
            least = math.floor(scheduled / len(face.pairs))
            yield f"{what}: {kind}: {fault}", f"vector:answered:{face.name}:{kind}:{fault}", least
        rate = VECTOR_STATES_PER_SECOND[face.name]
        yield f"{what}: states", f"vector:states:{face.name}", max(1, math.floor(seconds * rate))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 180)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fault-rate", type=float, default=0.01, help="random env exceptions per step (0.01)"
    )
    parser.add_argument(
        "--interval", type=float, default=0.5, help="seconds between a worker's faults (0.5)"
    )
    parser.add_argument("--without-ray", action="store_true", help="no Ray workers")
    parser.add_argument(
        "--arrangements",
        default=",".join(ARRANGEMENTS),
        help=f"the pool's workers, of {', '.join(ARRANGEMENTS)} (default: all)",
    )
    args = parser.parse_args()
    # The vector env's injected exceptions would each log gymnasium's three error lines.
    gymnasium.logger.min_level = gymnasium.logger.ERROR + 10
    ray = not args.without_ray and start_ray()
    if not args.without_ray and not ray:
        print("soak: ray cannot be imported here; no Ray workers", flush=True)
    arrangements = [a for a in args.arrangements.split(",") if ray or kind_of(a) != "ray"]
    faces = vector_faces(["ray"] if ray else [])
    ray_calls = RayCalls()
    if ray:
        ray_calls.install()
    # The forkserver and Ray's connections stay for the whole run: start them first.
    asyncio.run(warm_up(ray))
    fds_before = open_fds()
    soak = Soak(args.seed, args.fault_rate, args.interval, arrangements)
    deadline = time.monotonic() + args.seconds
    vectors = [VectorDriver(args.seed, deadline, args.interval, face) for face in faces]
    print(
        f"soak: {args.seconds:g} s, seed {args.seed}, a fault per worker every "
        f"~{args.interval:g} s, random env exceptions {args.fault_rate} per step; pool: "
        f"{', '.join(arrangements)}; vector envs: {', '.join(face.name for face in faces)}",
        flush=True,
    )
    started = time.monotonic()

    async def run() -> None:
        for vector in vectors:
            vector.thread.start()
        await soak.run(args.seconds)
        for vector in vectors:
            await asyncio.to_thread(vector.thread.join, HANG_LIMIT)
            if vector.thread.is_alive():
                soak.violations.append(
                    f"vector env {vector.face.name}: no answer in {HANG_LIMIT} s"
                )

    asyncio.run(run())
    elapsed = time.monotonic() - started
    fds_after = open_fds()
    new = [link for link in new_fds(fds_before, fds_after) if link not in tcp_sockets()]
    if ray:
        # Ray's core worker keeps connections (TCP, and Unix sockets to its daemons) to
        # actors that died; aioenv's own sockets are checked by a run --without-ray.
        ray_sockets = [link for link in new if link.startswith("socket:")]
        new = [link for link in new if not link.startswith("socket:")]
        if ray_sockets:
            print(f"sockets left open while Ray ran (Ray's): {len(ray_sockets)}")
    leaked_actors = 0
    if ray:
        import ray_support

        if not wait_until(lambda: not ray_support.live_actors(), timeout=20):
            leaked_actors = len(ray_support.live_actors())
        ray_support.stop()

    leaked_processes = not wait_until(lambda: not worker_processes(), timeout=10)
    leaked_threads = not wait_until(lambda: not worker_threads(), timeout=10)
    leaks = {
        "processes": len(worker_processes()) if leaked_processes else 0,
        "threads": len(worker_threads()) if leaked_threads else 0,
        "fds": len(new),
        "shared memory files open": len(memory_files(fds_after)),
        "shared memory files still mapped": memory_files_mapped(),
        "Ray actors": leaked_actors,
    }
    counts = soak.counts.copy()
    for vector in vectors:
        counts.update({f"vector:{k}": v for k, v in vector.counts.items()})
    slowest_call, slowest = ray_calls.slowest()
    rows: list[tuple[str, Any]] = [
        ("duration", f"{elapsed:.0f} s"),
        ("pool: states checked", counts["states"]),
        ("pool: steps/s", f"{counts['states'] / elapsed:.0f}"),
        ("pool: restarts", counts["pool restarts"]),
        (
            "pool: restarts ended by a fault of another worker of the host",
            counts["sibling restarts"],
        ),
        ("pool: states lost or wrong", counts["wrong"]),
        ("pool: states duplicated", sum("duplicate" in v for v in soak.violations)),
        ("pool: hangs", counts["hangs"]),
        ("pool: event loop's longest stall", f"{soak.stalls.longest * 1000:.0f} ms"),
        ("pool: event loop stalls over 100 ms", soak.stalls.over_100ms),
        ("vector envs: states checked", counts["vector:states"]),
        *[
            (
                f"vector env {face.name}: made again after a worker was lost",
                counts[f"vector:rebuilt:{face.name}"],
            )
            for face in faces
        ],
    ]
    if ray:
        over = sum(ray_calls.over_limit.values())
        rows += [
            ("Ray calls on an event loop's thread", ray_calls.calls),
            (f"of them over {RAY_CALL_LIMIT * 1000:.0f} ms (busy cores)", over),
            (
                "longest Ray call on an event loop's thread",
                f"{slowest * 1000:.0f} ms ({slowest_call})",
            ),
            *[
                (f"  {name}: made, longest", f"{ray_calls.made[name]}, {took * 1000:.1f} ms")
                for name, took in sorted(ray_calls.longest.items())
            ],
        ]
    rows += [(f"leaked {name}", n) for name, n in leaks.items()]
    shortfalls = []
    required = list(minimums(args.seconds, args.interval, arrangements, faces))
    for what, counter, least in required:
        sent = counts[counter.replace("answered:", "sent:")] if "answered:" in counter else None
        got = counts[counter]
        shown = f"{got}" if sent is None else f"{got} of {sent} sent"
        rows.append((f"{what} (at least {least})" if least else what, shown))
        if got < least:
            shortfalls.append(f"{what}: {got}, fewer than the {least} required")
    width = max(len(name) for name, _ in rows)
    print(f"\n| {'what':<{width}} | value |\n|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    problems = soak.violations + [v for vector in vectors for v in vector.violations]
    problems += [f"leaked {n} {name}" for name, n in leaks.items() if n]
    problems += [f"  open: {link}" for link in new]
    problems += [
        f"{name} on an event loop's thread ({n} times, the longest "
        f"{ray_calls.longest[name] * 1000:.0f} ms): it must be made off the loop"
        for name, n in sorted(ray_calls.made.items())
        if name in RayCalls.OFF_THE_LOOP
    ]
    problems += [f"too few: {shortfall}" for shortfall in shortfalls]
    if problems:
        print(f"\nVIOLATIONS ({len(problems)}):", *problems[:40], sep="\n  ")
        return 1
    print("\nno violations; every minimum count met")
    return 0


if __name__ == "__main__":
    sys.exit(main())

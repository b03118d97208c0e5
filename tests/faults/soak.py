"""A seeded random fault-injection soak over a mixed pool (``make soak``).

Thousands of steps with faults injected at random (env exceptions, garbage, deaths by
exit/SIGKILL/SIGSEGV, hangs, steps past the deadline, failing resets), restarts on, in
every worker kind: process, thread, sync, coroutine, a process worker stepping a group
of envs, and a Ray actor (where ray imports). Every action carries an id that the env
echoes, so each state is checked against the action that asked for it. Beside the pool,
a thread drives an ``AioVectorEnv`` (grouped process workers) with env exceptions
injected, checked the same way. The invariants, checked continuously: every healthy step
answered exactly once by its own state; every fault answered by a restart (the vector
env: by the env's own exception); nothing hangs; and afterwards no process, thread, fd,
/dev/shm segment or Ray actor is left. Exits non-zero on any violation.

    python tests/faults/soak.py --seconds 600 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
import gymnasium
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import faulty_env  # noqa: E402
from faulty_env import AsyncFaultyEnv, FaultyEnv  # noqa: E402
from support import wait_until, worker_processes, worker_threads  # noqa: E402  # noqa: E402

import aioenv  # noqa: E402
from aioenv.core._environment import VectorSource  # noqa: E402

cloudpickle.register_pickle_by_value(faulty_env)

KINDS = ["process", "process", "thread", "thread", "sync", "coroutine", "grouped", "ray"]
#: Envs a ``grouped`` worker steps (one process, one message per step for all of them).
GROUP = 3
#: Long enough for a step on two busy cores, short enough for many faults.
STEP_TIMEOUT = 1.0
#: The deadline of the kinds whose steps are timed by the event loop's own work (a
#: coroutine env runs on it, a Ray reply lands on it): restarting a Ray actor makes
#: synchronous Ray calls on the loop (up to about a second on two busy cores), which
#: would time out their steps in flight. Their deadlines are tested in the test suite.
LOOP_TIMED_STEP_TIMEOUT = 10.0
ALL = {"process", "thread", "sync", "coroutine", "grouped", "ray"}
DYING = {"process", "grouped", "ray"}  # the kinds whose env runs in a process of its own
# fault -> (kinds it applies to, relative weight); every one ends in a restart except "slow".
FAULTS: dict[str, tuple[set[str], float]] = {
    "raise": (ALL, 3),
    "garbage": (ALL, 2),
    "reset_raise": (ALL, 2),
    "exit": (DYING, 1),
    "sigkill": (DYING, 1),
    "sigsegv": (DYING, 1),
    "hang": ({"process", "grouped"}, 1),
    "past_deadline": ({"process", "grouped", "thread"}, 1),
    "slow": (ALL, 2),
}
HANG_LIMIT = 30.0  # a request unanswered this long is a hang
#: The vector env beside the pool: its envs, and how often a step carries an env exception.
VECTOR_ENVS = 4
VECTOR_FAULT_RATE = 0.01


class Soak:
    def __init__(self, seed: int, fault_rate: float) -> None:
        self.rng = np.random.default_rng(seed)
        self.fault_rate = fault_rate
        self.counts: collections.Counter[str] = collections.Counter()
        self.violations: list[str] = []
        self.expect: dict[int, tuple[Any, str | None, float]] = {}  # id, fault, sent at
        self.t: dict[int, int] = {}
        self.armed_reset_fault: set[int] = set()
        self.next_id = 0

    def choose(self, worker_id: int, kind: str, done: bool) -> tuple[Any, str | None]:
        if done or worker_id in self.armed_reset_fault:
            return aioenv.RESET, "reset_raise" if worker_id in self.armed_reset_fault else None
        action, fault = self._action(worker_id, kind)
        if kind != "grouped":
            return action, fault
        rest = [{"id": self._new_id()} for _ in range(GROUP - 1)]
        return [action, *rest], fault  # a fault rides on the group's first env only

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _action(self, worker_id: int, kind: str) -> tuple[dict[str, Any], str | None]:
        action: dict[str, Any] = {"id": self._new_id()}
        fault = None
        if self.rng.random() < self.fault_rate:
            names = [name for name, (kinds, _) in FAULTS.items() if kind in kinds]
            weights = np.array([FAULTS[name][1] for name in names], dtype=float)
            fault = str(self.rng.choice(names, p=weights / weights.sum()))
            self.counts[f"fault:{fault}"] += 1
            if fault == "reset_raise":
                action["arm_reset_fault"] = "raise"
                self.armed_reset_fault.add(worker_id)
                fault = None  # this step is healthy; the next reset fails
            elif fault == "past_deadline":
                action.update(fault="sleep", arg=STEP_TIMEOUT * 2)
            elif fault == "slow":
                action.update(fault="sleep", arg=STEP_TIMEOUT / 5)
            else:
                action["fault"] = fault
        return action, fault

    def check(self, worker_id: int, state: Any) -> None:
        if worker_id not in self.expect:
            self.violations.append(f"worker {worker_id}: a state nobody asked for (duplicate)")
            return
        action, fault, _ = self.expect.pop(worker_id)
        if isinstance(state, aioenv.BatchStep):  # a group: one row per env
            rows = [(state.observations[r], state.infos.get(r, {})) for r in range(len(state))]
            actions = action if isinstance(action, list) else [action] * len(rows)
        else:
            rows, actions = [(state.observation, state.info)], [action]
        restarted = all(info.get("aioenv", {}).get("restarted", False) for _, info in rows)
        must_restart = fault not in (None, "slow")
        if restarted != must_restart:
            reason = rows[0][1].get("aioenv", {}).get("reason")
            what = (
                f"restarted without a fault ({reason})"
                if restarted
                else f"no restart after {fault}"
            )
            self.violations.append(f"worker {worker_id}: {what}")
            self.counts["wrong"] += 1
        if restarted:
            self.counts["restarts seen"] += 1
            self.armed_reset_fault.discard(worker_id)
        for row, ((observation, _), asked) in enumerate(zip(rows, actions, strict=True)):
            key = (worker_id, row)
            if asked is aioenv.RESET or restarted:
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

    def worker(self, kind: str) -> aioenv.Worker[Any]:
        seed = int(self.rng.integers(2**31))
        if kind == "process":  # every observation in shared memory, however small
            return aioenv.ProcessWorker(FaultyEnv, seed=seed, shared_memory=True)
        if kind == "grouped":
            return aioenv.ProcessWorker(VectorSource((FaultyEnv,) * GROUP), seed=seed)
        if kind == "thread":
            return aioenv.ThreadWorker(FaultyEnv, seed=seed)
        if kind == "coroutine":
            return aioenv.AsyncEnvWorker(
                AsyncFaultyEnv, seed=seed, step_timeout=LOOP_TIMED_STEP_TIMEOUT
            )
        if kind == "ray":
            return aioenv.RayWorker(
                FaultyEnv, seed=seed, num_cpus=0, step_timeout=LOOP_TIMED_STEP_TIMEOUT
            )
        return aioenv.SyncWorker(FaultyEnv, seed=seed)

    async def run(self, seconds: float) -> aioenv.WorkerPool[Any]:
        workers = [self.worker(kind) for kind in KINDS]
        pool = aioenv.AsyncWorkerPool(
            workers,
            step_timeout=STEP_TIMEOUT,
            start_timeout=10.0,
            restart="on_failure",
            max_restarts=10**9,
            cleanup_time=2.0,
        )
        async with pool:
            for worker_id in range(len(pool)):
                self.expect[worker_id] = (aioenv.RESET, None, time.monotonic())
            pool.reset()
            deadline = time.monotonic() + seconds
            last_report = time.monotonic()
            while self.expect:
                result = await pool.get_state(timeout=1.0)
                now = time.monotonic()
                for worker_id, (_, fault, sent) in self.expect.items():
                    if now - sent > HANG_LIMIT:
                        self.violations.append(
                            f"worker {worker_id}: no answer in {HANG_LIMIT} s ({fault})"
                        )
                        self.counts["hangs"] += 1
                        return pool
                if now - last_report > 10:
                    last_report = now
                    print(
                        f"  {now - deadline + seconds:6.0f} s: {self.counts['states']} states, "
                        f"{pool.restarts} restarts, {len(worker_processes())} worker processes",
                        flush=True,
                    )
                    children = KINDS.count("process") + KINDS.count("grouped")
                    if len(worker_processes()) > 2 * children + 2:
                        self.violations.append("worker processes pile up (not reaped)")
                if result is None:
                    continue
                step, worker_id = result
                self.check(worker_id, step)
                if now >= deadline:
                    continue  # wind down: take every state still owed, send nothing new
                done = bool(np.any(step.dones)) if isinstance(step, aioenv.BatchStep) else step.done
                action, fault = self.choose(worker_id, KINDS[worker_id], done)
                self.expect[worker_id] = (action, fault, now)
                pool.send_action(action, worker_id)
            self.counts["pool restarts"] = pool.restarts
            self.counts["pool failures"] = pool.failures
        return pool


class VectorDriver:
    """Drives an ``AioVectorEnv`` over grouped process workers in a thread of its own
    until ``deadline``: every env echoes the id of its action and counts its steps; an
    env exception injected into one env must come back as that exception, after which
    every env is reset. Episodes end on their own (autoreset disabled: masked resets)."""

    def __init__(self, seed: int, deadline: float) -> None:
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.deadline = deadline
        self.counts: collections.Counter[str] = collections.Counter()
        self.violations: list[str] = []

    def run(self) -> None:
        try:
            self._drive()
        except BaseException as exc:  # anything unexpected is a violation, not a crash
            self.violations.append(f"vector env: {type(exc).__name__}: {exc}")

    def _drive(self) -> None:
        n = VECTOR_ENVS
        with aioenv.AioVectorEnv(
            FaultyEnv, n, mode="process", envs_per_worker=2, autoreset="disabled"
        ) as envs:
            envs.reset(seed=self.seed)
            t = np.zeros(n)
            next_id = 0
            while time.monotonic() < self.deadline:
                ids = np.arange(next_id, next_id + n, dtype=float)
                next_id += n
                actions: list[dict[str, Any]] = [{"id": int(i)} for i in ids]
                faulty = None
                if self.rng.random() < VECTOR_FAULT_RATE * n:
                    faulty = int(self.rng.integers(n))
                    actions[faulty]["fault"] = "raise"
                    self.counts["faults"] += 1
                try:
                    observations, _, terminated, truncated, _ = envs.step(actions)
                except RuntimeError as exc:
                    if faulty is None or "injected fault" not in str(exc):
                        self.violations.append(f"vector env: unexpected {exc!r}")
                    envs.reset()
                    t[:] = 0
                    continue
                if faulty is not None:
                    self.violations.append(f"vector env: env {faulty}'s fault was not raised")
                t += 1
                if not np.array_equal(observations[:, 1], ids):
                    self.violations.append(f"vector env: ids {observations[:, 1]} for {ids}")
                if not np.array_equal(observations[:, 0], t):
                    self.violations.append(f"vector env: step counts {observations[:, 0]}, {t}")
                self.counts["states"] += n
                ended = terminated | truncated
                if ended.any():
                    envs.reset(options={"reset_mask": ended})
                    t[ended] = 0


async def warm_up() -> None:
    """Start what serves the whole run before the file descriptors are counted: the
    forkserver, Ray's connections to its actors, and what the first event loop made in a
    thread other than the main one opens for the process (once: a second opens nothing)."""
    workers: list[aioenv.Worker[Any]] = [aioenv.ProcessWorker(FaultyEnv)]
    if "ray" in KINDS:
        workers.append(aioenv.RayWorker(FaultyEnv, num_cpus=0))
    async with aioenv.AsyncWorkerPool(workers) as pool:
        pool.reset()
        await pool.get_batch(min_size=len(workers))

    def vector_env_in_a_thread() -> None:
        with aioenv.AioVectorEnv(FaultyEnv, 2, mode="process") as envs:
            envs.reset(seed=0)

    await asyncio.to_thread(vector_env_in_a_thread)


def start_ray() -> bool:
    """The local Ray instance the ``ray`` worker runs on (its daemons are not leaks)."""
    try:
        import ray_support
    except ImportError:
        return False
    try:
        ray_support.start()
    except ImportError:
        return False
    return True


def open_fds() -> dict[str, str]:
    """This process's open file descriptors and what each is."""
    links = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            links[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return links


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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 180)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fault-rate", type=float, default=0.01, help="faults per step (default 0.01)"
    )
    parser.add_argument("--without-ray", action="store_true", help="no Ray worker")
    args = parser.parse_args()
    # The vector env's injected exceptions would each log gymnasium's three error lines.
    gymnasium.logger.min_level = gymnasium.logger.ERROR + 10
    shm_before = set(os.listdir("/dev/shm"))
    if args.without_ray:
        KINDS.remove("ray")
    elif not start_ray():
        KINDS.remove("ray")
        print("soak: ray cannot be imported here; no Ray worker", flush=True)
    # The forkserver and Ray's connections stay for the whole run: start them first.
    asyncio.run(warm_up())
    fds_before = open_fds()
    soak = Soak(args.seed, args.fault_rate)
    vector = VectorDriver(args.seed, time.monotonic() + args.seconds)
    vector_thread = threading.Thread(target=vector.run, name="soak-vector-env")
    print(
        f"soak: {args.seconds:g} s, seed {args.seed}, fault rate {args.fault_rate}, "
        f"workers {', '.join(KINDS)}",
        flush=True,
    )
    started = time.monotonic()

    async def run() -> None:
        vector_thread.start()
        await soak.run(args.seconds)
        await asyncio.to_thread(vector_thread.join, HANG_LIMIT)
        if vector_thread.is_alive():
            soak.violations.append(f"vector env: no answer in {HANG_LIMIT} s")

    asyncio.run(run())
    elapsed = time.monotonic() - started
    new_fds = sorted(
        link
        for fd, link in open_fds().items()
        if fds_before.get(fd) != link and link not in tcp_sockets()
    )
    if "ray" in KINDS:
        # Ray's core worker keeps connections (TCP, and Unix sockets to its daemons) to
        # actors that died; aioenv's own sockets are checked by a run --without-ray.
        ray_sockets = [link for link in new_fds if link.startswith("socket:")]
        new_fds = [link for link in new_fds if not link.startswith("socket:")]
        if ray_sockets:
            print(f"sockets left open while Ray ran (Ray's): {len(ray_sockets)}")
    leaked_actors = 0
    if "ray" in KINDS:
        import ray_support

        if not wait_until(lambda: not ray_support.live_actors(), timeout=20):
            leaked_actors = len(ray_support.live_actors())
        ray_support.stop()

    leaked_processes = not wait_until(lambda: not worker_processes(), timeout=10)
    leaked_threads = not wait_until(lambda: not worker_threads(), timeout=10)
    leaks = {
        "processes": len(worker_processes()) if leaked_processes else 0,
        "threads": len(worker_threads()) if leaked_threads else 0,
        "fds": len(new_fds),
        "shm segments": len(set(os.listdir("/dev/shm")) - shm_before),
        "shared memory files still mapped": memory_files_mapped(),
        "Ray actors": leaked_actors,
    }
    counts = soak.counts
    faults = {k.split(":", 1)[1]: v for k, v in sorted(counts.items()) if k.startswith("fault:")}
    rows = [
        ("duration", f"{elapsed:.0f} s"),
        ("states checked", counts["states"]),
        ("steps/s", f"{counts['states'] / elapsed:.0f}"),
        *[(f"faults injected: {name}", n) for name, n in faults.items()],
        ("faults injected (all)", sum(faults.values())),
        ("restarts", counts["pool restarts"]),
        ("states lost or wrong", counts["wrong"]),
        ("states duplicated", sum("duplicate" in v for v in soak.violations)),
        ("hangs", counts["hangs"]),
        ("vector env: states checked", vector.counts["states"]),
        ("vector env: env exceptions injected", vector.counts["faults"]),
        *[(f"leaked {name}", n) for name, n in leaks.items()],
    ]
    width = max(len(name) for name, _ in rows)
    print(f"\n| {'what':<{width}} | value |\n|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    problems = soak.violations + vector.violations
    problems += [f"leaked {n} {name}" for name, n in leaks.items() if n]
    problems += [f"  open: {link}" for link in new_fds]
    if problems:
        print("\nVIOLATIONS:", *problems[:20], sep="\n  ")
        return 1
    print("\nno violations")
    return 0


if __name__ == "__main__":
    sys.exit(main())

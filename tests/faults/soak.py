"""A seeded random fault-injection soak over a mixed pool (``make soak``).

Thousands of steps with faults injected at random (env exceptions, garbage, deaths by
exit/SIGKILL/SIGSEGV, hangs, steps past the deadline, failing resets), restarts on. Every
action carries an id that the env echoes, so each state is checked against the action that
asked for it. The invariants, checked continuously: every healthy step answered exactly
once by its own state; every fault answered by a restart; nothing hangs; and afterwards no
process, thread, fd or /dev/shm segment is left. Exits non-zero on any violation.

    python tests/faults/soak.py --seconds 600 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import faulty_env  # noqa: E402
from faulty_env import FaultyEnv  # noqa: E402
from support import wait_until, worker_processes, worker_threads  # noqa: E402

import aioenv  # noqa: E402

cloudpickle.register_pickle_by_value(faulty_env)

KINDS = ["process", "process", "process", "thread", "thread", "sync"]
STEP_TIMEOUT = 0.25
# fault -> (kinds it applies to, relative weight); every one ends in a restart except "slow".
FAULTS: dict[str, tuple[set[str], float]] = {
    "raise": ({"process", "thread", "sync"}, 3),
    "garbage": ({"process", "thread", "sync"}, 2),
    "reset_raise": ({"process", "thread", "sync"}, 2),
    "exit": ({"process"}, 1),
    "sigkill": ({"process"}, 1),
    "sigsegv": ({"process"}, 1),
    "hang": ({"process"}, 1),
    "past_deadline": ({"process", "thread"}, 1),
    "slow": ({"process", "thread", "sync"}, 2),
}
HANG_LIMIT = 30.0  # a request unanswered this long is a hang


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
        action: dict[str, Any] = {"id": self.next_id}
        self.next_id += 1
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

    def check(self, worker_id: int, step: Any) -> None:
        if worker_id not in self.expect:
            self.violations.append(f"worker {worker_id}: a state nobody asked for (duplicate)")
            return
        action, fault, _ = self.expect.pop(worker_id)
        restarted = step.info.get("aioenv", {}).get("restarted", False)
        must_restart = fault not in (None, "slow")
        if restarted != must_restart:
            what = "restarted without a fault" if restarted else f"no restart after {fault}"
            self.violations.append(f"worker {worker_id}: {what}")
            self.counts["wrong"] += 1
        if restarted:
            self.counts["restarts seen"] += 1
            self.armed_reset_fault.discard(worker_id)
        if action is aioenv.RESET or restarted:
            self.t[worker_id] = 0
        else:
            self.t[worker_id] = self.t.get(worker_id, 0) + 1
            if step.observation[1] != action["id"]:
                self.violations.append(
                    f"worker {worker_id}: state of action {step.observation[1]:.0f} "
                    f"answered action {action['id']} (stale or lost)"
                )
                self.counts["wrong"] += 1
        if step.observation[0] != self.t[worker_id]:
            self.violations.append(f"worker {worker_id}: step count skipped (lost state)")
            self.counts["wrong"] += 1
        self.counts["states"] += 1

    async def run(self, seconds: float) -> aioenv.WorkerPool[Any]:
        workers: list[aioenv.Worker[Any]] = []
        for kind in KINDS:
            worker_class = {"process": aioenv.ProcessWorker, "thread": aioenv.ThreadWorker}.get(
                kind, aioenv.SyncWorker
            )
            # Process workers put every observation in shared memory, however small.
            options = {"shared_memory": True} if kind == "process" else {}
            workers.append(worker_class(FaultyEnv, seed=int(self.rng.integers(2**31)), **options))
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
                    if len(worker_processes()) > 2 * KINDS.count("process") + 2:
                        self.violations.append("worker processes pile up (not reaped)")
                if result is None:
                    continue
                step, worker_id = result
                self.check(worker_id, step)
                if now >= deadline:
                    continue  # wind down: take every state still owed, send nothing new
                action, fault = self.choose(worker_id, KINDS[worker_id], step.done)
                self.expect[worker_id] = (action, fault, now)
                pool.send_action(action, worker_id)
            self.counts["pool restarts"] = pool.restarts
            self.counts["pool failures"] = pool.failures
        return pool


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
    args = parser.parse_args()
    shm_before = set(os.listdir("/dev/shm"))
    soak = Soak(args.seed, args.fault_rate)
    print(
        f"soak: {args.seconds:g} s, seed {args.seed}, fault rate {args.fault_rate}, "
        f"workers {', '.join(KINDS)}",
        flush=True,
    )
    started = time.monotonic()

    async def run_and_count_fds() -> tuple[int, int]:
        await aioenv.ProcessWorker(FaultyEnv).aclose()  # start the forkserver: its fds stay
        fds_at_start = len(os.listdir("/proc/self/fd"))
        await soak.run(args.seconds)
        return fds_at_start, len(os.listdir("/proc/self/fd"))

    fds_before, fds_after = asyncio.run(run_and_count_fds())
    elapsed = time.monotonic() - started
    leaked_processes = not wait_until(lambda: not worker_processes(), timeout=10)
    leaked_threads = not wait_until(lambda: not worker_threads(), timeout=10)
    leaks = {
        "processes": len(worker_processes()) if leaked_processes else 0,
        "threads": len(worker_threads()) if leaked_threads else 0,
        "fds": max(0, fds_after - fds_before),
        "shm segments": len(set(os.listdir("/dev/shm")) - shm_before),
        "shared memory files still mapped": memory_files_mapped(),
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
        *[(f"leaked {name}", n) for name, n in leaks.items()],
    ]
    width = max(len(name) for name, _ in rows)
    print(f"\n| {'what':<{width}} | value |\n|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    problems = soak.violations + [f"leaked {n} {name}" for name, n in leaks.items() if n]
    if problems:
        print("\nVIOLATIONS:", *problems[:20], sep="\n  ")
        return 1
    print("\nno violations")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The machine the benchmarks run on: versions, load, and whether anything else used the CPU.

The load average cannot tell a busy machine from a busy benchmark (our own worker
processes are in the run queue too), so interference is measured directly: the CPU time
the whole system spent busy (``/proc/stat``: user, nice, system, steal) minus the CPU time
of this process and all its descendants (``/proc/<pid>/stat``, including reaped children).
What is left was spent by something else, in cores (1.0 = one core fully used).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import importlib.metadata
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

__all__ = [
    "CpuAccount",
    "CpuSnapshot",
    "cpu_hog",
    "git_state",
    "host_info",
    "idle_probe",
    "load_average",
    "run_lock",
]

_TICKS = os.sysconf("SC_CLK_TCK")
_PACKAGES = (
    "aioenv",
    "gymnasium",
    "numpy",
    "uvloop",
    "cloudpickle",
    "matplotlib",
    "ale-py",
    "mujoco",
    "envpool",
    "stable-baselines3",
    "torch",
    "torchrl",
    "tensordict",
    "ray",
    "pufferlib",
    "pufferlib-core",  # PufferLib's vector code as a wheel (see peers.py)
)


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def host_info() -> dict[str, Any]:
    """What the report header shows: CPUs, load, Python and package versions."""
    versions: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "packages": versions,
    }


def git_state(repo: str) -> dict[str, Any]:
    """The commit aioenv was measured at, and whether its working tree had changes."""
    try:
        commit = subprocess.run(
            ["git", "-C", repo, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "-C", repo, "status", "--porcelain", "--", "aioenv"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "aioenv_modified": None}
    return {"commit": commit, "aioenv_modified": bool(changes.strip())}


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


@dataclasses.dataclass(frozen=True)
class CpuSnapshot:
    at: float  # time.monotonic()
    system_busy: int  # clock ticks, all CPUs
    ours: int  # clock ticks, this process tree


class CpuAccount:
    """Snapshots of system-wide busy time and of this process tree's CPU time; the
    difference between two snapshots is CPU time used by other programs."""

    def __init__(self) -> None:
        self.available = os.path.exists("/proc/stat")
        self.last = self.snapshot()

    def snapshot(self) -> CpuSnapshot:
        if not self.available:
            return CpuSnapshot(time.monotonic(), 0, 0)
        return CpuSnapshot(time.monotonic(), _system_busy_ticks(), _tree_ticks(os.getpid()))

    def foreign_cores(self, start: CpuSnapshot, end: CpuSnapshot) -> float | None:
        """Cores used by other programs between two snapshots (None if unknown)."""
        elapsed = end.at - start.at
        if not self.available or elapsed <= 0:
            return None
        foreign = (end.system_busy - start.system_busy) - (end.ours - start.ours)
        return foreign / _TICKS / elapsed


def idle_probe(account: CpuAccount, seconds: float) -> float | None:
    """Sleep ``seconds`` (nothing of ours runs) and return the cores others used."""
    start = account.snapshot()
    time.sleep(seconds)
    end = account.snapshot()
    account.last = end
    return account.foreign_cores(start, end)


def _system_busy_ticks() -> int:
    with open("/proc/stat", encoding="ascii") as file:
        fields = file.readline().split()
    # cpu user nice system idle iowait irq softirq steal guest guest_nice
    # irq/softirq are left out on both sides (the kernel does not bill them to processes);
    # steal is time the hypervisor gave to someone else: another program, for our purpose.
    user, nice, system = int(fields[1]), int(fields[2]), int(fields[3])
    steal = int(fields[8]) if len(fields) > 8 else 0
    return user + nice + system + steal


def _tree_ticks(root: int) -> int:
    """CPU ticks of ``root`` and its descendants, reaped children included."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as file:
                text = file.read()
        except OSError:
            continue  # it exited meanwhile
        # The command name is in parentheses and may hold spaces: split after it.
        rest = text[text.rindex(")") + 2 :].split()
        pid = int(entry)
        parents[pid] = int(rest[1])
        # utime, stime, cutime, cstime (fields 14-17 of proc(5))
        ticks[pid] = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total = 0
    todo = [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


#: What a hog process runs: a busy loop, as another CPU-heavy job on the machine would.
_HOG = "while True: pass"


def hog_count() -> int:
    """How many hog processes :func:`cpu_hog` starts: one per usable core but one, so one
    core's worth of time is left to whatever is measured beside them."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


@contextlib.contextmanager
def cpu_hog(processes: int | None = None) -> Iterator[int]:
    """Run ``processes`` busy-loop processes (default :func:`hog_count`) for the body of
    the ``with``, stopped after it; yields how many run."""
    count = hog_count() if processes is None else processes
    hogs = [subprocess.Popen([sys.executable, "-c", _HOG]) for _ in range(count)]
    try:
        time.sleep(0.05)  # each is past its start and busy before the measurement begins
        yield count
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


@contextlib.contextmanager
def run_lock() -> Iterator[None]:
    """Hold a lock for the whole run, so two benchmark runs never overlap."""
    path = os.path.join(tempfile.gettempdir(), "aioenv-benchmarks.lock")
    with open(path, "w", encoding="ascii") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(
                f"another benchmark run holds {path}; wait for it to finish "
                "(two runs at once would measure each other)"
            ) from None
        file.write(str(os.getpid()))
        file.flush()
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)

"""Shutdown when the parent is interrupted or killed: the workers go, and quietly."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import wait_until

ROOT = Path(__file__).resolve().parents[2]


def gone(pid: int) -> bool:
    """The process no longer runs (exited, or a zombie waiting to be reaped)."""
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


# A terminal program gets KeyboardInterrupt on Ctrl-C even when the test runner was started
# with SIGINT ignored (as a non-interactive shell does for background jobs).
PROLOGUE = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


@contextlib.contextmanager
def script_running(code: str, scratch: Path) -> Iterator[subprocess.Popen[str]]:
    """Run ``code`` in its own process group; whatever happens, kill the group after.
    ``scratch`` (the test's ``tmp_path``) is its temporary folder: a program killed with
    SIGKILL leaves multiprocessing's (the forkserver's socket) behind."""
    script = start_script(code, scratch)
    try:
        yield script
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(script.pid, signal.SIGKILL)
        script.wait(timeout=30)


def start_script(code: str, scratch: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PROLOGUE + textwrap.dedent(code)],
        cwd=ROOT / "tests" / "faults",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a terminal job
        env={
            **os.environ,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'faults'}",
            "TMPDIR": str(scratch),
        },
    )


def read_pids(script: subprocess.Popen[str]) -> list[int]:
    assert script.stdout is not None
    line = script.stdout.readline()
    assert line.startswith("pids"), (
        f"script said {line!r}; stderr: {script.stderr.read() if script.stderr else ''}"
    )
    return [int(pid) for pid in line.split()[1:]]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("when", [0, 1, 30])  # during start-up, at the first state, later
@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_ctrl_c_closes_every_worker_and_children_print_nothing(
    when: int, context: str, tmp_path: Path
) -> None:
    with script_running(
        f"""
        import asyncio, os, signal
        import numpy as np
        import aioenv
        from faulty_env import FaultyEnv

        ballast = np.ones(30_000_000, np.uint8)  # a slow start-up: a wide window for Ctrl-C

        def env():
            return FaultyEnv(episode_length=int(ballast[0]) * 50)

        def ctrl_c():  # SIGINT to the whole process group, as a terminal does
            os.killpg(os.getpgid(0), signal.SIGINT)

        async def main():
            modes = ["process", "process", "thread"]
            async with aioenv.make_pool(env, 3, mode=modes, context={context!r}) as pool:
                print("pids", *[w.pid for w in pool.workers if w.kind == "process"], flush=True)
                if {when} == 0:
                    ctrl_c()  # the workers are still starting
                pool.reset()
                steps = 0
                async for step, worker_id in pool:
                    steps += 1
                    if steps == {when}:
                        ctrl_c()
                    pool.send_action(aioenv.RESET if step.done else 0, worker_id)

        asyncio.run(main())
        """,
        tmp_path,
    ) as script:
        pids = read_pids(script)
        _, stderr = script.communicate(timeout=60)
    assert script.returncode != 0
    assert "KeyboardInterrupt" in stderr
    for child_sign in ("_child_main", "forkserver", "multiprocessing/process.py", "_serve"):
        assert child_sign not in stderr, stderr  # only the parent's own traceback
    assert wait_until(lambda: all(gone(pid) for pid in pids))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_workers_exit_by_themselves_when_the_parent_is_killed(context: str, tmp_path: Path) -> None:
    began = tmp_path / "began"  # worker 0's env creates it as the hung step begins
    with script_running(
        f"""
        import asyncio, time
        import aioenv
        from faulty_env import FaultyEnv

        async def main():
            workers = [aioenv.ProcessWorker(FaultyEnv, context={context!r}) for _ in range(2)]
            pool = aioenv.AsyncWorkerPool(workers)
            pool.reset()
            await pool.get_batch(min_size=2)
            pool.send_action({{"fault": "hang", "began": {str(began)!r}}}, 0)  # worker 0 hangs
            print("pids", *[w.pid for w in workers], flush=True)
            await asyncio.sleep(3600)

        asyncio.run(main())
        """,
        tmp_path,
    ) as script:
        pids = read_pids(script)
        assert wait_until(began.exists, timeout=30), "the hung step never began"
        assert not any(gone(pid) for pid in pids)
        os.killpg(script.pid, signal.SIGKILL)  # the parent and its forkserver die at once
        script.wait(timeout=30)
    assert wait_until(lambda: all(gone(pid) for pid in pids), timeout=10), "orphaned workers"

"""Nothing an env starts outlives its process worker: helper processes (a plain one, one
with a child of its own, one that ignores SIGTERM) end when the worker is closed, replaced
after a failure, killed, or when the parent dies."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from support import process_running, wait_until

import aioenv
from aioenv import RESET
from aioenv.env_side._process_group import end_own_group, signal_group
from aioenv.vector import _choice

#: The helpers an env starts: a plain one, and two shells with a child of their own (each
#: prints its child's pid), one of them ignoring SIGTERM (as does its child).
HELPERS = [
    ["sleep", "600"],
    ["sh", "-c", "sleep 600 & echo $!; wait"],
    ["sh", "-c", "trap '' TERM; sleep 600 & echo $!; wait"],
]
PER_ENV = 5  # helper pids per env, grandchildren included


class StartsHelpers(gymnasium.Env[np.ndarray, int]):
    """Starts the :data:`HELPERS` when built and never stops them; its observations are
    their pids (the grandchild's too). ``hang_on``: a step with this action never returns.
    ``close_hangs``: ``close`` never returns either. ``step_s``: how long a step takes."""

    observation_space = gymnasium.spaces.Box(0, 2**31, (PER_ENV,), np.int64)
    action_space = gymnasium.spaces.Discrete(20)

    def __init__(
        self,
        hang_on: int | None = None,
        close_hangs: bool = False,
        record: str | None = None,
        step_s: float = 0.0,
    ) -> None:
        self.hang_on = hang_on
        self.step_s = step_s
        self.close_hangs = close_hangs
        self.helpers = [
            subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for command in HELPERS
        ]
        self.pids = [helper.pid for helper in self.helpers]
        for shell in self.helpers[1:]:
            assert shell.stdout is not None
            self.pids.append(int(shell.stdout.readline()))
        if record is not None:  # for the envs nobody steps (a vector env's probe env)
            with open(record, "a") as file:
                file.write("".join(f"{pid}\n" for pid in self.pids))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return np.array(self.pids), {}

    def step(self, action: int) -> Any:
        if action == self.hang_on:
            time.sleep(600)
        time.sleep(self.step_s)
        return np.array(self.pids), 0.0, False, False, {}

    def close(self) -> None:
        if self.close_hangs:
            time.sleep(600)


def running(pid: int) -> bool:
    """``pid`` is a helper still running (a zombie has ended; a pid reused by another
    program is not the helper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and command.split(b"\0")[0] in (b"sleep", b"sh")


def all_running(pids: list[int], timeout: float = 20.0) -> bool:
    """Every one of ``pids`` runs, or does within ``timeout``: a helper its shell just
    started may still be in ``exec``, whose command line reads empty for a moment."""
    deadline = time.monotonic() + timeout
    while not all(running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def all_ended(pids: list[int], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def helpers() -> Iterator[list[int]]:
    """The helper pids a test saw; whatever still runs of them at the end is killed, so a
    failing test leaves nothing behind."""
    seen: list[int] = []
    yield seen
    for pid in seen:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def pids_in(state: Any) -> list[int]:
    """The helper pids a reset state reports (a Step, or a BatchStep of several envs)."""
    observations = state.observations if isinstance(state, aioenv.BatchStep) else state.observation
    return [int(pid) for pid in np.ravel(observations)]


async def _helper_pids(pool: aioenv.WorkerPool[Any]) -> list[int]:
    return [pid for state, _ in await pool.reset_all() for pid in pids_in(state)]


@pytest.mark.parametrize("grouping", [{}, {"envs_per_process": 2}, {"envs_per_worker": 2}], ids=str)
async def test_aclose_ends_what_the_envs_started(
    helpers: list[int], grouping: dict[str, int]
) -> None:
    pool = aioenv.make_pool(StartsHelpers, 4, mode="process", **grouping)
    try:
        helpers.extend(await _helper_pids(pool))
        assert len(helpers) == 4 * PER_ENV * grouping.get("envs_per_worker", 1)
        assert all_running(helpers), [pid for pid in helpers if not running(pid)]
    finally:
        await pool.aclose()
    assert all_ended(helpers), [pid for pid in helpers if running(pid)]


@pytest.mark.loops
async def test_a_step_past_its_deadline_ends_what_the_killed_env_started(
    helpers: list[int],
) -> None:
    async with aioenv.make_pool(
        lambda: StartsHelpers(hang_on=13),
        2,
        mode="process",
        step_timeout=5.0,
        restart="on_failure",
    ) as pool:
        first = await _helper_pids(pool)
        helpers.extend(first)
        pool.send_action(13, 0)
        cut, _ = await pool.get_state()  # the episode ends, truncated
        assert cut.truncated and cut.info["aioenv"]["restarted"]
        pool.send_action(0, 0)
        restarted, _ = await pool.get_state()  # the fresh env's reset
        assert restarted.info["aioenv"]["restarted"] and not restarted.truncated
        again = pids_in(restarted)
        helpers.extend(again)
        stuck, other = first[:PER_ENV], first[PER_ENV:]
        assert all_ended(stuck), [pid for pid in stuck if running(pid)]
        assert all_running(other + again)  # the others' helpers run on
    assert all_ended(helpers)


@pytest.mark.loops
async def test_a_close_that_hangs_ends_what_the_env_started_with_the_child(
    helpers: list[int],
) -> None:
    worker = aioenv.ProcessWorker(lambda: StartsHelpers(close_hangs=True), cleanup_time=0.3)
    worker.send_action(RESET)
    helpers.extend(pids_in(await worker.get_state()))
    await worker.aclose()
    assert worker.exitcode == -signal.SIGTERM
    assert all_ended(helpers), [pid for pid in helpers if running(pid)]


async def test_a_child_killed_from_outside_leaves_nothing_its_env_started(
    helpers: list[int],
) -> None:
    async with aioenv.make_pool(StartsHelpers, 1, mode="process", restart="never") as pool:
        helpers.extend(await _helper_pids(pool))
        os.kill(pool.workers[0].pid, signal.SIGKILL)
        pool.send_action(1, 0)
        with pytest.raises(aioenv.WorkerDied):
            await pool.get_state()
        assert all_ended(helpers), [pid for pid in helpers if running(pid)]


@contextlib.contextmanager
def running_parent(tmp_path: Path, code: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``code`` run as a parent script with ``args``, its stdout piped, this folder on its
    path, in a session of its own (a group the test may kill whole), killed on the way out
    if it still runs; ``tmp_path`` is its temporary folder, where a killed parent leaves
    multiprocessing's."""
    script = tmp_path / "parent.py"
    script.write_text(code)
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path]),
        "TMPDIR": str(tmp_path),
    }
    parent = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        text=True,
        env=environment,
        start_new_session=True,
    )
    try:
        yield parent
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


PARENT = """
import asyncio, json, sys, time
import aioenv
from test_descendants import StartsHelpers


async def main(close, context=None):
    pool = aioenv.make_pool(StartsHelpers, 2, mode="process", context=context)
    pids = [int(pid) for state, _ in await pool.reset_all() for pid in state.observation]
    print(json.dumps(pids), flush=True)
    print(json.dumps([worker.pid for worker in pool.workers]), flush=True)
    if close == "never":
        return  # the interpreter exits with the pool open
    time.sleep(600)  # killed meanwhile


asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "end", ["parent killed", "parent's group killed", "left open", "a child, then the parent"]
)
def test_what_the_envs_started_ends_with_the_parent(
    tmp_path: Path, helpers: list[int], end: str
) -> None:
    """The parent dies (SIGKILL: its children notice and end their groups) or exits with
    the pool still open (its exit hook kills the children's groups). Or a child is killed
    and then the parent, which never sees the child's end (its loop is blocked in a
    sleep): the child's keeper ends its group."""
    with running_parent(tmp_path, PARENT, "never" if end == "left open" else "kill") as parent:
        assert parent.stdout is not None
        helpers.extend(json.loads(parent.stdout.readline()))
        workers = json.loads(parent.stdout.readline())
        assert len(helpers) == 2 * 5
        if end == "a child, then the parent":
            os.kill(workers[0], signal.SIGKILL)
            parent.kill()
        elif end == "parent killed":
            parent.kill()
        elif end == "parent's group killed":
            os.killpg(parent.pid, signal.SIGKILL)
        assert parent.wait(timeout=50) is not None
        assert all_ended(helpers), [pid for pid in helpers if running(pid)]


def test_children_started_with_fork_end_with_the_parent(tmp_path: Path, helpers: list[int]) -> None:
    """Under ``context="fork"`` (SB3's ``start_method="fork"``) a child is a copy of the
    parent, descriptors included: it holds none of the parent's ends of the children's
    sockets, so that the parent's death is each child's end-of-file, as under forkserver."""
    with running_parent(tmp_path, PARENT, "kill", "fork") as parent:
        assert parent.stdout is not None
        helpers.extend(json.loads(parent.stdout.readline()))
        workers = json.loads(parent.stdout.readline())
        try:
            assert len(helpers) == 2 * 5
            parent.kill()
            assert parent.wait(timeout=50) is not None
            assert all_ended(helpers), [pid for pid in helpers if running(pid)]
            assert wait_until(lambda: not any(map(process_running, workers)), 20)
        finally:
            for pid in filter(process_running, workers):
                os.kill(pid, signal.SIGKILL)


KEEPER_CHILD = """
import json, os, subprocess, sys
from aioenv.env_side._process_group import _keepers, keep_own_group, lead_own_group
assert lead_own_group()
keep_own_group()
helpers = [
    subprocess.Popen(["sleep", "600"]),
    subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 600 & echo $!; wait"], stdout=subprocess.PIPE),
]
grandchild = int(helpers[1].stdout.readline())
keeper = _keepers[0][0]
print(json.dumps([keeper, [h.pid for h in helpers] + [grandchild]]), flush=True)
sys.stdin.read()  # until the test kills this process
"""


def test_the_keeper_ends_the_group_of_a_process_killed_with_no_one_left_to_end_it(
    helpers: list[int],
) -> None:
    """A child killed while nobody ends its group (here its parent is no aioenv parent):
    its keeper, a shell outside the group, kills what is left of it, what ignores SIGTERM
    too. The keeper holds nothing of the child open but its pipe: the child's
    stdout ends with the child."""
    child = subprocess.Popen(
        [sys.executable, "-c", KEEPER_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        keeper, pids = json.loads(child.stdout.readline())
        helpers.extend(pids)
        assert all_running(pids)
        assert os.getpgid(keeper) not in (child.pid, os.getpgrp())  # outside both groups
        # Its pipe, and /dev/null at most: not the child's stdout, nor anything else.
        held = [os.readlink(f"/proc/{keeper}/fd/{fd}") for fd in os.listdir(f"/proc/{keeper}/fd")]
        assert len([name for name in held if name.startswith("pipe:")]) == 1
        assert all(name.startswith("pipe:") or name == os.devnull for name in held)
        child.kill()
        assert child.wait(timeout=50) == -signal.SIGKILL
        assert child.stdout.read() == ""  # its end: no keeper holds it open
        assert all_ended(pids)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


class KeepsStartingHelpers(gymnasium.Env[np.ndarray, int]):
    """At its reset, writes its process's pid to ``record`` and starts a helper that
    ignores SIGTERM (so whatever ends the group waits out its grace) and a thread that
    starts a ``sleep`` every 20 ms from then on, each pid written to ``record`` (after the
    process's) before the next starts."""

    observation_space = gymnasium.spaces.Box(0, 1, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, record: str) -> None:
        self.record = record

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self._write(os.getpid())
        self._write(subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 1; done"]).pid)
        threading.Thread(target=self._keep_starting, daemon=True).start()
        return np.zeros(1, np.float32), {}

    def _keep_starting(self) -> None:
        while True:
            self._write(subprocess.Popen(["sleep", "600"]).pid)
            time.sleep(0.02)

    def _write(self, pid: int) -> None:
        with open(self.record, "a") as file:
            file.write(f"{pid}\n")

    def step(self, action: int) -> Any:
        return np.zeros(1, np.float32), 0.0, False, False, {}


#: A parent whose env (one, in a child process) keeps starting helpers: as a pool's
#: process worker, or in an AioVectorEnv's child.
STARTING_PARENT = """
import asyncio, functools, sys, time
import aioenv
from test_descendants import KeepsStartingHelpers

source = functools.partial(KeepsStartingHelpers, sys.argv[2])
if sys.argv[1] == "pool":
    envs = aioenv.make_pool(source, 1, mode="process")
    asyncio.run(envs.reset_all())
else:
    envs = aioenv.AioVectorEnv(source, 1, mode="process")
    envs.reset(seed=0)
print("reset", flush=True)
time.sleep(600)  # killed meanwhile, envs open
"""


@pytest.mark.parametrize("face", ["pool", "vector"])
def test_an_env_that_goes_on_starting_processes_as_its_parent_dies_leaves_none(
    tmp_path: Path, helpers: list[int], face: str
) -> None:
    """The child finds its parent gone while its env's thread goes on starting helpers,
    and ends its group while one of them ignores SIGTERM: each helper ends, those started
    while the group was being ended included."""
    record = tmp_path / "helpers"
    with running_parent(tmp_path, STARTING_PARENT, face, str(record)) as parent:
        assert parent.stdout is not None
        assert parent.stdout.readline() == "reset\n"
        assert wait_until(lambda: len(record.read_text().split()) >= 6)
        child = int(record.read_text().split()[0])
        parent.kill()
        assert parent.wait(timeout=50) is not None
        assert wait_until(lambda: not process_running(child), timeout=50)
        helpers.extend(int(pid) for pid in record.read_text().split()[1:])
        assert all_ended(helpers), [pid for pid in helpers if running(pid)]


def test_a_process_that_does_not_lead_its_group_ends_nothing_of_it() -> None:
    """The guard: a child that could not lead a group of its own stays in its parent's,
    and neither it nor the parent ever signals that group."""
    assert signal_group(os.getpgrp(), signal.SIGKILL) is False
    assert signal_group(os.getpid(), signal.SIGKILL) in (False, os.getpid() != os.getpgrp())
    code = (
        "import subprocess, sys\n"
        "from aioenv.env_side._process_group import end_own_group\n"
        "sibling = subprocess.Popen(['sleep', '600'])\n"  # in the same group: not ours
        "end_own_group(grace=0.2)\n"
        "print(sibling.poll())\n"
        "sibling.kill()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True
    )
    assert done.stdout.split() == ["None"]  # the sibling still ran
    end_own_group()  # this process does not lead its group either: a no-op


async def test_a_helper_that_leaves_the_group_is_outside_the_promise(
    helpers: list[int],
) -> None:
    """A helper started in a session of its own (``start_new_session=True``) left on
    purpose: it is the env's to end."""

    class Detaches(StartsHelpers):
        def __init__(self) -> None:
            self.hang_on, self.close_hangs = None, False
            self.helpers = [
                subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(PER_ENV)
            ]
            self.pids = [helper.pid for helper in self.helpers]

    async with aioenv.make_pool(Detaches, 1, mode="process") as pool:
        helpers.extend(await _helper_pids(pool))
        child = pool.workers[0].pid
    # The close waited for the child to exit, so every signal the child or the parent
    # sends its group has been sent. That none reached the helpers is watched for a bounded
    # time, 0.5 s: a `sleep` that got SIGTERM or SIGKILL ends within milliseconds.
    assert not process_running(child)
    await asyncio.sleep(0.5)
    assert all(running(pid) for pid in helpers)


@pytest.mark.parametrize("how", [{"mode": "process"}, {"batch_size": 1}, "from_pool"], ids=str)
def test_a_vector_env_leaves_nothing_its_envs_started_the_probe_env_included(
    tmp_path: Path, helpers: list[int], how: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The env a vector env builds for its spaces (and to time a step, ``mode="auto"``,
    which chooses child processes for an env whose step takes far longer than a hand-off
    to a child) is built in a child process too."""
    monkeypatch.setattr(_choice, "busy_cores", lambda: 0.0)  # a quiet machine: children
    record = tmp_path / "pids"
    source = functools.partial(StartsHelpers, record=str(record), step_s=0.01)
    if how == "from_pool":
        envs = aioenv.AioVectorEnv.from_pool(aioenv.make_pool(source, 2, mode="process"))
    else:
        envs = aioenv.AioVectorEnv(source, 2, **how)
    with envs:
        envs.reset(seed=0)
        helpers.extend(int(pid) for pid in record.read_text().split())
        assert len(helpers) == 3 * PER_ENV  # the probe env's, then each worker's
        assert envs.mode_choice.mode == "process", envs.mode_choice
    assert all_ended(helpers), [pid for pid in helpers if running(pid)]


HUNG_VECTOR_PARENT = """
import functools, json, sys
import numpy as np
import aioenv
from test_descendants import StartsHelpers

source = functools.partial(StartsHelpers, hang_on=1)
envs = aioenv.AioVectorEnv(source, 2, mode="process")
observations, _ = envs.reset(seed=0)
print(json.dumps(observations.ravel().tolist()), flush=True)
envs.step(np.array([1, 1]))  # hangs in each child: the parent is killed meanwhile
"""


def test_a_vector_envs_children_end_with_the_parent_while_their_envs_hang(
    tmp_path: Path, helpers: list[int]
) -> None:
    """The parent dies while each child's env hangs in a step, so no child gets back to
    its loop, where it looks for the parent between requests: each still ends, with
    what its env started."""
    with running_parent(tmp_path, HUNG_VECTOR_PARENT) as parent:
        assert parent.stdout is not None
        helpers.extend(json.loads(parent.stdout.readline()))
        assert len(helpers) == 2 * PER_ENV and all_running(helpers)
        time.sleep(0.5)  # the step is sent: each env hangs
        parent.kill()
        assert parent.wait(timeout=50) is not None
        assert all_ended(helpers), [pid for pid in helpers if running(pid)]


class FailsToBuild(gymnasium.Env[np.ndarray, int]):
    def __init__(self) -> None:
        raise ValueError("no sandbox today")  # the probe's line


def test_an_env_that_fails_in_the_probe_child_raises_its_own_error_with_its_traceback() -> None:
    with pytest.raises(ValueError, match="no sandbox today") as raised:
        aioenv.AioVectorEnv(FailsToBuild, 2, mode="process")
    remote = str(raised.value.__cause__)
    assert 'raise ValueError("no sandbox today")  # the probe\'s line' in remote
    assert "in __init__" in remote

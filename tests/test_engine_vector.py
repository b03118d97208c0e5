"""AioVectorEnv's process steps through the engine (aioenv.engine._children): which vector
envs take it, that what they return is SyncVectorEnv's on both wakes, and what happens
when a child dies, an answer outgrows the socket's buffer or an option needs the pool.

The rollouts of every space, autoreset mode and info kind through process children are
the vector suites' (test_vector*.py): those run through the engine too."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import DictObservation
from gymnasium.vector import SyncVectorEnv
from support import process_running, wait_until, worker_processes

import aioenv
from aioenv.engine._buffer import PackedInfos
from aioenv.engine._wake import Wake

pytestmark = pytest.mark.timeout(120)

N = 4


class Chatter(gymnasium.Env[np.ndarray, int]):
    """Gives an info on some steps only (every third), and a large one when asked with
    action 2: a message beside the buffer, now and then, of any size."""

    def __init__(self) -> None:
        self.observation_space = gymnasium.spaces.Box(-1e6, 1e6, (3,), np.float64)
        self.action_space = gymnasium.spaces.Discrete(3)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.normal(size=3), {"start": self.t}

    def step(self, action: int) -> Any:
        self.t += 1
        info: dict[str, Any] = {"third": self.t} if self.t % 3 == 0 else {}
        if action == 2:
            info["big"] = np.arange(1 << 18, dtype=np.float64)  # 2 MiB: far past a socket's buffer
        observation = self.np_random.normal(size=3) + action
        return observation, float(action), self.t % 7 == 0, False, info


class ExitsOnTwo(Chatter):
    """Its process exits (as a segfault would end it) when stepped with action 2."""

    def step(self, action: int) -> Any:
        if action == 2:
            os._exit(3)
        return super().step(action)


def _same(mine: Any, theirs: Any) -> None:
    if isinstance(theirs, dict):
        assert mine.keys() == theirs.keys()
        for key in theirs:
            _same(mine[key], theirs[key])
    elif isinstance(theirs, tuple):
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs, strict=True):
            _same(a, b)
    elif isinstance(theirs, np.ndarray) and theirs.dtype == object:
        assert mine.dtype == object and len(mine) == len(theirs)
        for a, b in zip(mine, theirs, strict=True):
            _same(a, b)
    else:
        np.testing.assert_array_equal(mine, theirs)


def test_process_steps_go_through_the_engine_unless_an_option_needs_the_pool() -> None:
    with aioenv.AioVectorEnv("CartPole-v1", N, mode="process") as envs:
        with pytest.raises(AttributeError, match="in child processes through the engine"):
            _ = envs.pool
        assert sum(envs.group_sizes) == N
    with (
        aioenv.AioVectorEnv("CartPole-v1", N, mode="process", step_timeout=60.0) as timed,
        pytest.raises(AttributeError, match="through the engine"),
    ):
        _ = timed.pool  # deadlines: timed waits of the engine's
    with (
        aioenv.AioVectorEnv("CartPole-v1", N, mode="process", restart="on_failure") as kept,
        pytest.raises(AttributeError, match="through the engine"),
    ):
        _ = kept.pool  # restarts: the engine's, in the children and of them
    with (
        aioenv.AioVectorEnv("CartPole-v1", N, mode="process", episode_timeout=60.0) as budget,
        pytest.raises(AttributeError, match="through the engine"),
    ):
        _ = budget.pool  # episode budgets: the engine's, an env to a child
    with aioenv.AioVectorEnv("CartPole-v1", N, mode="process", shared_memory=False) as pooled:
        assert len(pooled.pool.workers) == len(pooled.group_sizes)  # a pool option: the pool's
    with (
        aioenv.AioVectorEnv("CartPole-v1", N, mode="process", shared_memory=True) as shared,
        pytest.raises(AttributeError, match="through the engine"),
    ):
        _ = shared.pool  # the engine's buffer is shared memory
    with aioenv.AioVectorEnv("CartPole-v1", N, mode="process", envs_per_process=2) as paired:
        assert paired.group_sizes == (2, 2)  # two envs to a child, through the engine
        with pytest.raises(AttributeError, match="through the engine"):
            _ = paired.pool
    with aioenv.AioVectorEnv("CartPole-v1", N, mode="process", envs_per_process=3) as uneven:
        assert len(uneven.pool.workers) == N  # children of 3 and 1: the pool's, a worker an env
    with (
        aioenv.AioVectorEnv("CartPole-v1", N, mode="process", batch_size=2) as piped,
        pytest.raises(AttributeError, match="through the engine"),
    ):
        _ = piped.pool  # pipelined: the engine's too


@pytest.mark.parametrize("autoreset", ["next_step", "same_step", "disabled"])
def test_a_rollout_through_the_engine_is_sync_vector_envs(wake_kind: str, autoreset: str) -> None:
    modes = {"next_step": "NextStep", "same_step": "SameStep", "disabled": "Disabled"}
    reference = SyncVectorEnv(
        [Chatter] * N, autoreset_mode=gymnasium.vector.AutoresetMode(modes[autoreset])
    )
    with aioenv.AioVectorEnv(
        [Chatter] * N, mode="process", envs_per_worker=2, autoreset=autoreset
    ) as ours:
        assert ours.group_sizes == (2, 2)
        _same(ours.reset(seed=5), reference.reset(seed=5))
        rng = np.random.default_rng(0)
        for _ in range(40):
            actions = rng.integers(0, 3, N)
            mine, theirs = ours.step(actions), reference.step(actions)
            for a, b in zip(mine, theirs, strict=True):
                _same(a, b)
            if autoreset == "disabled":
                ended = mine[2] | mine[3]
                if ended.any():
                    _same(
                        ours.reset(options={"reset_mask": ended}),
                        reference.reset(options={"reset_mask": ended}),
                    )
        assert ours.get_attr("t") == reference.get_attr("t")
        ours.set_attr("t", [10, 20, 30, 40])
        assert ours.call("__getattribute__", "t") == (10, 20, 30, 40)


class Shifting(Chatter):
    """Infos whose keys and types change by the step: a flat layout (in the buffer from
    its second step in a row), another flat one, one that is not flat (a str)."""

    def step(self, action: int) -> Any:
        observation, reward, terminated, truncated, _ = super().step(action)
        info: dict[str, Any] = {"a": float(observation[0]), "b": self.t}
        if self.t % 5 == 2:
            info = {"c": np.float32(reward), "ended": terminated}
        elif self.t % 5 == 4:
            info["tag"] = f"t{self.t}"
        return observation, reward, terminated, truncated, info


@pytest.mark.parametrize("autoreset", ["next_step", "same_step"])
def test_flat_infos_come_through_the_buffer_once_their_keys_are_known(
    autoreset: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_buffer = []
    read = PackedInfos.read
    monkeypatch.setattr(
        PackedInfos, "read", lambda self, w, *parts: in_buffer.append(w) or read(self, w, *parts)
    )
    modes = {"next_step": "NextStep", "same_step": "SameStep"}
    reference = SyncVectorEnv(
        [Shifting] * N, autoreset_mode=gymnasium.vector.AutoresetMode(modes[autoreset])
    )
    with aioenv.AioVectorEnv(
        [Shifting] * N, mode="process", envs_per_worker=2, autoreset=autoreset
    ) as ours:
        _same(ours.reset(seed=3), reference.reset(seed=3))
        rng = np.random.default_rng(1)
        for _ in range(30):
            actions = rng.integers(0, 2, N)  # no action 2: no large info
            _same(ours.step(actions), reference.step(actions))
    assert in_buffer.count(0) >= 5 and in_buffer.count(1) >= 5  # steps with a known layout


def test_pipelined_flat_infos_come_through_the_buffer_row_by_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    in_buffer = []
    read = PackedInfos.read
    monkeypatch.setattr(
        PackedInfos, "read", lambda self, w, *parts: in_buffer.append(w) or read(self, w, *parts)
    )
    # Each env alone, stepped with action 0 from its seed: what its rows must say.
    expected: dict[int, list[dict[str, Any]]] = {}
    for env_id in range(N):
        env = Shifting()
        env.reset(seed=3 + env_id)
        expected[env_id] = [env.step(0)[4] for _ in range(6)]  # within the first episode
    seen: dict[int, list[dict[str, Any]]] = {env_id: [] for env_id in range(N)}
    with aioenv.AioVectorEnv(
        [Shifting] * N, mode="process", envs_per_worker=2, batch_size=2
    ) as ours:
        ours.async_reset(seed=3)
        while min(len(rows) for rows in seen.values()) < 7:  # each env's reset, 6 steps
            *_, infos = ours.recv()
            for row, env_id in enumerate(infos["env_id"].tolist()):
                keys = [key for key in infos if key[0] != "_" and key != "env_id"]
                seen[env_id].append({k: infos[k][row] for k in keys if infos[f"_{k}"][row]})
            ours.send(np.zeros(2, np.int64))
    for env_id in range(N):
        assert seen[env_id][0] == {"start": 0}  # its reset's, whenever it came back
        assert seen[env_id][1:7] == expected[env_id]
    assert len(in_buffer) >= 4


def test_dict_observations_come_from_the_buffer_as_copies_or_views() -> None:
    reference = SyncVectorEnv([DictObservation] * N)
    with aioenv.AioVectorEnv([DictObservation] * N, mode="process", envs_per_worker=2) as ours:
        _same(ours.reset(seed=1)[0], reference.reset(seed=1)[0])
        first = ours.step(np.ones(N, np.int64))[0]
        _same(first, reference.step(np.ones(N, np.int64))[0])
        kept = {key: value.copy() for key, value in first.items()}
        ours.step(np.zeros(N, np.int64))
        _same(first, kept)  # copy=True: a step's observations are its own


def test_a_child_that_dies_is_reported_by_name_and_the_vector_env_cannot_go_on() -> None:
    with aioenv.AioVectorEnv([ExitsOnTwo] * N, mode="process", envs_per_worker=2) as envs:
        envs.reset(seed=0)
        with pytest.raises(
            aioenv.WorkerDied, match=r"process worker 1 \(envs 2-3\): .*exited with code 3"
        ):
            envs.step(np.array([0, 0, 2, 0]))
        with pytest.raises(
            aioenv.WorkerRemoved,
            match=r"envs 2-3 of the AioVectorEnv \(process worker 1 \(envs 2-3\)\) failed for good",
        ):
            envs.step(np.zeros(N, np.int64))


def test_a_child_killed_between_steps_is_noticed_at_the_next_step(wake_kind: str) -> None:
    with aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=2) as envs:
        envs.reset(seed=0)
        pids = envs.apply(lambda env: os.getpid())
        assert pids[0] == pids[1] != pids[2] == pids[3]
        os.kill(pids[0], signal.SIGKILL)
        with pytest.raises(aioenv.WorkerDied, match=r"process worker 0 \(envs 0-1\)"):
            envs.step(np.zeros(N, np.int64))


@pytest.mark.parametrize("call", ["reset", "get_attr"])
def test_a_child_killed_between_steps_is_noticed_by_a_reset_or_a_call(call: str) -> None:
    # These go to a child as messages on its socket, whose far end its death closed.
    with aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=2) as envs:
        envs.reset(seed=0)
        pid = envs.apply(lambda env: os.getpid())[2]
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: not process_running(pid))  # its socket is closed
        with pytest.raises(  # was: BrokenPipeError
            aioenv.WorkerDied, match=r"process worker 1 \(envs 2-3\): .*exited with code -9"
        ):
            envs.reset(seed=1) if call == "reset" else envs.get_attr("t")
        with pytest.raises(aioenv.WorkerRemoved, match="envs 2-3"):
            envs.step(np.zeros(N, np.int64))


def _memory_files() -> int:
    """This process's descriptors of aioenv's memory files (a buffer's, its mapping's),
    once what earlier tests left to the garbage collector is collected."""
    gc.collect()
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += "memfd:aioenv" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed by now
    return count


def test_closing_lets_go_of_the_buffer_unless_a_kept_view_still_reads_it() -> None:
    before = _memory_files()
    with aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=2) as envs:
        envs.reset(seed=0)
        assert _memory_files() > before
        envs.step(np.zeros(N, np.int64))
    assert _memory_files() == before  # the file and its mapping's descriptor
    viewed = aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=2, copy=False)
    with viewed:
        viewed.reset(seed=0)
        kept = viewed.step(np.zeros(N, np.int64))[0]
    assert _memory_files() == before + 1  # the mapping lives while the view does
    assert np.isfinite(kept).all()
    del viewed, kept
    assert _memory_files() == before


def _broken() -> gymnasium.Env[Any, Any]:
    raise RuntimeError("no env today")


def test_an_env_that_fails_to_build_fails_the_constructor_by_name() -> None:
    # The probe env is the first one; the second is built in its child only.
    with pytest.raises(
        aioenv.EnvError, match=r"process worker 1 \(env 1\): .*RuntimeError.*no env today"
    ):
        aioenv.AioVectorEnv([Chatter, _broken], mode="process", envs_per_worker=1)


def test_ctrl_c_while_closing_still_ends_every_child_and_frees_the_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aioenv.engine._family import Child

    before = _memory_files()
    envs = aioenv.AioVectorEnv([HangsInClose] * N, mode="process", envs_per_worker=1)
    envs.reset(seed=0)
    envs.set_attr("hang", True)  # closing waits cleanup_time (5 s): time to press Ctrl-C
    ends = Child.end
    interrupted: list[bool] = []

    def interrupted_once(self: Child, *graces: float) -> None:
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt  # as a Ctrl-C while the parent waits for a child
        ends(self, *graces)

    monkeypatch.setattr(Child, "end", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        envs.close()
    assert wait_until(lambda: not worker_processes())  # they hung in close for good
    assert _memory_files() == before


def test_ctrl_c_as_a_child_is_ended_while_closing_ends_it_once_and_frees_the_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl-C landing just as a child's end returns, before closing counts it ended:
    the children left are ended, that one not again (its descriptors closed once), and
    the buffer and the answer wake are freed before the KeyboardInterrupt goes on."""
    from aioenv.engine._family import Child

    before = _memory_files()
    envs = aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=1)
    envs.reset(seed=0)
    ends = Child.end
    interrupted: list[bool] = []

    def interrupted_as_it_returns(self: Child, *graces: float) -> None:
        ends(self, *graces)
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt  # as a Ctrl-C landing before the caller goes on

    monkeypatch.setattr(Child, "end", interrupted_as_it_returns)
    with pytest.raises(KeyboardInterrupt):  # was: ValueError: process object is closed
        envs.close()
    assert wait_until(lambda: not worker_processes())
    assert _memory_files() == before


def _descriptors() -> int:
    """How many descriptors this process holds, once what earlier tests left to the
    garbage collector is collected."""
    gc.collect()
    return len(os.listdir("/proc/self/fd")) - 1  # the listing's own


def test_a_child_that_fails_to_start_fails_the_constructor_with_its_error_and_leaks_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import aioenv.engine._start as start_module

    starts = start_module._start_process

    def second_fails(process: Any) -> None:
        if "process worker 1" in process.name:
            raise OSError("no more processes")  # as a start method's failure would
        starts(process)

    with aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=1):
        pass  # the probe's start, and what a first vector env leaves, out of the count
    before = _descriptors()
    monkeypatch.setattr(start_module, "_start_process", second_fails)
    with pytest.raises(OSError, match="no more processes"):  # was: process not started
        aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=1)
    assert _descriptors() == before  # the failed child's sockets and request wake too


def test_a_child_that_dies_before_it_is_sent_its_descriptors_fails_the_constructor_as_its_death(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child may die as soon as it has started (killed from outside, out of memory),
    before the parent sends it the buffer's and the wakes' descriptors: the send then
    finds its socket's far end closed, and the constructor fails with the child's death."""
    import aioenv.engine._start as start_module

    starts = start_module._start_process

    def second_dies(process: Any) -> None:
        starts(process)
        if "process worker 1" in process.name:
            process.kill()
            process.join()

    with aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=1):
        pass  # the probe's start, and what a first vector env leaves, out of the count
    before = _descriptors()
    monkeypatch.setattr(start_module, "_start_process", second_dies)
    with pytest.raises(  # was: BrokenPipeError
        aioenv.WorkerDied, match=r"process worker 1 \(env 1\): .*exited with code -9 while"
    ):
        aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=1)
    assert _descriptors() == before


class Sleeper(Chatter):
    """Sleeps far past any test's patience when stepped with action 2."""

    def step(self, action: int) -> Any:
        if action == 2:
            time.sleep(3600)
        return super().step(action)


def test_closing_while_a_child_hangs_in_a_step_ends_it() -> None:
    envs = aioenv.AioVectorEnv([Sleeper] * N, mode="process", envs_per_worker=2)
    try:
        envs.reset(seed=0)
        envs.step_async(np.array([0, 0, 2, 0]))  # the second child never answers
    finally:
        started = time.monotonic()
        envs.close()  # waits cleanup_time for the answers and the children, then kills
    assert time.monotonic() - started < 60  # bounded; no_leaks checks nothing is left


class HangsOrSaysItClosed(Chatter):
    """Hangs far past any test's patience when stepped with action 1 (action 2: a large
    info, as a Chatter's); its ``close`` leaves a file named for its env in ``folder``."""

    folder = ""

    def step(self, action: int) -> Any:
        if action == 1:
            time.sleep(3600)
        return super().step(action)

    def close(self) -> None:
        if self.folder:
            Path(self.folder, f"closed-{self.index}").touch()


@pytest.mark.serial  # it times a close, alone after the parallel part of make test
def test_closing_while_a_child_hangs_in_a_step_waits_cleanup_time_once(tmp_path: Path) -> None:
    cleanup_time = 3.0
    envs = aioenv.AioVectorEnv(
        [HangsOrSaysItClosed] * N, mode="process", envs_per_worker=1, cleanup_time=cleanup_time
    )
    envs.reset(seed=0)
    envs.set_attr("index", list(range(N)))
    envs.set_attr("folder", str(tmp_path))
    envs.step_async(np.array([2, 1, 2, 0]))  # child 1 never answers; 0 and 2 at length
    started = time.monotonic()
    envs.close()  # the others close their envs meanwhile; child 1 is killed after it
    # One cleanup_time (3 s) and the kill; it waited cleanup_time for the answers, then
    # cleanup_time again for the children to close (6 s).
    assert time.monotonic() - started < 2 * cleanup_time
    assert sorted(path.name for path in tmp_path.iterdir()) == ["closed-0", "closed-2", "closed-3"]


class HangsInClose(Chatter):
    """Its ``close`` hangs far past any test's patience once ``hang`` is set."""

    hang = False

    def close(self) -> None:
        if self.hang:
            time.sleep(3600)


@pytest.mark.serial  # it times a close, alone after the parallel part of make test
def test_closing_children_whose_envs_hang_in_close_waits_cleanup_time_once() -> None:
    cleanup_time, children = 2.0, 2 * N
    envs = aioenv.AioVectorEnv(
        [HangsInClose] * children, mode="process", envs_per_worker=1, cleanup_time=cleanup_time
    )
    envs.reset(seed=0)
    envs.set_attr("hang", True)  # in the children only, not in the probe env
    started = time.monotonic()
    envs.close()  # every child is asked at once: one cleanup_time for all, not one each
    # One cleanup_time for all is 2 s; one each took children * cleanup_time (16 s).
    assert time.monotonic() - started < 4 * cleanup_time


class HangsInCloseIgnoringSigterm(HangsInClose):
    """Its process ignores SIGTERM while its ``close`` hangs (once ``hang`` is set)."""

    def close(self) -> None:
        if self.hang:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        super().close()


@pytest.mark.serial  # it times a close, alone after the parallel part of make test
def test_closing_children_that_ignore_sigterm_gives_them_one_grace_together() -> None:
    cleanup_time, children = 0.5, 2 * N
    envs = aioenv.AioVectorEnv(
        [HangsInCloseIgnoringSigterm] * children,
        mode="process",
        envs_per_worker=1,
        cleanup_time=cleanup_time,
    )
    envs.reset(seed=0)
    envs.set_attr("hang", True)
    started = time.monotonic()
    envs.close()  # cleanup_time, SIGTERM to all, a second's grace for all, SIGKILL
    assert time.monotonic() - started < 6.0  # a second of grace per child took 8.5-13 s


def test_a_step_interrupted_while_it_waits_leaves_the_next_step_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reference = SyncVectorEnv([Chatter] * N)
    with aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=2) as ours:
        _same(ours.reset(seed=2), reference.reset(seed=2))
        waits = Wake.wait
        interrupted = []

        def interrupt_once(self: Wake, *args: Any, **kwargs: Any) -> int:
            if not interrupted:
                interrupted.append(True)
                raise KeyboardInterrupt  # as a Ctrl-C while the parent sleeps
            return waits(self, *args, **kwargs)

        monkeypatch.setattr(Wake, "wait", interrupt_once)
        first = np.array([1, 0, 1, 0])
        with pytest.raises(KeyboardInterrupt):
            ours.step(first)
        reference.step(first)  # the children stepped it all the same
        monkeypatch.setattr(Wake, "wait", waits)
        for actions in ([0, 1, 0, 1], [1, 1, 0, 0]):
            _same(ours.step(np.array(actions)), reference.step(np.array(actions)))


#: The deadline of the deadline tests: a request that hangs is past it, one that does not is
#: well within it on a loaded 2-core machine.
DEADLINE = 10.0


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_step_past_its_deadline_kills_its_child_and_names_it(wake_kind: str) -> None:
    with aioenv.AioVectorEnv(
        [Sleeper] * N, mode="process", envs_per_worker=2, step_timeout=DEADLINE
    ) as envs:
        envs.reset(seed=0)
        pids = envs.apply(lambda env: os.getpid())
        envs.step(np.zeros(N, np.int64))  # within its deadline
        with pytest.raises(
            aioenv.WorkerTimeout,
            match=r"process worker 1 \(envs 2-3\): request \d+ \(step\) ran [\d.]+ s, past "
            r"its deadline of 10 s; its process was killed",
        ):
            envs.step(np.array([0, 0, 2, 0]))
        assert _pid_gone(pids[2]) and not _pid_gone(pids[0])
        with pytest.raises(aioenv.WorkerRemoved, match=r"envs 2-3 .*WorkerTimeout"):
            envs.step(np.zeros(N, np.int64))


def test_a_child_past_its_deadline_already_gone_when_signalled_is_the_deadlines_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The signal to the child's process group may kill it, and the forkserver (its parent)
    reap it, before its exit status reaches the parent: the signal to the child itself
    then finds no such process, and the error is still the deadline's."""
    real_kill = os.kill

    def kill_gone(pid: int, sig: int) -> None:
        real_kill(pid, sig)
        if sig == signal.SIGKILL:
            raise ProcessLookupError(3, "No such process")

    with aioenv.AioVectorEnv(
        [Sleeper] * N, mode="process", envs_per_worker=2, step_timeout=DEADLINE
    ) as envs:
        envs.reset(seed=0)
        pids = envs.apply(lambda env: os.getpid())
        monkeypatch.setattr("aioenv.engine._start.os.kill", kill_gone)
        with pytest.raises(aioenv.WorkerTimeout, match=r"process worker 1 \(envs 2-3\)"):
            envs.step(np.array([0, 0, 2, 0]))
        assert _pid_gone(pids[2]) and not _pid_gone(pids[0])


class SlowReset(Chatter):
    """Its reset sleeps ``RESET_SLEEP`` seconds, but for the first; options
    ``{"hang": True}`` make it sleep far past any test's patience."""

    RESET_SLEEP = 6.0

    def __init__(self) -> None:
        super().__init__()
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.resets += 1
        if options and options.get("hang"):
            time.sleep(3600)
        elif self.resets > 1:
            time.sleep(self.RESET_SLEEP)
        return super().reset(seed=seed, options=options)


@contextlib.contextmanager
def _descriptors_taken_below(number: int) -> Iterator[None]:
    """Every free descriptor number below ``number`` taken meanwhile, so that new ones
    come above it (as in a process that holds many: hundreds of children, open files)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < number + 256:
        pytest.skip(f"this process may open only {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, number + 256), hard))
    taken: list[int] = []
    try:
        while not taken or taken[-1] < number:
            taken.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_start_deadline_holds_for_children_whose_descriptors_are_numbered_past_1024() -> None:
    # select() takes no descriptor numbered 1024 or more; the start-up deadline's wait did.
    with (
        _descriptors_taken_below(1100),
        aioenv.AioVectorEnv(
            [Chatter] * 2, mode="process", envs_per_worker=1, step_timeout=DEADLINE
        ) as envs,
    ):
        envs.reset(seed=0)  # was: ValueError: filedescriptor out of range in select()
        envs.step(np.zeros(2, np.int64))


class SlowFirstReset(Chatter):
    """Its first reset takes ``BOOT`` seconds (a simulator that boots), the others none."""

    BOOT = 3.0

    def __init__(self) -> None:
        super().__init__()
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.resets += 1
        if self.resets == 1:
            time.sleep(self.BOOT)
        return super().reset(seed=seed, options=options)


def test_the_first_reset_of_a_childs_envs_is_held_to_the_start_up_deadline() -> None:
    # As for every worker kind: building the envs and their first reset get start_timeout
    # (None: max(step_timeout, reset_timeout, 60)); the resets after it, reset_timeout.
    with aioenv.AioVectorEnv(
        [SlowFirstReset] * 2, mode="process", envs_per_worker=1, step_timeout=1.0
    ) as envs:
        envs.reset(seed=0)  # was: WorkerTimeout: request 4 (reset) ran 1.00 s, past ... 1 s
        envs.step(np.zeros(2, np.int64))
        assert envs.get_attr("resets") == (1, 1)


def test_a_reset_past_its_deadline_kills_its_child() -> None:
    with aioenv.AioVectorEnv(
        [SlowReset] * N, mode="process", envs_per_worker=2, reset_timeout=DEADLINE
    ) as envs:
        envs.reset(seed=0)  # the first reset is the start-up's (start_timeout)
        with pytest.raises(aioenv.WorkerTimeout, match=r"\(reset\) ran .* deadline of 10 s"):
            envs.reset(seed=0, options={"hang": True})


@pytest.mark.parametrize("autoreset", ["next_step", "same_step"])
def test_a_step_that_resets_an_env_gets_the_reset_deadline_too(autoreset: str) -> None:
    # Chatter ends an episode at its 7th step; the autoreset then sleeps RESET_SLEEP, past
    # the step deadline but well within the step's and the reset's together.
    with aioenv.AioVectorEnv(
        [SlowReset] * N,
        mode="process",
        envs_per_worker=2,
        autoreset=autoreset,
        step_timeout=SlowReset.RESET_SLEEP - 1,
        reset_timeout=60.0,
    ) as envs:
        envs.reset(seed=0)
        ends = 0
        for _ in range(9):
            ends += int(envs.step(np.zeros(N, np.int64))[2].sum())
        assert ends == N
        assert envs.get_attr("resets") == (2,) * N


def _builds_forever() -> gymnasium.Env[Any, Any]:
    time.sleep(3600)
    raise AssertionError("unreachable")


def test_a_build_past_the_start_deadline_fails_the_constructor_and_leaves_nothing() -> None:
    # The probe env is the first one; the second is built in its child only.
    with pytest.raises(aioenv.WorkerTimeout, match=r"process worker 1 \(env 1\): .*start-up"):
        aioenv.AioVectorEnv(
            [Chatter, _builds_forever], mode="process", envs_per_worker=1, start_timeout=DEADLINE
        )


#: The test process, where a HangsInChildren space loads at once (None in children).
_MAIN_PID: int | None = None


class HangsInChildren(gymnasium.spaces.Box):
    """A Box whose copy in any other process than the test's takes far past any deadline
    to load: a child handed it (with its plan) hangs before its program starts."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        if os.getpid() != _MAIN_PID:
            time.sleep(3600)
        super().__setstate__(state)


class HangingSpace(Chatter):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = HangsInChildren(-1e6, 1e6, (3,), np.float64)


def test_a_child_that_hangs_before_its_program_starts_is_killed() -> None:
    # The child loads its plan (the spaces in it) before it leads a process group of its
    # own: killing that group alone would leave it running.
    globals()["_MAIN_PID"] = os.getpid()
    try:
        with pytest.raises(
            aioenv.WorkerTimeout, match=r"process worker 0 \(envs 0-1\): .*start-up"
        ):
            aioenv.AioVectorEnv(
                [HangingSpace] * 2, mode="process", envs_per_worker=2, start_timeout=2.0
            )
    finally:
        globals()["_MAIN_PID"] = None


def _go_round(envs: aioenv.AioVectorEnv) -> None:
    """Receive and send back until a recv raises (envs 2-3 may come back first, as often as
    they do)."""
    while True:
        envs.recv()
        envs.send(np.zeros(2, np.int64))


def test_a_pipelined_child_past_its_deadline_fails_the_recv_that_waits_for_it() -> None:
    with aioenv.AioVectorEnv(
        [Sleeper] * N, mode="process", envs_per_worker=2, batch_size=2, step_timeout=DEADLINE
    ) as envs:
        envs.async_reset(seed=0)
        hung = False
        while not hung:  # the first child's envs hang once they come back
            *_, infos = envs.recv()
            hung = infos["env_id"][0] == 0
            envs.send(np.array([0, 2]) if hung else np.zeros(2, np.int64))
        *_, infos = envs.recv()  # only the other child can answer now
        assert infos["env_id"].tolist() == [2, 3]
        envs.send(np.zeros(2, np.int64))
        with pytest.raises(
            aioenv.WorkerTimeout, match=r"process worker 0 \(envs 0-1\): request \d+ \(step\)"
        ):
            _go_round(envs)
        with pytest.raises(aioenv.WorkerRemoved, match=r"envs 0-1 .*WorkerTimeout"):
            envs.recv()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"idle_spin": 1.0}, r"idle_spin must be a number of seconds from 0 to 0\.01, got 1\.0"),
        ({"step_timeout": -1}, r"step_timeout must be None or a number > 0, got -1"),
    ],
)
def test_a_bad_engine_option_is_refused_by_name(option: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        aioenv.AioVectorEnv([Chatter] * N, mode="process", envs_per_worker=2, **option)


@contextlib.contextmanager
def beside_sync_vector_env(env: Any) -> Iterator[tuple[aioenv.AioVectorEnv, SyncVectorEnv]]:
    """The engine's vector env of ``env`` (two children of two) and gymnasium's
    ``SyncVectorEnv`` of the same envs, both reset with seed 0."""
    make = (lambda: gymnasium.make(env)) if isinstance(env, str) else env
    reference = SyncVectorEnv([make] * N)
    with (
        aioenv.AioVectorEnv(env, N, mode="process", envs_per_worker=2) as ours,
        contextlib.closing(reference),
    ):
        for each in (ours, reference):
            each.reset(seed=0)
        yield ours, reference


def test_actions_that_do_not_fit_the_buffer_are_refused_as_sync_vector_env_refuses_them() -> None:
    """The buffer takes actions only of the batch's exact form: one action is no batch of
    them (nothing is broadcast), and a pair with a part left out is no pair. The general
    way then says what is wrong, and the env steps on. A dict of actions must have the
    space's keys."""
    from envs import DictSteered, Steered

    with beside_sync_vector_env("CartPole-v1") as (ours, reference):
        for env in (ours, reference):
            with pytest.raises(TypeError, match="Unable to iterate"):
                env.step(0)
        assert ours.step(np.zeros(N, np.int64))[0].shape == (N, 4)
    gears, vectors = np.array([0, 1, 2, 0]), np.full((N, 2), 0.5, np.float32)
    with beside_sync_vector_env(Steered) as (ours, reference):
        for env in (ours, reference):
            with pytest.raises(IndexError):  # gymnasium's iterate: the vectors left out
                env.step((gears,))
        observations = ours.step((gears, vectors))[0]
        np.testing.assert_array_equal(observations, np.column_stack([gears, vectors]))
    # A dict of actions: the buffer takes its own keys only; anything else goes the general
    # way, whose answer is gymnasium's (extra keys ignored, a missing one a KeyError).
    with beside_sync_vector_env(DictSteered) as (ours, reference):
        for env in (ours, reference):
            with pytest.raises(TypeError, match="tuple indices"):  # a pair is no dict
                env.step((gears, vectors))
            with pytest.raises(KeyError, match="vector"):
                env.step({"gear": gears})
            extra = {"gear": gears, "vector": vectors, "brake": gears}
            np.testing.assert_array_equal(env.step(extra)[0], np.column_stack([gears, vectors]))

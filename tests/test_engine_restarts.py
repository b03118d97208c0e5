"""Restarts through the engine (``AioVectorEnv(..., mode="process", restart="on_failure")``):
a child that dies or hangs is replaced by a new one, under the restart budget, and the
episodes its envs left open end cut short, by the rule a pool's workers follow; the other
child's envs are untouched. (An env that merely raises is restarted in its child, env by
env: test_inline_restarts.py compares that with envs in line.)"""

from __future__ import annotations

import errno
import functools
import gc
import os
import signal
import time
from typing import Any

import anyio
import numpy as np
import pytest
from envs import Walk
from support import process_running, wait_until

import aioenv
from aioenv.engine._child import SMALL

pytestmark = pytest.mark.timeout(120)

AUTORESETS = ["next_step", "same_step", "disabled"]
N = 4
ZEROS = np.zeros(N, np.int64)
KILL_CHILD_1 = np.array([0, 0, 2, 0])  # action 2 to env 2: its child (envs 2-3) dies
DEADLINE = 10.0  # far past a step that does not hang, on a loaded machine


class ExitsOnTwo(Walk):
    """Its process exits (as a segfault would end it) when stepped with action 2, or when
    ``maybe_exit`` is called."""

    def step(self, action: int) -> Any:
        if action == 2:
            os._exit(3)
        return super().step(action)

    def maybe_exit(self) -> str:
        os._exit(3)


class Calm(Walk):
    def maybe_exit(self) -> str:
        return "still here"


class HangsOnTwo(Walk):
    """Its step hangs, far past any deadline, when stepped with action 2."""

    def step(self, action: int) -> Any:
        if action == 2:
            time.sleep(600)
        return super().step(action)


class ExitsOnReset(Walk):
    """Its process exits at every reset: a crash loop, whatever is restarted."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        os._exit(4)


def _marker(info: dict[str, Any], row: int) -> str | None:
    """The reason of the restart row ``row``'s info names, if any."""
    restarted = info.get("aioenv", {})
    if not restarted or not restarted["_restarted"][row]:
        return None
    return str(restarted["reason"][row])


def _run(autoreset: str, factories: list[Any], fault: Any = KILL_CHILD_1, **options: Any) -> Any:
    """Reset, a step with ``fault``, and the step after it (a masked reset of the
    cut-short envs first, under ``autoreset="disabled"``); the failures reported, and the
    pids of the children before and after."""
    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        factories,
        mode="process",
        envs_per_worker=2,
        restart="on_failure",
        seed=5,
        autoreset_mode=autoreset,
        on_failure=failures.append,
        **options,
    ) as envs:
        with pytest.raises(AttributeError, match="through the engine"):
            _ = envs.pool
        first = envs.reset(seed=0)
        before = envs.apply(lambda env: os.getpid())
        faulty = envs.step(fault)
        reset = None
        if autoreset == "disabled":
            reset = envs.reset(options={"reset_mask": np.array([False, False, True, True])})
        after = envs.step(ZEROS)
        pids = envs.apply(lambda env: os.getpid())
    return first, faulty, reset, after, failures, before, pids


@pytest.mark.parametrize("autoreset", AUTORESETS)
def test_a_child_that_dies_is_replaced_and_its_open_episodes_end_cut_short(autoreset: str) -> None:
    first, faulty, reset, after, failures, before, pids = _run(autoreset, [ExitsOnTwo] * N)
    assert [type(error) for error in failures] == [aioenv.WorkerDied]
    assert "process worker 1 (envs 2-3)" in str(failures[0])
    assert "cannot go on" not in str(failures[0])  # it does: a new child replaces it
    assert pids[:2] == before[:2] and pids[2] == pids[3] not in before
    observations, rewards, terminated, truncated, info = faulty
    # Envs 2-3 (their episodes had just begun) end truncated, with no reward, saying why.
    np.testing.assert_array_equal(truncated, [False, False, True, True])
    np.testing.assert_array_equal(terminated, [False] * N)
    assert rewards[2] == rewards[3] == 0.0
    for row in (2, 3):
        assert "WorkerDied" in (_marker(info, row) or "")
    assert _marker(info, 0) is None and _marker(info, 1) is None
    if autoreset == "same_step":
        # The step carries the new envs' resets; the episodes' last observations are final.
        for row in (2, 3):
            np.testing.assert_array_equal(info["final_obs"][row], first[0][row])
        assert observations[2, 1] == observations[3, 1] == 0.0  # a reset's step count
        new = observations
    else:
        np.testing.assert_array_equal(observations[2:], first[0][2:])  # the last seen
        # Their next step (or the masked reset) starts the new envs' episodes.
        new, new_info = reset if autoreset == "disabled" else after[::4]  # type: ignore[index]
        assert new[2, 1] == new[3, 1] == 0.0
        for row in (2, 3):
            assert "WorkerDied" in (_marker(new_info, row) or "")
        if autoreset == "next_step":
            np.testing.assert_array_equal(after[3][2:], [False, False])
            assert after[1][2] == after[1][3] == 0.0
    # The new envs are seeded by the restart rule: another run starts them the same way.
    again = _run(autoreset, [ExitsOnTwo] * N)
    same = again[1][0] if autoreset == "same_step" else (again[2] or again[3])[0]
    np.testing.assert_array_equal(same[2:], new[2:])
    # Envs 0-1 are untouched: they step as in a run where no child dies.
    np.testing.assert_array_equal(faulty[0][:2], again[1][0][:2])
    calm = _run(autoreset, [ExitsOnTwo] * N, fault=ZEROS)
    np.testing.assert_array_equal(faulty[0][:2], calm[1][0][:2])
    np.testing.assert_array_equal(after[0][:2], calm[3][0][:2])


async def _pool_restart(seed: int) -> Any:
    """The first observations of the new envs of a pool's process worker of envs 2-3 (the
    second of two, ``envs_per_worker=2``) whose child died: what an engine child of the
    same envs starts with when it replaces one that died."""
    async with aioenv.make_pool(
        ExitsOnTwo,
        2,
        mode="process",
        envs_per_worker=2,
        restart="on_failure",
        seed=seed,
        on_failure=lambda error: None,
    ) as pool:
        await pool.reset_all()
        pool.send_action(np.array([2, 0]), 1)
        cut, _ = await pool.get_state(1)  # type: ignore[misc]
        assert cut.truncated.all()
        pool.send_action(np.array([0, 0]), 1)
        new, _ = await pool.get_state(1)  # type: ignore[misc]
        return new.observations


def test_a_new_child_seeds_its_envs_by_the_restart_rule_of_a_pool_worker() -> None:
    # The new child's envs are seeded from its child's seed by the restart rule, as a
    # restarted process worker of those envs is, not with its predecessor's first seeds.
    _, _, _, after, *_ = _run("next_step", [ExitsOnTwo] * N)
    new, info = after[::4]
    assert "WorkerDied" in (_marker(info, 2) or "")
    expected = anyio.run(_pool_restart, 5)
    np.testing.assert_array_equal(new[2:], expected)
    # Not the draws the envs' own first seeds give: the envs are new, and so are their seeds.
    with aioenv.AioVectorEnv([ExitsOnTwo] * N, mode="process", envs_per_worker=2, seed=5) as envs:
        unseeded = envs.reset()[0]
    assert not np.array_equal(new[2:, 0], unseeded[2:, 0])


class RaisesOnTwo(Walk):
    """Its step raises (its process goes on) when stepped with action 2."""

    def step(self, action: int) -> Any:
        if action == 2:
            raise ValueError("action 2")
        return super().step(action)


def test_a_new_child_of_one_env_seeds_it_as_a_restarted_worker_of_that_env_is_seeded() -> None:
    # An env alone in its child, whose child died, is seeded with the child's restart
    # seed itself, as a worker of that one env seeds its new env (a sync worker whose env
    # raised, say), not with a seed drawn from it as for a group's envs.
    def run(mode: str, factory: Any) -> Any:
        with aioenv.AioVectorEnv(
            [factory] * N,
            mode=mode,
            envs_per_worker=1,
            restart="on_failure",
            seed=5,
            on_failure=lambda error: None,
        ) as envs:
            envs.reset()
            cut = envs.step(KILL_CHILD_1)
            return cut[0], cut[3], envs.step(ZEROS)[0]

    ours, theirs = run("process", ExitsOnTwo), run("sync", RaisesOnTwo)
    np.testing.assert_array_equal(ours[1], [False, False, True, False])
    for mine, reference in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(mine, reference)


class DiesWritingALongAnswer(Walk):
    """Once ``armed`` (with ``set_attr``), its next step or reset answers with infos longer
    than the engine writes before its post (``aioenv.engine._child.SMALL``), and its
    process exits halfway through writing them: the parent has taken the post and is
    reading the message when the child is gone."""

    armed = False

    def _long(self, answer: tuple[Any, ...]) -> tuple[Any, ...]:
        if not self.armed:
            return answer
        import aioenv.engine._child as child

        def dies_halfway(sock: Any, wake: Any, data: bytes) -> None:
            assert len(data) > SMALL  # written after the post
            wake.post()
            sock.sendall(data[: len(data) // 2])
            os._exit(5)

        child.post_with = dies_halfway  # the child's loop looks it up at each answer
        *rest, info = answer
        return (*rest, {**info, "long": np.zeros(SMALL // 4)})

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self._long(super().reset(seed=seed, options=options))

    def step(self, action: int) -> Any:
        return self._long(super().step(action))


ARM_ENV_2 = [False, False, True, False]


class LateOnce(DiesWritingALongAnswer):
    """Its next step takes ``late`` seconds (set through ``set_attr``), once."""

    late = 0.0

    def step(self, action: int) -> Any:
        time.sleep(self.late)
        self.late = 0.0
        return super().step(action)


@pytest.mark.parametrize("late", [1.0, 0.0])
@pytest.mark.parametrize("restart", ["on_failure", "never"])
def test_a_child_that_dies_while_it_writes_a_long_step_answer_is_replaced(
    restart: str, late: float
) -> None:
    # late=1.0: env 0's child answers after envs 2-3's child has posted and died, so the
    # parent took that post and hears of the death from the child's sentinel; the post
    # must count for nobody (before, the step read env 0's rows before its child answered,
    # or the replacement's post was left over, and the next step read rows 2-3 before the
    # new child wrote them). Where the parent is held up until child 0 has answered, it
    # hears of the death as it reads the message instead, as with late=0.0: the same
    # answers hold.
    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        [LateOnce] * N,
        mode="process",
        envs_per_worker=2,
        restart=restart,
        on_failure=failures.append,
    ) as envs:
        envs.reset(seed=0)
        envs.set_attr("armed", ARM_ENV_2)
        envs.set_attr("late", [late, 0.0, 0.0, 0.0])
        if restart == "never":
            with pytest.raises(aioenv.WorkerDied, match=r"envs 2-3.*exited with code 5"):
                envs.step(ZEROS)
            return
        observations, rewards, terminated, truncated, info = envs.step(ZEROS)
        np.testing.assert_array_equal(truncated, [False, False, True, True])
        assert not terminated.any() and rewards[2] == rewards[3] == 0.0
        assert observations[0, 1] == observations[1, 1] == 1.0  # envs 0-1 stepped once
        for row in (2, 3):
            assert "WorkerDied" in (_marker(info, row) or "")
        assert _marker(info, 0) is None and _marker(info, 1) is None
        after = envs.step(ZEROS)
        assert after[0][0, 1] == after[0][1, 1] == 2.0
        assert after[0][2, 1] == after[0][3, 1] == 0.0  # the new envs' resets
        assert tuple(envs.get_attr("armed")) == (False,) * N  # the new child's envs are new
    assert [type(error) for error in failures] == [aioenv.WorkerDied]
    assert "exited with code 5" in str(failures[0])


def test_a_child_that_dies_while_it_writes_a_long_reset_answer_is_replaced() -> None:
    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        [DiesWritingALongAnswer] * N,
        mode="process",
        envs_per_worker=2,
        restart="on_failure",
        on_failure=failures.append,
    ) as envs:
        before = envs.reset(seed=0)[0]
        pids = envs.apply(lambda env: os.getpid())
        envs.set_attr("armed", ARM_ENV_2)
        observations, info = envs.reset(seed=0)
        # The same seeds reset envs 0-1 as before; envs 2-3 are the new child's, reset by
        # the restart rule, and say why.
        np.testing.assert_array_equal(observations[:2], before[:2])
        assert observations[2, 1] == observations[3, 1] == 0.0
        for row in (2, 3):
            assert "WorkerDied" in (_marker(info, row) or "")
        assert _marker(info, 0) is None
        after = envs.apply(lambda env: os.getpid())
        assert after[:2] == pids[:2] and after[2] not in pids
        envs.step(ZEROS)
    assert [type(error) for error in failures] == [aioenv.WorkerDied]


def test_a_hung_child_is_killed_at_its_deadline_and_replaced() -> None:
    _, faulty, _, after, failures, before, pids = _run(
        "next_step", [HangsOnTwo] * N, step_timeout=DEADLINE
    )
    assert [type(error) for error in failures] == [aioenv.WorkerTimeout]
    assert "process worker 1 (envs 2-3)" in str(failures[0])
    np.testing.assert_array_equal(faulty[3], [False, False, True, True])
    assert "WorkerTimeout" in (_marker(faulty[4], 2) or "")
    assert after[0][2, 1] == after[0][3, 1] == 0.0  # the new envs' resets
    assert pids[2] not in before


def test_a_new_child_that_dies_before_it_is_sent_its_descriptors_is_a_failure_like_any_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child that replaces a dead one may die as soon as it has started, before the
    parent sends it the buffer's and the wakes' descriptors: that is its death, counted
    and restarted as any other, not a broken pipe out of the step."""
    import aioenv.engine._start as start_module

    starts, killed = start_module._start_process, []

    def first_new_child_dies(process: Any) -> None:
        starts(process)
        if not killed:
            killed.append(process.pid)
            process.kill()
            process.join()

    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        [ExitsOnTwo] * N,
        mode="process",
        envs_per_worker=2,
        restart="on_failure",
        on_failure=failures.append,
    ) as envs:
        envs.reset(seed=0)
        monkeypatch.setattr(start_module, "_start_process", first_new_child_dies)
        truncated = envs.step(KILL_CHILD_1)[3]  # was: BrokenPipeError
        np.testing.assert_array_equal(truncated, [False, False, True, True])
        assert envs.step(ZEROS)[0][2, 1] == 0.0  # the third child's new envs' resets
        assert killed[0] not in envs.apply(lambda env: os.getpid())
    assert [type(error) for error in failures] == [aioenv.WorkerDied] * 2
    assert "exited with code -9" in str(failures[1])


def _descriptors() -> int:
    """How many descriptors this process holds, once what earlier tests left to the
    garbage collector is collected."""
    gc.collect()
    return len(os.listdir("/proc/self/fd")) - 1  # the listing's own


def test_a_child_whose_new_child_cannot_be_started_is_given_up_as_a_pool_worker_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new child that cannot be started at all (its start method fails: no more
    processes) gives its child up, as a pool gives up a worker whose env cannot be
    restarted: the step raises the WorkerError that says so, the start's error its
    cause, and every later call WorkerRemoved; closing frees everything."""
    import aioenv.engine._start as start_module

    def no_more_processes(process: Any) -> None:
        raise OSError("no more processes")  # as a start method's failure would

    with aioenv.AioVectorEnv([ExitsOnTwo] * N, mode="process", envs_per_worker=2):
        pass  # the probe's start, and what a first vector env leaves, out of the count
    before = _descriptors()
    with aioenv.AioVectorEnv(
        [ExitsOnTwo] * N, mode="process", envs_per_worker=2, restart="on_failure"
    ) as envs:
        envs.reset(seed=0)
        monkeypatch.setattr(start_module, "_start_process", no_more_processes)
        with pytest.raises(  # was: the OSError itself
            aioenv.WorkerError,
            match=r"process worker 1 \(envs 2-3\): could not restart after WorkerDied: .*"
            r"\(OSError: no more processes\)",
        ) as raised:
            envs.step(KILL_CHILD_1)
        assert isinstance(raised.value.__cause__, OSError)
        with pytest.raises(aioenv.WorkerRemoved, match="envs 2-3") as removed:
            envs.step(ZEROS)
        assert removed.value.__cause__ is raised.value
    del envs, raised, removed  # the errors' frames view the buffer: its mapping lives with them
    assert _descriptors() == before  # the sockets and request wake of the child not started too


def test_a_new_child_that_cannot_be_made_leaves_a_vector_env_that_closes_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The new child's sockets may not be made at all (the process is out of
    descriptors): its child is given up, and closing still ends every child and frees the
    buffer and the wakes, the dead child's among them."""
    import aioenv.engine._family as family

    def out_of_descriptors(*args: Any) -> None:
        raise OSError(errno.EMFILE, "Too many open files")  # as socket.socketpair() would

    with aioenv.AioVectorEnv([ExitsOnTwo] * N, mode="process", envs_per_worker=2):
        pass  # the probe's start, and what a first vector env leaves, out of the count
    before = _descriptors()
    envs = aioenv.AioVectorEnv(
        [ExitsOnTwo] * N, mode="process", envs_per_worker=2, restart="on_failure"
    )
    envs.reset(seed=0)
    monkeypatch.setattr(family, "ChildStart", out_of_descriptors)
    with pytest.raises(aioenv.WorkerError, match="could not restart after .*Too many open"):
        envs.step(KILL_CHILD_1)
    envs.close()  # was: ValueError: process object is closed, the buffer and wakes left open
    del envs
    assert _descriptors() == before


def test_a_child_killed_between_steps_is_replaced_and_the_next_reset_answered() -> None:
    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        [Walk] * N,
        mode="process",
        envs_per_worker=2,
        restart="on_failure",
        on_failure=failures.append,
    ) as envs:
        envs.reset(seed=0)
        before = envs.apply(lambda env: os.getpid())
        os.kill(before[2], signal.SIGKILL)
        assert wait_until(lambda: not process_running(before[2]))  # its socket is closed
        observations, info = envs.reset(seed=1)  # was: BrokenPipeError
        assert "WorkerDied" in (_marker(info, 2) or "") and _marker(info, 0) is None
        assert observations[2, 1] == observations[3, 1] == 0.0  # the new envs' resets
        pids = envs.apply(lambda env: os.getpid())
        assert pids[:2] == before[:2] and pids[2] == pids[3] not in before
    assert [type(error) for error in failures] == [aioenv.WorkerDied]


def test_a_call_whose_child_dies_fails_and_the_next_step_cuts_its_episodes_short() -> None:
    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        [Calm, Calm, ExitsOnTwo, ExitsOnTwo],
        mode="process",
        envs_per_worker=2,
        restart="on_failure",
        on_failure=failures.append,
    ) as envs:
        last = envs.reset(seed=0)[0]
        with pytest.raises(aioenv.WorkerDied, match=r"process worker 1 \(envs 2-3\)"):
            envs.call("maybe_exit")
        observations, _, terminated, truncated, info = envs.step(ZEROS)
        np.testing.assert_array_equal(truncated, [False, False, True, True])
        assert not terminated.any()
        for row in (2, 3):
            assert "WorkerDied" in (_marker(info, row) or "")
            np.testing.assert_array_equal(info["final_obs"][row], last[row])
        assert observations[2, 1] == observations[3, 1] == 0.0  # the new envs' resets
        # The new envs were reset, not stepped; the others stepped once.
        assert tuple(envs.get_attr("steps_taken")) == (1, 1, 0, 0)
    assert [type(error) for error in failures] == [aioenv.WorkerDied]


def test_a_child_that_keeps_dying_is_given_up_after_its_budget() -> None:
    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        [Walk, Walk, ExitsOnReset, ExitsOnReset],
        mode="process",
        envs_per_worker=2,
        restart="on_failure",
        max_restarts=2,
        on_failure=failures.append,
    ) as envs:
        with pytest.raises(aioenv.WorkerDied, match=r"process worker 1 .*exited with code 4"):
            envs.reset(seed=0)
        assert len(failures) == 3  # max_restarts + 1 failures in a row, no progress between
        with pytest.raises(aioenv.WorkerRemoved, match=r"envs 2-3 of the AioVectorEnv"):
            envs.step(ZEROS)


def test_a_pipelined_child_that_dies_is_replaced_and_recv_goes_on() -> None:
    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        [ExitsOnTwo] * N,
        mode="process",
        envs_per_worker=2,
        batch_size=2,
        restart="on_failure",
        on_failure=failures.append,
    ) as envs:
        envs.async_reset(seed=0)
        killed = False
        while True:  # until envs 0-1 answer the step that killed their child
            _, rewards, terminated, truncated, infos = envs.recv()
            mine = infos["env_id"].tolist() == [0, 1]
            if mine and killed:
                break
            killed = killed or mine
            envs.send(np.array([2, 0]) if mine else np.zeros(2, np.int64))
        # That step ends their episodes, truncated and marked; the other child's envs went
        # on meanwhile, and so do the new ones.
        assert truncated.all() and not terminated.any() and not rewards.any()
        assert all("WorkerDied" in (_marker(infos, row) or "") for row in (0, 1))
        envs.send(np.zeros(2, np.int64))
        _, _, terminated, truncated, infos = envs.recv()
        while infos["env_id"].tolist() != [0, 1]:
            envs.send(np.zeros(2, np.int64))
            _, _, terminated, truncated, infos = envs.recv()
        assert not (terminated.any() or truncated.any())
        assert all("WorkerDied" in (_marker(infos, row) or "") for row in (0, 1))
    assert [type(error) for error in failures] == [aioenv.WorkerDied]


def _broken(error: aioenv.WorkerError) -> None:
    raise KeyError("the user's logger is gone")


@pytest.mark.parametrize("fault", ["env raises", "child dies"])
def test_an_on_failure_that_raises_is_a_warning_and_the_child_goes_on(fault: str) -> None:
    # A child's death is supervised in the parent; an env's exception in its child, which
    # reports it with its answer: either way the user's callback is called there.
    factory: Any = functools.partial(Walk, explode_at=2) if fault == "env raises" else ExitsOnTwo
    with aioenv.AioVectorEnv(
        [Walk, Walk, factory, Walk],
        mode="process",
        envs_per_worker=2,
        restart="on_failure",
        on_failure=_broken,
        seed=5,
    ) as envs:
        envs.reset(seed=0)
        envs.step(ZEROS)  # a Walk's first step call: one before it explodes
        with pytest.warns(RuntimeWarning, match="on_failure callback raised KeyError"):
            _, _, _, truncated, info = envs.step(KILL_CHILD_1)
        assert truncated[2] and _marker(info, 2) is not None  # cut short, and restarted
        for _ in range(2):  # the restarted env resets, then steps (a step call short of 2)
            envs.step(ZEROS)

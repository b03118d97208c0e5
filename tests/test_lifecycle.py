"""Nothing hangs, nothing leaks: vector envs left open at exit or interrupted with Ctrl-C,
pools used from a second event loop, envs that raise SystemExit, ids checked in the
parent, states of classes from the user's __main__, failures in the parent reported."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from envs import (
    AsyncCounter,
    BigObservation,
    Breakable,
    ChildOnlyReplies,
    Counter,
    Failing,
    GatedClose,
    Walk,
    open_gate,
)
from support import (
    KINDS,
    WORKERS,
    eventually,
    process_running,
    wait_until,
    worker_processes,
    worker_threads,
)

import aioenv
import aioenv.engine._buffer

ROOT = Path(__file__).resolve().parents[1]


def _script(tmp_path: Path, body: str) -> subprocess.Popen[str]:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    return subprocess.Popen(
        [sys.executable, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,  # its own process group, so a hung script can be killed whole
    )


def _finish(script: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """The script's output; a script still running after ``timeout`` is killed (with its
    process group's workers gone with it) and fails the test."""
    try:
        return script.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(script.pid, signal.SIGKILL)
        script.communicate()
        pytest.fail(f"the script did not exit within {timeout:g} s")


def test_a_vector_env_never_closed_does_not_hold_up_exit(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import aioenv
        if __name__ == "__main__":
            envs = aioenv.make_vec("CartPole-v1", 2, vectorization_mode=["process", "thread"])
            envs.reset(seed=0)
            print(envs.pool.workers[0].pid, flush=True)
        """,
    )
    out, err = _finish(script, 40)  # it hung until killed before
    assert script.returncode == 0, err
    child = int(out.split()[0])
    assert not process_running(child)


@pytest.mark.parametrize("options", [{}, {"shared_memory": False}], ids=["engine", "pool"])
def test_envs_left_open_in_children_are_closed_at_exit_whichever_exit_hook_came_first(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    """A vector env left open at exit closes its envs in their child processes (the
    engine's children, a pool's process workers) before multiprocessing ends those
    children, even where a ``weakref.finalize`` made before multiprocessing was imported
    put weakref's exit hook after multiprocessing's (the engine's envs were then never
    closed)."""
    marks = tmp_path / "closed"
    script = _script(
        tmp_path,
        f"""
        import weakref

        class Kept:
            pass

        kept = Kept()
        weakref.finalize(kept, print)  # weakref's exit hook, before multiprocessing's

        import gymnasium
        import aioenv

        class Marked(gymnasium.Wrapper):
            def close(self):
                open({str(marks)!r}, "a").write("x")
                super().close()

        def make():
            return Marked(gymnasium.make("CartPole-v1"))

        if __name__ == "__main__":
            envs = aioenv.AioVectorEnv(make, 2, mode="process", **{options!r})
            envs.reset(seed=0)
            open({str(marks)!r}, "w").write("")  # the probe env's close is not counted
        """,
    )
    _, err = _finish(script, 60)
    assert script.returncode == 0, err
    assert marks.read_text() == "xx"  # every env, once, though close() was never called


@pytest.mark.loops
def test_ctrl_c_in_a_step_loop_exits_with_only_the_keyboard_interrupt(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import signal
        import numpy as np
        import aioenv
        if __name__ == "__main__":
            signal.signal(signal.SIGINT, signal.default_int_handler)  # even if inherited ignored
            envs = aioenv.make_vec("CartPole-v1", 2, vectorization_mode=["process", "thread"])
            envs.reset(seed=0)
            print("ready", flush=True)
            while True:
                envs.step(np.array([0, 1]))
        """,
    )
    assert script.stdout is not None
    assert script.stdout.readline().strip() == "ready"
    script.send_signal(signal.SIGINT)
    _, err = _finish(script, 40)
    assert "KeyboardInterrupt" in err
    assert "process object is closed" not in err
    assert "Exception ignored" not in err


@pytest.mark.loops
def test_ctrl_c_again_and_again_in_steps_never_leaves_the_vector_env_hung(tmp_path: Path) -> None:
    # Each Ctrl-C lands wherever the parent is in its step (the thread worker's env sends
    # it, mid-step, so it always lands inside one, and one at a time: a second raises at
    # once, as asyncio.run's does). Raised there, as Python's own handler raises it, it
    # could land inside the event loop's own bookkeeping (between a future's result and
    # the wake of the task awaiting it) and leave that step's wind-down waiting for ever.
    script = _script(
        tmp_path,
        """
        import functools, os, random, signal
        import gymnasium
        import numpy as np
        import aioenv

        class Interrupting(gymnasium.Wrapper):
            def __init__(self, parent):
                super().__init__(gymnasium.make("CartPole-v1"))
                self.parent, self.ticks = parent, random.Random(os.getpid())

            def step(self, action):
                if os.getpid() == self.parent and self.ticks.random() < 0.3:
                    os.kill(self.parent, signal.SIGINT)
                return self.env.step(action)

        if __name__ == "__main__":
            signal.signal(signal.SIGINT, signal.default_int_handler)
            source = functools.partial(Interrupting, os.getpid())
            envs = aioenv.AioVectorEnv(source, 2, mode=["process", "thread"])
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            envs.reset(seed=0)
            caught = 0
            while caught < 150:
                try:
                    envs.step(np.array([0, 1]))
                except KeyboardInterrupt:
                    caught += 1
            envs.close()
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
            print("caught", caught, flush=True)
        """,
    )
    out, err = _finish(script, 45)
    assert out.strip() == "caught 150", err
    assert "Traceback" not in err


def test_a_pool_works_from_a_second_asyncio_run_when_nothing_is_in_flight() -> None:
    pool = aioenv.make_pool(Counter, 2, mode=["process", "thread"])

    async def first() -> None:
        await pool.reset_all()

    async def second() -> list[int]:
        pool.send_action(1, 0)
        pool.send_action(1, 1)
        batch = await asyncio.wait_for(pool.get_batch(min_size=2), 20)
        await pool.aclose()
        return sorted(state["t"] for state in batch.states)

    asyncio.run(first())
    assert asyncio.run(second()) == [1, 1]


@pytest.mark.parametrize("pooled", [True, False], ids=["pool", "worker"])
@pytest.mark.parametrize("kind", ["thread", "process"])
def test_an_aclose_cancelled_by_asyncio_still_closes_every_env(
    kind: str, pooled: bool, gate: str
) -> None:
    """A pool's or a lone worker's ``aclose()`` cancelled by asyncio itself (``Task.cancel``,
    as ``asyncio.wait_for`` does past its timeout; anyio's shielded scopes do not stop it)
    runs to its end, then raises the cancellation: no env is left running."""

    async def main() -> None:
        if pooled:
            closed: Any = aioenv.make_pool(lambda: GatedClose(gate), 2, mode=kind, cleanup_time=60)
            closed.reset()
            await asyncio.wait_for(closed.get_batch(min_size=2), 20)
        else:
            worker_class = aioenv.ThreadWorker if kind == "thread" else aioenv.ProcessWorker
            closed = worker_class(lambda: GatedClose(gate), cleanup_time=60)
            closed.send_action(aioenv.RESET)
            await asyncio.wait_for(closed.get_state(), 20)
        closing = asyncio.ensure_future(closed.aclose())
        await asyncio.sleep(0.2)  # the envs' close has begun, and waits for the gate
        closing.cancel()
        await asyncio.sleep(0.2)
        assert not closing.done(), "the close was cut short with the envs still open"
        open_gate(gate)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(closing, 20)
        assert not worker_processes() and not worker_threads()

    asyncio.run(main())


@pytest.mark.parametrize("envs_per_process", [1, 2])
def test_process_workers_stepping_through_their_lanes_work_from_a_second_asyncio_run(
    envs_per_process: int,
) -> None:
    # Walk's Box observations: each env's steps take its lane (aioenv.engine._lane), whose
    # answer wake the later loop must watch as the first did.
    pool = aioenv.make_pool(Walk, 2, mode="process", envs_per_process=envs_per_process)

    def lanes_in_use() -> bool:
        return all(worker._host.lanes.get(worker._slot) for worker in pool.workers)  # type: ignore[attr-defined]

    async def first() -> None:
        await pool.reset_all()
        assert await eventually(lanes_in_use)

    async def second() -> list[float]:
        pool.send_action(1, 0)
        pool.send_action(1, 1)
        try:
            batch = await asyncio.wait_for(pool.get_batch(min_size=2), 20)
        finally:
            await pool.aclose()
        return sorted(float(state.observation[1]) for state in batch.states)

    asyncio.run(first())
    assert asyncio.run(second()) == [1.0, 1.0]


@pytest.mark.parametrize("kind", ["sync", "thread", "process"])
def test_actions_sent_before_any_event_loop_are_answered_in_the_first(
    kind: str, tmp_path: Path
) -> None:
    answered = tmp_path / "answered"

    class Announcing(Counter):
        def reset(self, seed: int | None = None) -> Any:
            state = super().reset(seed)
            answered.touch()  # the env has answered (before any event loop runs)
            return state

    pool = aioenv.make_pool(Announcing, 1, mode=kind)
    pool.reset()  # at the top of a script, before asyncio.run

    async def main() -> Any:
        try:
            return (await asyncio.wait_for(pool.get_state(), 20))[0]  # type: ignore[index]
        finally:
            await pool.aclose()

    assert wait_until(answered.exists, 20)
    assert asyncio.run(main())["t"] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_sent_an_action_before_any_event_loop_answers_it_in_the_first(kind: str) -> None:
    worker = WORKERS[kind](Counter)
    worker.send_action(aioenv.RESET)  # before asyncio.run: the worker has no loop yet

    async def main() -> Any:
        try:
            return await asyncio.wait_for(worker.get_state(), 20)
        finally:
            await worker.aclose()

    assert asyncio.run(main())["t"] == 0


@pytest.mark.parametrize("restart", ["never", "on_failure"])
def test_a_sync_worker_whose_env_fails_before_any_event_loop_answers_in_the_first(
    restart: str, tmp_path: Path
) -> None:
    built = tmp_path / "built"

    def make() -> Counter:
        if built.exists():
            return Counter()  # a restart's env
        built.touch()
        return Failing("init", "kaboom 42")  # the first env cannot be built

    pool = aioenv.make_pool(make, 1, mode="sync", restart=restart)
    pool.reset()  # built and answered in line, before asyncio.run

    async def main() -> Any:
        try:
            return (await asyncio.wait_for(pool.get_state(), 20))[0]  # type: ignore[index]
        finally:
            await pool.aclose()

    if restart == "never":  # its error, as a sync worker's construction error is raised
        with pytest.raises(aioenv.EnvError, match="kaboom 42"):
            asyncio.run(main())
    else:  # a new env's reset answers, marked as a restart
        assert asyncio.run(main())["t"] == 0
        assert pool.restarts == 1


@pytest.mark.parametrize("autoreset", ["disabled", "next_step"])
def test_a_sync_pool_driven_with_no_event_loop_running_restarts_an_env_that_failed(
    autoreset: str,
) -> None:
    """Each action sent where no event loop runs, each state taken in an asyncio.run of its
    own: the step whose env failed ends its episode cut short, and the next action starts
    the new env in line, whose reset answers it (where it raised a bare AssertionError)."""
    pool = aioenv.make_pool(Breakable, 1, mode="sync", restart="on_failure", autoreset=autoreset)
    states = []
    for action in (aioenv.RESET, 0, 1, 0):  # action 1 raises
        pool.send_action(action, 0)
        states.append(asyncio.run(pool.get_state())[0])  # type: ignore[index]
    asyncio.run(pool.aclose())
    cut, first = states[2], states[3]
    assert cut.truncated and "the simulator lost its state" in cut.info["aioenv"]["reason"]
    assert first.info["aioenv"]["restarted"] and first.observation[0] == 0
    assert not (first.terminated or first.truncated) and pool.restarts == 1


def test_a_sync_worker_with_an_episode_budget_answers_an_action_before_any_event_loop() -> None:
    worker = aioenv.SyncWorker("CartPole-v1", episode_timeout=60)
    worker.send_action(aioenv.RESET)  # answered in line, its episode's budget started

    async def main() -> Any:
        try:
            await asyncio.wait_for(worker.get_state(), 20)
            worker.send_action(0)  # within the budget started before the loop
            return await asyncio.wait_for(worker.get_state(), 20)
        finally:
            await worker.aclose()

    step = asyncio.run(main())
    assert step.reward == 1.0
    assert not step.truncated


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_with_a_deadline_refuses_an_action_before_any_event_loop_and_stays_usable(
    kind: str,
) -> None:
    worker = WORKERS[kind](Counter, step_timeout=30)
    with pytest.raises(RuntimeError, match="event loop"):  # its deadline runs on one
        worker.send_action(aioenv.RESET)

    async def main() -> Any:
        try:
            worker.send_action(aioenv.RESET)  # untouched by the refusal
            return await asyncio.wait_for(worker.get_state(), 20)
        finally:
            await worker.aclose()

    assert asyncio.run(main())["t"] == 0


def test_a_close_sentinel_refused_outside_an_event_loop_leaves_a_process_worker_open() -> None:
    worker = aioenv.ProcessWorker(Counter)

    async def first() -> Any:
        worker.send_action(aioenv.RESET)
        return await asyncio.wait_for(worker.get_state(), 20)

    asyncio.run(first())
    with pytest.raises(RuntimeError, match="event loop"):  # it closes its child from one
        worker.send_action(aioenv.CLOSE)  # between two asyncio.run: no loop runs
    assert not worker.closed  # refused: still open, and aclose closes it
    asyncio.run(worker.aclose())
    assert worker.closed
    assert worker.exitcode == 0
    assert not worker_processes()


@pytest.mark.parametrize("restart", ["never", "on_failure"])
def test_a_coroutine_env_closed_with_its_loop_fails_or_restarts_on_a_second_asyncio_run(
    restart: str,
) -> None:
    # The end of asyncio.run cancels every task of its loop: the coroutine env's too,
    # which closes the env.
    pool = aioenv.make_pool(AsyncCounter, 1, mode="coroutine", restart=restart)

    async def first() -> None:
        await pool.reset_all()

    async def second() -> Any:
        try:
            pool.reset()
            return (await asyncio.wait_for(pool.get_state(), 20))[0]  # type: ignore[index]
        finally:
            await pool.aclose()

    asyncio.run(first())
    if restart == "never":
        with pytest.raises(aioenv.WorkerError, match="closed with the event loop it ran on"):
            asyncio.run(second())
    else:  # a new env answers the reset, marked as a restart
        assert asyncio.run(second())["t"] == 0
        assert pool.restarts == 1


@pytest.mark.loops
def test_a_reply_lost_with_its_loop_raises_at_once_and_aclose_works_later(gate: str) -> None:
    from envs import Gated

    pool = aioenv.make_pool(lambda: Gated(gate), 1, mode="process")

    async def first() -> None:
        await pool.reset_all()
        pool.send_action(1, 0)  # in flight when this loop ends

    async def second() -> None:
        with pytest.raises(RuntimeError, match="in flight when its event loop ended"):
            await asyncio.wait_for(pool.get_state(), 20)
        await pool.aclose()

    asyncio.run(first())
    asyncio.run(second())
    assert not worker_processes()


def test_a_thread_workers_env_answering_after_its_loop_ended_is_still_closed_by_aclose(
    gate: str, tmp_path: Path
) -> None:
    from envs import Gated

    stepped, closed = tmp_path / "stepped", tmp_path / "closed"

    class Recording(Gated):
        def step(self, action: Any) -> Any:
            state = super().step(action)
            stepped.touch()  # its answer goes to the first loop next, closed by then
            return state

        def close(self) -> None:
            closed.touch()

    worker = aioenv.ThreadWorker(lambda: Recording(gate))

    async def first() -> None:
        worker.send_action(aioenv.RESET)
        await worker.get_state()
        worker.send_action(1)  # in flight when this loop ends

    asyncio.run(first())
    open_gate(gate)
    assert wait_until(stepped.exists, 20)
    asyncio.run(worker.aclose())
    assert closed.exists()  # the env's close ran


@pytest.mark.parametrize("kind", KINDS)
async def test_an_env_raising_system_exit_is_a_dead_worker_for_every_kind(kind: str) -> None:
    class Exiting(Counter):
        def step(self, action: Any) -> Any:
            raise SystemExit(7)

    async with aioenv.make_pool(Exiting, 1, mode=kind) as pool:
        await pool.reset_all()
        pool.send_action(1, 0)
        with pytest.raises(aioenv.WorkerDied) as raised:
            await asyncio.wait_for(pool.get_state(), 20)
        assert raised.value.exitcode == 7
        with pytest.raises(aioenv.WorkerRemoved) as removed:
            pool.send_action(1, 0)  # later actions say it was given up on, and why
        assert removed.value.__cause__ is raised.value
    async with aioenv.make_pool(Exiting, 1, mode=kind, restart="on_failure") as pool:
        await pool.reset_all()
        pool.send_action(1, 0)
        state, _ = await asyncio.wait_for(pool.get_state(), 20)  # type: ignore[misc]
        assert state["t"] == 0  # the rebuilt env's reset answers in place of the step


@pytest.mark.parametrize("kind", KINDS)
async def test_an_env_raising_system_exit_as_it_is_built_is_a_dead_worker_for_every_kind(
    kind: str,
) -> None:
    class ExitingAtBuild(Counter):
        def __init__(self) -> None:
            raise SystemExit(7)  # a constructor parsing arguments that are not its own, say

    async with aioenv.make_pool(ExitingAtBuild, 1, mode=kind) as pool:
        pool.reset()
        with pytest.raises(aioenv.WorkerDied) as raised:
            await asyncio.wait_for(pool.get_state(), 20)
        assert raised.value.exitcode == 7
        assert pool.removed == {0: raised.value}


def test_an_unknown_gymnasium_id_fails_in_the_parent_before_any_process() -> None:
    with pytest.raises(gymnasium.error.NameNotFound):
        aioenv.make_pool("NoSuchEnv-v0", 2, mode="process")
    assert not worker_processes()
    with pytest.raises(ValueError, match="autoreset"):  # pool options too
        aioenv.make_pool("CartPole-v1", 2, mode="process", autoreset="sometimes")
    assert not worker_processes()


def test_states_of_a_class_from_main_come_back_from_process_workers(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import dataclasses
        import aioenv

        @dataclasses.dataclass
        class State:
            t: int

        class Env:
            def reset(self, seed=None):
                return State(0)
            def step(self, action):
                return State(1)
            def terminated(self, state):
                return False

        async def main():
            async with aioenv.make_pool(Env, 2, mode="process") as pool:
                batch = await pool.reset_all()
                assert all(type(s) is State for s in batch.states), batch.states
                pool.send_action(0, 0)
                state, _ = await pool.get_state()
                assert state == State(1)
            print("ok")

        if __name__ == "__main__":
            aioenv.run(main())
        """,
    )
    out, err = _finish(script, 40)
    assert script.returncode == 0, err
    assert out.strip() == "ok"


async def test_a_reply_the_parent_cannot_decode_is_aioenvs_own_error() -> None:
    async with aioenv.make_pool(ChildOnlyReplies, 1, mode="process") as pool:
        await pool.reset_all()
        pool.send_action(1, 0)
        with pytest.raises(aioenv.TransportError, match="could not decode") as raised:
            await pool.get_state()
        assert not isinstance(raised.value, aioenv.EnvError)
        assert raised.value.worker_id == 0
        pool.send_action(aioenv.RESET, 0)  # the env itself is fine
        await pool.get_state()


async def test_shared_memory_set_up_failures_are_reported(monkeypatch: Any) -> None:
    def no_memory(nbytes: int, name: str) -> int:
        raise OSError("no memory file today")

    monkeypatch.setattr(aioenv.engine._buffer, "memory_file", no_memory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with aioenv.make_pool(BigObservation, 1, mode="process") as pool:
            batch = await pool.reset_all()
            assert batch.states[0].observation.shape == (210, 160, 3, 4)
    assert any("no memory file today" in str(w.message) for w in caught)

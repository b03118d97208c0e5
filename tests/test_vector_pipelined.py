"""AioVectorEnv's pipelined calls: EnvPool's async_reset/send/recv and gymnasium's
step_async/step_wait. Each env's transitions through send/recv are those of lockstep
SyncVectorEnv, env by env, whatever order the envs come back in."""

from __future__ import annotations

import functools
import time
from typing import Any

import envs
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from support import wait_until

import aioenv
from aioenv.vector._grouping import envs_per_worker

N = 4
SEED = 7
TRANSITIONS = 18  # per env: Walk's episodes last 2 to 6 steps, so several episodes
KINDS: dict[str, dict[str, Any]] = {
    "sync": {"mode": "sync"},
    "thread": {"mode": "thread"},
    "process": {"mode": "process", "envs_per_worker": 1},
    "process_grouped": {"mode": "process", "envs_per_worker": 2},
    "coroutine": {"mode": "coroutine"},
    "inline": {"mode": "inline"},
    "mixed": {"mode": ["sync", "process", "thread", "process"]},
}
AUTORESET = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP}

Transition = tuple[Any, ...]


def transition(before: Any, action: int, row: int, result: tuple[Any, ...]) -> tuple[float, ...]:
    """One env's transition from row ``row`` of a batched result, as plain numbers."""
    observations, rewards, terminations, truncations, infos = result
    final = None
    if "final_obs" in infos and infos["_final_obs"][row]:
        final = tuple(infos["final_obs"][row])
    return (
        *before,
        action,
        float(rewards[row]),
        bool(terminations[row]),
        bool(truncations[row]),
        *observations[row],
        final,
    )


def lockstep_transitions(autoreset: str) -> list[list[Transition]]:
    reference = SyncVectorEnv([envs.Walk] * N, autoreset_mode=AUTORESET[autoreset])
    per_env: list[list[Transition]] = [[] for _ in range(N)]
    try:
        observations, _ = reference.reset(seed=SEED)
        for _ in range(TRANSITIONS):
            actions = [envs.choose_walk(observation) for observation in observations]
            result = reference.step(np.array(actions))
            for env in range(N):
                per_env[env].append(transition(observations[env], actions[env], env, result))
            observations = result[0]
    finally:
        reference.close()
    return per_env


def pipelined_transitions(venv: aioenv.AioVectorEnv) -> list[list[Transition]]:
    """Each env's transitions through async_reset/recv/send, the same policy choosing
    each env's action from its own last observation."""
    per_env: list[list[Transition]] = [[] for _ in range(N)]
    last: dict[int, tuple[Any, int]] = {}  # env -> (observation, action sent)
    venv.async_reset(seed=SEED)
    while min(len(transitions) for transitions in per_env) < TRANSITIONS:
        result = venv.recv()
        observations, env_ids = result[0], result[4]["env_id"]
        assert len(env_ids) == venv.batch_size
        assert observations.shape == (venv.batch_size, 2)
        actions = []
        for row, env in enumerate(env_ids.tolist()):
            if env in last:
                before, action = last[env]
                per_env[env].append(transition(before, action, row, result))
            actions.append(envs.choose_walk(observations[row]))
            last[env] = (observations[row], actions[-1])
        venv.send(np.array(actions))
    return [transitions[:TRANSITIONS] for transitions in per_env]


@pytest.mark.parametrize("autoreset", list(AUTORESET))
@pytest.mark.parametrize("batch_size", [1, N // 2, N])
@pytest.mark.parametrize("kind", list(KINDS))
def test_send_recv_gives_each_env_the_transitions_of_lockstep_step(
    kind: str, batch_size: int, autoreset: str
) -> None:
    if kind == "process_grouped" and batch_size == 1:
        batch_size = 2  # a worker's two envs come back together
    expected = lockstep_transitions(autoreset)
    with aioenv.AioVectorEnv(
        envs.Walk, N, batch_size=batch_size, autoreset_mode=autoreset, **KINDS[kind]
    ) as venv:
        assert venv.batch_size == batch_size
        got = pipelined_transitions(venv)
    for env in range(N):
        assert got[env] == expected[env], f"env {env}"


@pytest.mark.parametrize("autoreset", list(AUTORESET))
@pytest.mark.parametrize("kind", [kind for kind in KINDS if kind != "process_grouped"])
def test_a_recv_of_reset_and_stepped_envs_together_gives_the_transitions_of_lockstep(
    kind: str, autoreset: str
) -> None:
    # batch_size=N-1: the second recv takes the last env's reset (async_reset's) with
    # the first envs' steps, and so on round the envs
    expected = lockstep_transitions(autoreset)
    with aioenv.AioVectorEnv(
        envs.Walk, N, batch_size=N - 1, autoreset_mode=autoreset, **KINDS[kind]
    ) as venv:
        got = pipelined_transitions(venv)
    for env in range(N):
        assert got[env] == expected[env], f"env {env}"


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_recv_returns_the_envs_that_are_ready_first(mode: str, gate: str) -> None:
    slow = functools.partial(envs.Walk, gate=gate)  # env 0 steps once the gate opens
    factories = [slow] + [envs.Walk] * (N - 1)
    with aioenv.AioVectorEnv(
        factories, mode=mode, envs_per_worker=1, batch_size=2, autoreset="next_step"
    ) as venv:
        venv.async_reset(seed=0)
        venv.recv()
        venv.recv()  # every env's reset: all four are idle now
        venv.send(np.zeros(N, np.int64), env_id=range(N))
        for _ in range(10):  # three fast envs cycle while env 0 is held at its gate
            env_ids = venv.recv()[4]["env_id"]
            assert 0 not in env_ids
            venv.send(np.zeros(2, np.int64))
        envs.open_gate(gate)
        seen: set[int] = set()
        while 0 not in seen:
            seen.update(venv.recv()[4]["env_id"].tolist())
            venv.send(np.zeros(2, np.int64))


def test_step_async_step_wait_return_what_step_returns() -> None:
    with (
        aioenv.AioVectorEnv(envs.Walk, N, mode="thread", autoreset="same_step") as ours,
        aioenv.AioVectorEnv(envs.Walk, N, mode="thread", autoreset="same_step") as theirs,
    ):
        observations, _ = ours.reset(seed=SEED)
        theirs.reset(seed=SEED)
        for _ in range(12):
            actions = np.array([envs.choose_walk(observation) for observation in observations])
            ours.step_async(actions)
            waited = ours.step_wait()
            stepped = theirs.step(actions)
            for mine, reference in zip(waited[:4], stepped[:4], strict=True):
                np.testing.assert_array_equal(mine, reference)
            assert set(waited[4]) == set(stepped[4])
            observations = waited[0]


def test_step_wait_and_step_async_out_of_turn_raise_gymnasiums_errors() -> None:
    with aioenv.AioVectorEnv(envs.Walk, N, mode="thread", autoreset="disabled") as venv:
        venv.reset(seed=0)
        with pytest.raises(NoAsyncCallError, match=r"step_wait\(\) was called without"):
            venv.step_wait()
        venv.step_async(np.zeros(N, np.int64))
        with pytest.raises(AlreadyPendingCallError, match=r"step_wait\(\) first"):
            venv.step_async(np.zeros(N, np.int64))
        with pytest.raises(AlreadyPendingCallError, match=r"step_wait\(\) first"):
            venv.step(np.zeros(N, np.int64))
        with pytest.raises(AlreadyPendingCallError, match=r"step_wait\(\) first"):
            venv.recv()
        assert venv.step_wait()[0].shape == (N, 2)
        assert venv.step(np.zeros(N, np.int64))[0].shape == (N, 2)


@pytest.mark.parametrize("kind", ["thread", "process_grouped", "inline"])
def test_step_async_with_too_few_or_many_actions_says_so_and_sends_nothing(kind: str) -> None:
    with aioenv.AioVectorEnv(envs.Walk, N, **KINDS[kind]) as venv:
        venv.reset(seed=0)
        for count in (N - 1, N + 1):
            with pytest.raises(ValueError, match=rf"^step_async\(\) got {count} actions for"):
                venv.step_async(np.zeros(count, np.int64))
        with pytest.raises(NoAsyncCallError):
            venv.step_wait()  # nothing was sent
        venv.step_async(np.zeros(N, np.int64))
        assert venv.step_wait()[0].shape == (N, 2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_size": 0}, "batch_size must be an int from 1 to num_envs=4, got 0"),
        ({"batch_size": 5}, "batch_size must be an int from 1 to num_envs=4, got 5"),
        ({"batch_size": 2.0}, "batch_size must be an int"),
        ({"batch_size": True}, "batch_size must be an int"),
        ({"batch_size": 1, "envs_per_worker": 2}, "not a multiple of envs_per_worker=2"),
        ({"batch_size": 2, "autoreset": "disabled"}, "autoreset_mode='disabled'"),
    ],
)
def test_a_batch_size_that_cannot_work_is_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        aioenv.AioVectorEnv(envs.Walk, N, mode="thread", **options)


def test_a_batch_size_that_is_no_int_is_refused_beside_envs_per_process() -> None:
    """Whether envs_per_process makes whole children of each pipelined batch (for the
    engine) is asked only of an int batch size: any other is refused as in any mode."""
    with pytest.raises(ValueError, match="batch_size must be an int from 1 to num_envs=4"):
        aioenv.AioVectorEnv(envs.Walk, N, mode="process", envs_per_process=2, batch_size="x")


def test_default_grouping_of_process_workers_fits_the_batch_size() -> None:
    assert envs_per_worker(16, 2, batch_size=4) == 4  # 16 without a batch size
    assert envs_per_worker(16, 16, batch_size=6) == 2
    assert envs_per_worker(12, 2, batch_size=8) == 4
    with aioenv.AioVectorEnv(envs.Walk, N, mode="thread", batch_size=np.int64(2)) as venv:
        assert venv.batch_size == 2
    with aioenv.AioVectorEnv("CartPole-v1", N, mode="process", batch_size=2) as venv:
        assert all(size in (1, 2) for size in venv.group_sizes)
        venv.async_reset(seed=0)
        assert venv.recv()[0].shape == (2, 4)


def test_a_numpy_integer_batch_size_groups_process_workers_as_its_int_does() -> None:
    assert envs_per_worker(16, 2, batch_size=np.int64(4)) == 4
    with aioenv.AioVectorEnv(envs.Walk, N, mode="process", batch_size=np.int64(2)) as venv:
        assert venv.batch_size == 2
        assert all(size in (1, 2) for size in venv.group_sizes)
        venv.async_reset(seed=0)
        assert venv.recv()[0].shape == (2, 2)


def test_mixing_lockstep_and_pipelined_calls_says_what_to_do() -> None:
    with aioenv.AioVectorEnv(envs.Walk, N, mode="thread", envs_per_worker=2, batch_size=2) as venv:
        with pytest.raises(NoAsyncCallError, match=r"async_reset\(\) or send\(\) actions first"):
            venv.recv()
        with pytest.raises(NoAsyncCallError, match="pass env_id="):
            venv.send(np.zeros(2, np.int64))
        venv.async_reset(seed=0)
        for call in (venv.reset, lambda: venv.step(np.zeros(N, np.int64))):
            with pytest.raises(AlreadyPendingCallError, match=r"recv\(\) them first"):
                call()
        with pytest.raises(AlreadyPendingCallError, match="in flight"):
            venv.send(np.zeros(2, np.int64), env_id=[0, 1])
        env_ids = venv.recv()[4]["env_id"].tolist()
        assert env_ids in ([0, 1], [2, 3])
        with pytest.raises(ValueError, match="all of them or none"):
            venv.send(np.zeros(1, np.int64), env_id=env_ids[:1])
        with pytest.raises(ValueError, match="3 actions for the 2 envs"):
            venv.send(np.zeros(3, np.int64))
        with pytest.raises(ValueError, match=r"env_id \[4\] not in 0..3"):
            venv.send(np.zeros(2, np.int64), env_id=[3, 4])
        venv.send(np.zeros(2, np.int64))
        venv.recv()
        venv.recv()
        # nothing in flight: lockstep calls work again
        assert venv.step(np.zeros(N, np.int64))[0].shape == (N, 2)


#: Rounds to cycle while waiting for one env's error: a bound, not a figure. On a busy
#: machine the other envs' processes can be scheduled far more often than the exploding
#: one's, so a few dozen rounds may all go to them.
UNTIL_THE_ERROR = 20_000


def cycle(venv: aioenv.AioVectorEnv, rounds: int) -> None:
    """Take the envs that come back and send them action 0 again, ``rounds`` times."""
    for _ in range(rounds):
        venv.recv()
        venv.send(np.zeros(venv.batch_size, np.int64))


@pytest.mark.parametrize("mode", ["thread", "process", "inline"])
def test_an_env_error_in_recv_is_raised_and_the_other_envs_go_on(mode: str) -> None:
    exploding = functools.partial(envs.Walk, explode_at=2)  # env 1's second step raises
    factories = [envs.Walk, exploding, envs.Walk, envs.Walk]
    ungrouped = {} if mode == "inline" else {"envs_per_worker": 1}
    with aioenv.AioVectorEnv(factories, mode=mode, batch_size=1, **ungrouped) as venv:
        venv.async_reset(seed=0)
        for _ in range(N):
            venv.recv()
        venv.send(np.zeros(N, np.int64), env_id=range(N))
        with pytest.raises(ValueError, match="Walk exploded on purpose") as raised:
            cycle(venv, rounds=UNTIL_THE_ERROR)
        # where it happened: a note on Python 3.11+, the cause on 3.10 (no notes there)
        notes = "".join(getattr(raised.value, "__notes__", [])) or str(raised.value.__cause__)
        assert "env 1 of the AioVectorEnv" in notes
        for _ in range(6):  # the other envs are still in flight and keep coming
            assert venv.recv()[4]["env_id"].tolist() != [1]
            venv.send(np.zeros(1, np.int64))
        venv.async_reset(seed=0)  # starts over, env 1 included
        assert sorted(venv.recv()[4]["env_id"].tolist() for _ in range(N)) == [[0], [1], [2], [3]]


def test_no_state_is_lost_when_an_env_error_stops_a_recv() -> None:
    exploding = functools.partial(envs.Walk, explode_at=2)
    factories = [envs.Walk, exploding, envs.Walk, envs.Walk]
    with aioenv.AioVectorEnv(factories, mode="thread", batch_size=2) as venv:
        venv.async_reset(seed=0)
        with pytest.raises(ValueError, match="Walk exploded on purpose"):
            cycle(venv, rounds=UNTIL_THE_ERROR)
        # the three other envs are in flight, or taken by the recv that raised: two come
        # back now, the third later; none is lost
        assert 1 not in venv.recv()[4]["env_id"]
        with pytest.raises(NoAsyncCallError, match=r"only 1 env\(s\) are in flight"):
            venv.recv()


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_each_env_error_among_the_answers_of_one_recv_is_raised_by_a_recv(mode: str) -> None:
    # envs 0 and 1 raise at the same step (action 2), envs 2 and 3 step on; with every
    # answer in before the recv, that recv has two errors to hand out: one is raised, the
    # other by a later recv, as a pool hands them out one at a time
    with aioenv.AioVectorEnv(
        envs.RaisesOnTwo, N, mode=mode, envs_per_worker=1, batch_size=2
    ) as venv:
        venv.async_reset(seed=0)
        venv.recv()
        venv.recv()
        venv.send(np.array([2, 2, 0, 0]), env_id=range(N))
        if mode == "process":  # every child has answered: its mark in the engine's buffer
            assert wait_until(lambda: all(venv._envs.buffer.marks))  # type: ignore[attr-defined]
        failed: list[str] = []
        for _ in range(50):
            try:
                env_ids = venv.recv()[4]["env_id"]
            except ValueError as error:
                failed.append("".join(getattr(error, "__notes__", [])) or str(error.__cause__))
                if len(failed) == 2:
                    break
            else:
                assert 0 not in env_ids and 1 not in env_ids
                venv.send(np.zeros(2, np.int64))
        assert sorted(note.split(" of the AioVectorEnv")[0][-5:] for note in failed) == [
            "env 0",
            "env 1",
        ]


@pytest.mark.parametrize("kind", ["thread", "process", "process_grouped", "coroutine", "inline"])
def test_close_with_envs_in_flight_leaves_nothing_behind(kind: str) -> None:
    venv = aioenv.AioVectorEnv(envs.Walk, N, batch_size=2, **KINDS[kind])
    venv.async_reset(seed=0)
    venv.recv()
    venv.send(np.zeros(2, np.int64))
    venv.close()  # the autouse no_leaks fixture checks every worker is gone
    with pytest.raises(aioenv.VectorEnvClosed):
        venv.recv()


@pytest.mark.parametrize("kind", ["thread", "process", "process_grouped", "coroutine", "inline"])
def test_a_call_while_envs_are_in_flight_loses_none_of_their_answers(kind: str) -> None:
    reference = SyncVectorEnv([envs.Walk] * N)
    try:
        resets, _ = reference.reset(seed=SEED)
        stepped = reference.step(np.ones(N, np.int64))[0]
    finally:
        reference.close()
    with aioenv.AioVectorEnv(envs.Walk, N, batch_size=2, **KINDS[kind]) as venv:
        venv.async_reset(seed=SEED)
        assert venv.get_attr("task") == ("default",) * N  # the resets are in flight
        got: dict[int, Any] = {}
        for _ in range(N // 2):
            observations, *_, infos = venv.recv()
            got.update(zip(infos["env_id"].tolist(), observations, strict=True))
        assert sorted(got) == list(range(N))
        for env in range(N):
            np.testing.assert_array_equal(got[env], resets[env])
        venv.step_async(np.ones(N, np.int64))
        assert venv.call("set_task", "other") == ("default",) * N  # the steps are in flight
        np.testing.assert_array_equal(venv.step_wait()[0], stepped)


@pytest.mark.loops
async def test_send_and_recv_from_inside_a_running_loop() -> None:
    with aioenv.AioVectorEnv(envs.Walk, N, mode="thread", batch_size=2) as venv:
        venv.async_reset(seed=0)
        seen: set[int] = set()
        # Every env comes back, but not within a fixed number of rounds: on a loaded machine
        # one env's thread may not run while the others go round many times. 30 s is far
        # more than any scheduling delay.
        deadline = time.monotonic() + 30
        while seen != set(range(N)) and time.monotonic() < deadline:
            observations, *_, infos = venv.recv()
            seen.update(infos["env_id"].tolist())
            venv.send(np.array([envs.choose_walk(observation) for observation in observations]))
        assert seen == set(range(N))

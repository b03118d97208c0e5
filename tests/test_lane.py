"""A process worker's lane (aioenv.engine._lane): the steps of a child of one env travel
through a buffer of its own and two wakes, with the types the user gave and in the order
the requests were made; what the lane cannot carry keeps the socket, unchanged."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import gymnasium
import numpy as np
import pytest
from envs import _ChildOnly
from gymnasium import spaces
from support import eventually

import aioenv
from aioenv import RESET


class Echo(gymnasium.Env[np.ndarray, Any]):
    """Observes the action it was given and its type (0: int, 1: numpy scalar, 2: array),
    plus ``bias``; with ``gate`` (a file path), a step waits until that file exists; with
    ``info_every``, every such step has an info: a few scalars of several types, and with
    ``big``, a string too large for the lane's info slot."""

    def __init__(
        self, gate: str | None = None, info_every: int = 0, box: bool = False, big: bool = False
    ) -> None:
        self.observation_space = spaces.Box(-1e9, 1e9, (3,), np.float64)
        self.action_space = spaces.Box(-9, 9, (2,), np.float32) if box else spaces.Discrete(4)
        self.gate, self.info_every, self.bias, self.t = gate, info_every, 0.0, 0
        self.big, self.child_only = big, False

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        deadline = time.monotonic() + 30
        while self.gate is not None and not os.path.exists(self.gate):
            if time.monotonic() > deadline:
                raise TimeoutError("the gate never opened")
            time.sleep(0.002)
        self.t += 1
        kind = 0 if type(action) is int else 1 if isinstance(action, np.generic) else 2
        value = float(np.sum(action)) if kind == 2 else float(action)
        info: dict[str, Any] = {}
        if self.info_every and self.t % self.info_every == 0:
            info = {"t": self.t, "x": np.float64(self.t / 2), "ok": True, "sub": {"k": "v"}}
            if self.big:
                info["log"] = "x" * 4096
            if self.child_only:
                info["lost"] = _ChildOnly()
        return np.array([value, kind, self.bias]), float(self.t), self.t >= 5, False, info


def lane_of(pool: aioenv.AsyncWorkerPool[Any], worker_id: int = 0) -> Any:
    worker = pool.workers[worker_id]
    assert isinstance(worker, aioenv.ProcessWorker)
    return worker._host.lanes.get(worker._slot)  # type: ignore[union-attr]


async def states_of(pool: aioenv.AsyncWorkerPool[Any], actions: list[Any]) -> list[Any]:
    """Worker 0's states after a reset, for each of ``actions`` (a reset where an episode
    ended)."""
    pool.send_action(RESET, 0)
    seen = []
    state, _ = await pool.get_state(worker_id=0)  # type: ignore[misc]
    for action in actions:
        pool.send_action(RESET if state.done else action, 0)
        state, _ = await pool.get_state(worker_id=0)  # type: ignore[misc]
        seen.append(state)
    return seen


@pytest.mark.parametrize("box", [False, True])
async def test_steps_take_the_lane_with_the_types_given(box: bool) -> None:
    if box:
        actions: list[Any] = [np.array([1.0, 2.0], np.float32), np.array([0.5, 0.0], np.float32)]
        actions += [np.array([1.0], np.float32), [1.0, 2.0]]  # the last two do not fit it
    else:
        actions = [1, np.int64(2), 3, np.int32(1), True]  # the last two do not fit it
    async with aioenv.make_pool(lambda: Echo(box=box), 1, mode="process") as in_child:
        through_child = await states_of(in_child, actions)
        assert lane_of(in_child) is not None
    async with aioenv.make_pool(lambda: Echo(box=box), 1, mode="sync") as in_line:
        expected = await states_of(in_line, actions)
    # The env saw each action as the sync worker's env did: the same value, of the same
    # type (its observation's second entry), whether it took the lane or the socket.
    for got, want in zip(through_child, expected, strict=True):
        assert np.array_equal(got.observation, want.observation)
        assert got.observation.dtype == want.observation.dtype
        assert (got.reward, got.terminated, got.info) == (want.reward, want.terminated, want.info)
        assert type(got.reward) is float
        # The lane builds its steps field by field: the same fields, done included.
        assert vars(got).keys() == vars(want).keys()
        assert (got.done, got.truncated, got.final_observation, got.final_info) == (
            want.done,
            want.truncated,
            None,
            None,
        )


async def test_a_step_through_the_lane_is_answered_there() -> None:
    async with aioenv.make_pool(Echo, 1, mode="process") as pool:
        await states_of(pool, [1])
        lane = lane_of(pool)
        assert lane is not None
        answered = int(lane.buffer.seqs[0])
        pool.send_action(2, 0)
        state, _ = await pool.get_state()  # type: ignore[misc]
        assert int(lane.buffer.seqs[0]) == answered + 1  # this step's number, in the row
        assert state.observation.tolist() == [2.0, 0.0, 0.0]


@pytest.mark.parametrize("big", [False, True], ids=["in_the_lane", "on_the_socket"])
async def test_infos_come_back_as_the_env_gave_them(big: bool) -> None:
    """A few scalars pickle into the lane's info slot; an info too large for it takes the
    socket. Either way the state is the one a sync worker hands out."""
    actions = [1, 2, 3, 1]
    async with aioenv.make_pool(lambda: Echo(info_every=2, big=big), 1, mode="process") as pool:
        states = await states_of(pool, actions)
        lane = lane_of(pool)
        assert lane is not None
        # The last step's info (t=4) went through the lane's slot, unless too large.
        in_slot = int.from_bytes(lane.buffer.infos[0, :4].tobytes(), "little")
        assert (in_slot > 0) is not big
    async with aioenv.make_pool(lambda: Echo(info_every=2, big=big), 1, mode="sync") as pool:
        expected = await states_of(pool, actions)
    assert [state.info for state in states] == [state.info for state in expected]
    assert type(states[1].info["x"]) is np.float64 and type(states[1].info["t"]) is int
    assert [state.observation[0] for state in states] == actions


def child_only_infos() -> Echo:
    env = Echo(info_every=2)
    env.child_only = True
    return env


async def test_an_info_the_parent_cannot_unpickle_is_aioenvs_own_error() -> None:
    async with aioenv.make_pool(child_only_infos, 1, mode="process") as pool:
        states = await states_of(pool, [1])  # no info yet
        assert lane_of(pool) is not None and states[0].info == {}
        pool.send_action(2, 0)
        with pytest.raises(aioenv.TransportError, match="could not decode") as raised:
            await pool.get_state()
        assert not isinstance(raised.value, aioenv.EnvError)
        pool.send_action(RESET, 0)  # the env itself is fine
        await pool.get_state()


class DictActions(Echo):
    """Echo with an action space that is not one array: a Dict of a Discrete and a Box."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = spaces.Dict(
            {"move": spaces.Discrete(4), "force": spaces.Box(-1, 1, (2,), np.float32)}
        )

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        flat = action["move"] + float(np.sum(action["force"]))
        return super().step(flat)


async def test_actions_not_of_one_array_take_the_socket_and_their_states_the_lane() -> None:
    actions = [{"move": move, "force": np.array([0.5, 0.25], np.float32)} for move in (1, 2, 3)]
    async with aioenv.make_pool(DictActions, 1, mode="process") as pool:
        states = await states_of(pool, actions[:1])
        lane = lane_of(pool)
        assert lane is not None
        answered = int(lane.buffer.seqs[0])
        assert not lane.put(answered + 1, actions[1], post=False)  # no row for such actions
        states += await states_of(pool, actions[1:])
        # Each answer came back in the row: the reset's, then each step's.
        assert int(lane.buffer.seqs[0]) == answered + 3
    assert [state.observation[0] for state in states] == [1.75, 2.75, 3.75]


# In a child of two envs, worker 1's env shares the child with worker 0's.
shared_or_not = pytest.mark.parametrize("envs", [1, 2], ids=["own_child", "shared_child"])


@shared_or_not
async def test_a_request_made_before_a_step_is_served_before_it(envs: int) -> None:
    async with aioenv.make_pool(Echo, envs, mode="process", envs_per_process=envs) as pool:
        await states_of(pool, [1])
        assert lane_of(pool) is not None
        worker = pool.workers[0]
        numbered = worker._next_seq  # type: ignore[attr-defined]
        async with anyio.create_task_group() as group:
            group.start_soon(pool.set_attr, "bias", 100.0)
            # The control request is numbered as it is written to the socket.
            assert await eventually(lambda: worker._next_seq > numbered)
            pool.send_action(3, 0)  # through the lane
        state, _ = await pool.get_state()  # type: ignore[misc]
        assert state.observation.tolist() == [3.0, 0.0, 100.0]


@shared_or_not
async def test_a_request_made_after_a_step_waits_for_it(tmp_path: Path, envs: int) -> None:
    gate = str(tmp_path / "gate")
    async with aioenv.make_pool(
        lambda: Echo(gate), envs, mode="process", envs_per_process=envs
    ) as pool:
        Path(gate).touch()
        await states_of(pool, [1])
        assert lane_of(pool) is not None
        os.remove(gate)
        pool.send_action(2, 0)  # through the lane; the step waits for the gate
        results: list[Any] = []
        async with anyio.create_task_group() as group:

            async def ask() -> None:
                results.append(await pool.get_attr("t", worker_ids=[0]))

            group.start_soon(ask)
            await anyio.sleep(0.1)  # a call served ahead of the step would be in by now
            assert results == []
            Path(gate).touch()
        assert results == [[2]]
        state, _ = await pool.get_state()  # type: ignore[misc]
        assert state.observation.tolist() == [2.0, 0.0, 0.0]


async def test_no_lane_where_shared_memory_is_refused() -> None:
    async with aioenv.make_pool(Echo, 2, mode="process", shared_memory=False) as pool:
        states = await states_of(pool, [1, 2])
        assert lane_of(pool) is None and lane_of(pool, 1) is None
    assert [state.observation[0] for state in states] == [1, 2]


async def test_each_env_of_a_shared_child_steps_through_a_lane_of_its_own() -> None:
    async with aioenv.make_pool(Echo, 4, mode="process", envs_per_process=2) as pool:
        workers = pool.workers
        assert workers[0].pid == workers[1].pid != workers[2].pid == workers[3].pid
        pool.reset()
        await pool.get_batch(4)
        # Each lane is offered once its env has reported its spaces, and in use once the
        # child has answered the offer.
        assert await eventually(lambda: all(lane_of(pool, i) is not None for i in range(4)))
        lanes = [lane_of(pool, worker_id) for worker_id in range(4)]
        assert len(set(map(id, lanes))) == 4
        answered: list[int] = []
        for round_ in range(4):
            if round_ == 1:
                answered = [int(lane.buffer.seqs[0]) for lane in lanes]
            for worker_id in range(4):
                pool.send_action((worker_id + round_) % 4, worker_id)
            got = {}
            for _ in range(4):
                state, worker_id = await pool.get_state()  # type: ignore[misc]
                got[worker_id] = state.observation[0]
            assert got == {worker_id: (worker_id + round_) % 4 for worker_id in range(4)}
        # Every step was answered in its own env's lane.
        assert [int(lane.buffer.seqs[0]) for lane in lanes] == [seq + 3 for seq in answered]


@shared_or_not
async def test_a_restarted_child_gets_a_lane_of_its_own(envs: int) -> None:
    async with aioenv.make_pool(
        Echo, envs, mode="process", envs_per_process=envs, restart="on_failure"
    ) as pool:
        await states_of(pool, [1])
        first = lane_of(pool)
        assert first is not None
        worker = pool.workers[0]
        assert isinstance(worker, aioenv.ProcessWorker)
        os.kill(worker.pid, 9)
        pool.send_action(2, 0)
        await pool.get_state()  # the restart's state, once a new child has the env
        states = await states_of(pool, [3, 1])
        assert [state.observation[0] for state in states] == [3, 1]
        assert lane_of(pool) is not None and lane_of(pool) is not first


async def batches_of(pool: aioenv.AsyncWorkerPool[Any], rounds: int) -> list[Any]:
    """Worker 0's BatchSteps: its reset's, then one per round of actions (each env's
    action its row number plus the round, so each row's observation tells them apart)."""
    pool.send_action(RESET, 0)
    batches = [(await pool.get_state(worker_id=0))[0]]  # type: ignore[misc]
    for round_ in range(rounds):
        pool.send_action(np.array([round_ % 4, (round_ + 1) % 4]), 0)
        batches.append((await pool.get_state(worker_id=0))[0])  # type: ignore[misc]
    return batches


@pytest.mark.parametrize("autoreset", ["next_step", "same_step"])
@pytest.mark.parametrize("big", [False, True], ids=["in_the_lane", "on_the_socket"])
async def test_a_worker_of_several_envs_gets_its_batches_through_the_lane(
    autoreset: str, big: bool
) -> None:
    """A BatchStep's observations come back in the lane's row, its rewards, flags and
    infos in the info slot; infos too large for it take the socket. Either way the batch
    is the one a sync worker of the same envs hands out: the same rows, infos in both
    forms and final observations."""
    options: dict[str, Any] = {"envs_per_worker": 2, "autoreset": autoreset}
    make = lambda: Echo(info_every=2, big=big)  # noqa: E731
    async with aioenv.make_pool(make, 1, mode="process", **options) as pool:
        got = await batches_of(pool, 14)
        lane = lane_of(pool)
        assert lane is not None
        # The last batch (each env at an even step of its episode: an info on each row)
        # was answered in the lane, its observations in the row, unless its infos were too
        # large for the slot.
        assert np.array_equal(lane.observations.views, got[-1].observations) is not big
    async with aioenv.make_pool(make, 1, mode="sync", **options) as pool:
        expected = await batches_of(pool, 14)
    assert set(expected[-1].infos) == {0, 1}
    for batch, want in zip(got, expected, strict=True):
        assert isinstance(batch, aioenv.BatchStep)
        assert np.array_equal(batch.observations, want.observations)
        assert batch.observations.dtype == want.observations.dtype
        for field in ("rewards", "terminated", "truncated"):
            mine, theirs = getattr(batch, field), getattr(want, field)
            assert np.array_equal(mine, theirs) and mine.dtype == theirs.dtype
        assert batch.infos == want.infos
        assert batch.final_infos == want.final_infos
        assert batch.final_observations.keys() == want.final_observations.keys()
        for row, final in want.final_observations.items():
            assert np.array_equal(batch.final_observations[row], final)
    assert any(batch.infos for batch in got) and any(batch.terminated.any() for batch in got)
    if autoreset == "same_step":
        assert any(batch.final_observations for batch in got)


async def test_the_steps_sent_to_a_shared_childs_envs_together_are_posted_together() -> None:
    """A child of several envs is woken once for the steps sent to its envs in one loop
    iteration: each is written into its lane at once and posted at the iteration's end."""
    async with aioenv.make_pool(Echo, 2, mode="process", envs_per_process=2) as pool:
        await states_of(pool, [1])
        assert await eventually(lambda: all(lane_of(pool, i) is not None for i in range(2)))
        host = pool.workers[0]._host  # type: ignore[attr-defined]
        pool.send_action(2, 0)
        pool.send_action(3, 1)
        assert host._posts == [lane_of(pool, 0), lane_of(pool, 1)]  # written, not posted
        got = {}
        for _ in range(2):
            state, worker_id = await pool.get_state()  # type: ignore[misc]
            got[worker_id] = state.observation[0]
        assert host._posts == [] and got == {0: 2.0, 1: 3.0}

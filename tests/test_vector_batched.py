"""AioVectorEnv over workers that step several envs each (``envs_per_worker``, and the
default grouping of process workers): array by array what SyncVectorEnv gives."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import Rendezvous, Structured, Walk
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import aioenv
from aioenv.vector._grouping import envs_per_worker as _envs_per_worker

N = 4
AUTORESET = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}


def assert_same_observations(ours: Any, theirs: Any) -> None:
    if isinstance(theirs, dict):
        assert set(ours) == set(theirs)
        for key in theirs:
            assert_same_observations(ours[key], theirs[key])
    elif isinstance(theirs, tuple):
        for mine, reference in zip(ours, theirs, strict=True):
            assert_same_observations(mine, reference)
    else:
        np.testing.assert_array_equal(ours, theirs)


def assert_same_infos(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """gymnasium's info dicts, ``final_obs`` holding whole observations (dicts too)."""
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        if isinstance(value, dict):
            assert_same_infos(ours[key], value)
        elif key == "final_obs":
            for mine, reference in zip(ours[key], value, strict=True):
                assert (mine is None) == (reference is None)
                if reference is not None:
                    assert_same_observations(mine, reference)
        elif key == "final_info":
            for mine, reference in zip(ours[key], value, strict=True):
                if isinstance(reference, dict):
                    assert_same_infos(mine, reference)
                else:
                    assert mine == reference
        else:
            np.testing.assert_array_equal(ours[key], value)


@pytest.mark.parametrize("autoreset", list(AUTORESET))
@pytest.mark.parametrize(("mode", "per_worker"), [("process", 2), ("thread", 4), ("sync", 2)])
@pytest.mark.parametrize("env", ["CartPole-v1", "structured"])
def test_grouped_envs_give_sync_vector_envs_rollout(
    env: str, mode: str, per_worker: int, autoreset: str
) -> None:
    make = (lambda: gymnasium.make("CartPole-v1")) if env == "CartPole-v1" else Structured
    reference = SyncVectorEnv([make] * N, autoreset_mode=AUTORESET[autoreset])
    ours = aioenv.AioVectorEnv(
        [make] * N, mode=mode, envs_per_worker=per_worker, autoreset_mode=autoreset
    )
    try:
        assert ours.group_sizes == (per_worker,) * (N // per_worker) and ours.num_envs == N
        assert ours.observation_space == reference.observation_space
        mine, theirs = ours.reset(seed=7), reference.reset(seed=7)
        assert_same_observations(mine[0], theirs[0])
        assert_same_infos(mine[1], theirs[1])
        rng = np.random.default_rng(2)
        ends = 0
        for _ in range(60):
            actions = rng.integers(0, 2, N)
            a, b = ours.step(actions), reference.step(actions)
            assert_same_observations(a[0], b[0])
            for field in (1, 2, 3):
                np.testing.assert_array_equal(a[field], b[field])
            assert_same_infos(a[4], b[4])
            done = b[2] | b[3]
            ends += int(done.sum())
            if autoreset == "disabled" and done.any():
                mask = done.copy()
                mine, theirs = (
                    env.reset(options={"reset_mask": mask}) for env in (ours, reference)
                )
                assert_same_observations(mine[0], theirs[0])
                assert_same_infos(mine[1], theirs[1])
        assert ends > 0
    finally:
        ours.close()
        reference.close()


@pytest.mark.parametrize(
    ("mode", "options"),
    [
        ("thread", {"envs_per_worker": 2}),
        ("sync", {"envs_per_worker": 4}),
        ("process", {"envs_per_worker": 2, "shared_memory": False}),
        ("process", {"envs_per_worker": 2}),
    ],
)
def test_the_vector_envs_seed_gives_each_env_its_seed_however_the_envs_are_grouped(
    mode: str, options: dict[str, Any]
) -> None:
    """AioVectorEnv(seed=s) seeds env i as a worker of that one env is seeded (as in line
    and in the engine's children), whatever workers its envs are grouped into."""

    def rollout(envs: aioenv.AioVectorEnv) -> list[Any]:
        with envs:
            steps = [envs.reset()[0]]
            steps += [envs.step(np.array([0, 1, 1, 0]))[:4] for _ in range(40)]
            return steps

    theirs = rollout(aioenv.AioVectorEnv("CartPole-v1", N, mode="sync", seed=5))
    ours = rollout(aioenv.AioVectorEnv("CartPole-v1", N, mode=mode, seed=5, **options))
    for mine, reference in zip(ours, theirs, strict=True):
        assert_same_observations(mine, reference)


def test_attributes_are_per_env_through_grouped_workers() -> None:
    with aioenv.AioVectorEnv("CartPole-v1", N, mode="process", envs_per_worker=2) as ours:
        ours.reset(seed=3)
        assert ours.np_random_seed == (3, 4, 5, 6)
        ours.set_attr("gravity", [9.0, 9.5, 10.0, 10.5])
        assert ours.get_attr("gravity") == (9.0, 9.5, 10.0, 10.5)
        ours.set_attr("gravity", 1.5)  # one value for every env
        assert ours.call("get_wrapper_attr", "gravity") == (1.5,) * N
        with pytest.raises(ValueError, match="3 values for 4 envs"):
            ours.set_attr("gravity", [1.0, 2.0, 3.0])


def test_an_env_error_in_a_group_is_the_envs_own_exception_and_the_env_stays_usable() -> None:
    from envs import RaisesOnTwo

    with aioenv.AioVectorEnv(RaisesOnTwo, N, mode="process", envs_per_worker=2) as ours:
        ours.reset(seed=0)
        with pytest.raises(ValueError, match="action 2 is not allowed") as raised:
            ours.step(np.array([0, 0, 2, 0]))
        notes = "".join(getattr(raised.value, "__notes__", [])) or str(raised.value.__cause__)
        assert "envs 2-3 (worker 1)" in notes and "env 0 of the batch" in notes
        observations, *_ = ours.reset(seed=0)
        assert observations.shape == (N, 1)
        assert ours.step(np.array([0, 1, 0, 1]))[0].tolist() == [[1.0]] * N


def test_an_observation_a_group_cannot_batch_is_named_after_the_env_that_gave_it() -> None:
    from envs import Misshapen

    with aioenv.AioVectorEnv(Misshapen, N, mode="process", envs_per_worker=N) as ours:
        ours.reset(seed=0)
        with pytest.raises(ValueError, match="same shape") as raised:
            ours.step(np.array([0, 0, 2, 0]))
        notes = "".join(getattr(raised.value, "__notes__", [])) or str(raised.value.__cause__)
        assert "raised by env 2, one of envs 0-3 (worker 0)" in notes, notes


def test_process_workers_are_grouped_from_the_cores_by_default() -> None:
    """One child per core but one (the script's), at least one child."""
    assert _envs_per_worker(16, 2) == 16
    assert _envs_per_worker(4, 2) == 4
    assert _envs_per_worker(16, 1) == 16
    assert _envs_per_worker(16, 16) == 2
    assert _envs_per_worker(64, 16) == 4
    assert _envs_per_worker(7, 3) == 1  # no divisor fits: one env per worker
    assert _envs_per_worker(6, 4) == 2
    with aioenv.AioVectorEnv("CartPole-v1", N, mode="process") as grouped:
        expected = N // _envs_per_worker(N, len(os.sched_getaffinity(0)))
        assert grouped.group_sizes == (N // expected,) * expected
    with aioenv.AioVectorEnv("CartPole-v1", N, mode="process", envs_per_worker=1) as single:
        assert single.group_sizes == (1,) * N


async def test_a_vector_env_made_in_plain_code_can_be_used_and_closed_from_async_code() -> None:
    """Its loop runs in the calling thread; with another loop running there, a helper
    thread runs it instead of failing (and nothing is left behind)."""
    envs = await asyncio.to_thread(aioenv.AioVectorEnv, "CartPole-v1", 2, mode="process")
    observations, _ = envs.reset(seed=1)  # from inside this running loop
    assert observations.shape == (2, 4)
    envs.close()


@pytest.mark.parametrize(
    ("cores", "options", "spin"),
    [
        (2, {}, 0.002),  # one child of 16: it polls, yielding to the script
        (16, {}, 0.002),  # 8 children of 2
        (1, {}, None),  # the child shares the script's only core: no spinning
        (2, {"envs_per_worker": 8}, 0.002),  # a child per core
        (2, {"envs_per_worker": 1}, None),  # 16 children on 2 cores
        (2, {"idle_spin": 0.0}, 0.0),  # the user's choice stands
    ],
)
def test_grouped_process_workers_spin_only_with_a_core_each(
    monkeypatch: pytest.MonkeyPatch, cores: int, options: dict[str, Any], spin: float | None
) -> None:
    from aioenv.vector import _grouping as _layout

    monkeypatch.setattr(_layout, "usable_cores", lambda: cores)
    options = dict(options)
    _layout.group_size(16, "process", options)
    assert options.get("idle_spin") == spin
    options = {}
    _layout.group_size(16, "thread", options)
    assert "idle_spin" not in options


@pytest.mark.parametrize(
    ("cores", "mode", "spin"),
    [
        (2, ["process", "sync"], 0.002),  # the script's core steps the sync worker's envs
        (2, ["process", "process", "sync"], None),  # 2 children, 1 core left for them
        (4, ["process", "process", "sync"], 0.002),
        (1, ["process", "sync"], None),
        (2, ["process", "process"], 0.002),  # children only, as mode="process"
        (2, ["sync", "thread"], None),  # no child to spin
    ],
)
def test_process_workers_in_a_list_of_modes_spin_only_with_a_core_each(
    monkeypatch: pytest.MonkeyPatch, cores: int, mode: list[str], spin: float | None
) -> None:
    """Workers that run in the parent (sync, thread) keep its core busy while they step,
    so children spin only where they have a core each besides that one."""
    from aioenv.vector import _grouping as _layout

    monkeypatch.setattr(_layout, "usable_cores", lambda: cores)
    options: dict[str, Any] = {"envs_per_worker": 4}
    _layout.group_size(4 * len(mode), mode, options)
    assert options.get("idle_spin") == spin


def _meeting(folder: Path) -> list[Any]:
    """Env 0 waits at each call for env 1 to have begun its own (see Rendezvous)."""
    meeting = functools.partial(Rendezvous, str(folder))
    return [functools.partial(meeting, "second"), functools.partial(meeting, "first")]


@pytest.mark.parametrize("kinds", [["sync", "process"], ["sync", "thread"]])
def test_a_sync_worker_steps_while_the_others_do(tmp_path: Path, kinds: list[str]) -> None:
    """A sync worker steps its envs inside the send, so the vector env sends it its action
    last: listed first, it would step before the other worker is sent anything. Env 0
    (the sync worker's) waits at each reset and step for env 1 to have begun its own."""
    envs = _meeting(tmp_path)
    with aioenv.AioVectorEnv(envs, mode=kinds) as venv:
        _, infos = venv.reset(seed=0)
        assert infos["met"].tolist() == [True, True]
        for _ in range(3):
            *_, infos = venv.step(np.zeros(2, np.int64))
            assert infos["met"].tolist() == [True, True]
        # step_async sends as step does
        venv.step_async(np.zeros(2, np.int64))
        *_, infos = venv.step_wait()
        assert infos["met"].tolist() == [True, True]


async def test_a_pool_resets_and_rolls_out_its_sync_workers_last(tmp_path: Path) -> None:
    """The pool's own resets and rollouts send as the vector env does (env 0 is the sync
    worker's, and waits for env 1 to have begun each call: see the test above)."""
    envs = _meeting(tmp_path)
    async with aioenv.make_pool(envs, mode=["sync", "process"]) as pool:
        batch = await pool.reset_all(seed=0)
        assert [state.info["met"] for state in batch.states] == [True, True]
        await pool.set_policy(lambda observation: 0)
        rows = await pool.rollout(3)
        assert rows.rewards.tolist() == [1.0] * 6  # every step of both envs met
        assert pool.send_order([0, 1]) == [1, 0]
        assert pool.send_order([1]) == [1]


class _SawResets(Exception):
    """Raised by the policy below at its first call."""


@pytest.mark.parametrize("collector", ["collect", "collect_groups"])
async def test_the_collectors_reset_their_sync_workers_last(tmp_path: Path, collector: str) -> None:
    """``collect()`` and ``collect_groups()`` send each batch of resets and of actions in the
    pool's send order (env 0 is the sync worker's, and waits for env 1 to have begun each
    call). Every worker starts with a reset, all sent together; the policy then sees the
    reset states and raises, so that no step is sent (which states a later batch holds
    depends on timing)."""
    seen: dict[int, bool] = {}

    def policy(batch: aioenv.Batch[Any]) -> Any:
        seen.update((worker_id, state.info["met"]) for state, worker_id in batch)
        raise _SawResets

    envs = _meeting(tmp_path)
    async with aioenv.make_pool(envs, mode=["sync", "process"], autoreset="disabled") as pool:
        if collector == "collect":
            collecting = aioenv.collect(pool, policy, num_steps=1)
        else:
            collecting = aioenv.collect_groups(pool, policy, [{}], group_size=2).__anext__()
        with pytest.raises(_SawResets):
            await collecting
        assert seen.get(0) is True  # the sync worker's reset state is ready at once


def test_a_masked_reset_leaves_the_last_steps_arrays_as_they_were() -> None:
    with aioenv.AioVectorEnv(
        Walk, N, mode="thread", envs_per_worker=2, autoreset="disabled"
    ) as venv:
        venv.reset(seed=0)
        _, rewards, terminations, _, _ = venv.step(np.ones(N, np.int64))
        handed_out = rewards.copy(), terminations.copy()
        venv.reset(options={"reset_mask": np.array([True, False, False, False])})
        np.testing.assert_array_equal(rewards, handed_out[0])
        np.testing.assert_array_equal(terminations, handed_out[1])


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_actions_of_a_space_with_its_own_batching_reach_each_env_of_a_group(mode: str) -> None:
    """A space whose author registered its batching with gymnasium (``Knob``: a batch is
    a ``KnobBatch``) is split per env by ``iterate`` and joined per worker again by the
    author's ``concatenate``: each env of each group gets its own action."""
    from own_batching import KnobBatch, KnobEnv

    with aioenv.AioVectorEnv(KnobEnv, N, mode=mode, envs_per_worker=2) as ours:
        assert ours.group_sizes == (2, 2)
        ours.reset(seed=0)
        for values in ([1, 2, 3, 4], [9, 0, 5, 7]):
            observations, rewards, *_ = ours.step(KnobBatch(values))
            assert observations[:, 0].tolist() == values
            assert rewards.tolist() == values
        pids = observations[:, 1].tolist()
        assert pids[0] == pids[1] and pids[2] == pids[3]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_next_step_autoreset_that_raises_in_a_group_is_the_envs_error(mode: str) -> None:
    """Under ``"next_step"`` the step after an episode's end resets the env: a reset that
    raises there is that env's error, as in SyncVectorEnv, and no step is taken."""
    from envs import ResetFailsAfterEpisode

    with aioenv.AioVectorEnv(
        ResetFailsAfterEpisode, 2, mode=mode, envs_per_worker=2, autoreset_mode="next_step"
    ) as ours:
        ours.reset(seed=0)
        ours.step(np.array([0, 0]))
        assert ours.step(np.array([0, 0]))[2].tolist() == [True, True]
        with pytest.raises(ValueError, match="the reset after the first episode fails"):
            ours.step(np.array([0, 0]))
    reference = SyncVectorEnv([ResetFailsAfterEpisode] * 2, autoreset_mode=AutoresetMode.NEXT_STEP)
    with contextlib.closing(reference):
        reference.reset(seed=0)
        reference.step(np.array([0, 0]))
        reference.step(np.array([0, 0]))
        with pytest.raises(ValueError, match="the reset after the first episode fails"):
            reference.step(np.array([0, 0]))


class _Misfit(gymnasium.Env[np.ndarray, int]):
    """An env of a uint8 Box of shape (2,) whose ``phase`` ("reset" or "step") gives an
    observation gymnasium cannot batch as one of its space: ``"dtype"``, int64 300s (a
    value uint8 cannot hold); ``"shape"``, one value short."""

    observation_space = gymnasium.spaces.Box(0, 255, (2,), np.uint8)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, phase: str, wrong: str) -> None:
        self.phase, self.wrong = phase, wrong

    def _observation(self, phase: str) -> np.ndarray:
        if phase != self.phase:
            return np.ones(2, np.uint8)
        return np.full(2, 300, np.int64) if self.wrong == "dtype" else np.ones(1, np.uint8)

    def reset(
        self, *, seed: int | None = None, options: Any = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return self._observation("reset"), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return self._observation("step"), 0.0, False, False, {}


GROUPS = {
    "thread": {"mode": "thread", "envs_per_worker": 2},
    "sync": {"mode": "sync", "envs_per_worker": 2},
    "process": {"mode": "process", "envs_per_worker": 2, "shared_memory": False},
}


@pytest.mark.parametrize("phase", ["reset", "step"])
@pytest.mark.parametrize(
    ("kind", "wrong"),
    [*((kind, "dtype") for kind in ["inline", *GROUPS]), *((kind, "shape") for kind in GROUPS)],
)
def test_a_box_observation_gymnasium_cannot_batch_is_refused_as_gymnasium_refuses_it(
    kind: str, wrong: str, phase: str
) -> None:
    """gymnasium's batching casts same_kind only and never broadcasts, so SyncVectorEnv
    raises its TypeError or ValueError; a group's batch was cast unsafely (300 became 44)
    or broadcast (one value filled the row) by the vector env, and inline envs' resets too."""
    factory = functools.partial(_Misfit, phase, wrong)
    options = GROUPS.get(kind, {"mode": kind})
    error, match = (TypeError, "same_kind") if wrong == "dtype" else (ValueError, "wrong shape")
    reference = SyncVectorEnv([factory] * 2)
    with aioenv.AioVectorEnv([factory] * 2, **options) as ours, contextlib.closing(reference):
        for envs in (reference, ours):
            if phase == "reset":
                with pytest.raises(error, match=match):
                    envs.reset(seed=0)
            else:
                assert envs.reset(seed=0)[0].tolist() == [[1, 1], [1, 1]]
                with pytest.raises(error, match=match):
                    envs.step(np.array([0, 0]))

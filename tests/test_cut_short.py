"""An env that fails mid-episode and is restarted ends its episode like any truncated
episode, on every face and kind: the step whose env failed is truncated, with reward 0,
the last observation seen (``final_obs`` under same-step autoreset) and the reason under
``info["aioenv"]``; the new env's reset follows as an autoreset's does."""

from __future__ import annotations

import functools
import os
import signal
from typing import Any

import numpy as np
import pytest
from envs import (
    AsyncBreakable,
    AsyncEndsThenFailsToReset,
    Breakable,
    EndingBreakable,
    EndsThenFailsToReset,
    TextBreakable,
)
from support import process_running, wait_until

import aioenv
from aioenv.core._environment import BatchStep, Step
from aioenv.core._restarts import (
    cut_short,
    cut_short_batch,
    cut_short_state,
    open_episode,
    restart_answers,
    restart_marker,
    restarted_state,
)
from aioenv.core._rollouts import PolicyPackage, Rollout

AUTORESETS = ["disabled", "next_step", "same_step"]
RAISE, DIE, HANG = 1, 2, 3
#: Each kind with the faults it can suffer: a sync worker's hang blocks the loop (its
#: deadline is checked once it returns), so it is left to the sync worker's own tests.
CASES = [
    ("sync", RAISE),
    ("thread", RAISE),
    ("thread", HANG),
    ("process", RAISE),
    ("process", HANG),
    ("process", DIE),
    ("async", RAISE),
    ("async", HANG),
]
REASONS = {RAISE: "EnvError", DIE: "WorkerDied", HANG: "WorkerTimeout"}
STEP_TIMEOUT = 1.0  # a hang lasts 4 s: past it, and short enough to end


def env_for(kind: str) -> Any:
    env = AsyncBreakable if kind == "async" else Breakable
    return lambda: env(hang=4 * STEP_TIMEOUT)


def options(fault: int, autoreset: str) -> dict[str, Any]:
    timeout = {"step_timeout": STEP_TIMEOUT} if fault == HANG else {}
    return {"restart": "on_failure", "autoreset": autoreset, **timeout}


def assert_cut_short(state: Step[Any], last: np.ndarray, fault: int, autoreset: str) -> None:
    """``state`` ends the episode whose last observation was ``last``, for ``fault``."""
    assert (state.reward, state.terminated, state.truncated) == (0.0, False, True)
    marker = (state.final_info if autoreset == "same_step" else state.info)["aioenv"]
    assert marker["restarted"] is True and REASONS[fault] in marker["reason"]
    if autoreset == "same_step":  # the new env's reset is carried, as an autoreset's
        np.testing.assert_array_equal(state.final_observation, last)
        assert state.final_info == {"aioenv": marker}
        assert state.observation[0] == 0 and state.info["reset"] is True
    else:
        np.testing.assert_array_equal(state.observation, last)
        assert state.info == {"aioenv": marker}  # nothing of the user's is made up


# The pool's face -------------------------------------------------------------------------
@pytest.mark.parametrize("autoreset", AUTORESETS)
@pytest.mark.parametrize(("kind", "fault"), CASES)
async def test_a_failed_step_ends_the_episode_truncated_and_the_reset_follows(
    kind: str, fault: int, autoreset: str
) -> None:
    async with aioenv.make_pool(env_for(kind), 2, mode=kind, **options(fault, autoreset)) as pool:
        await pool.reset_all()
        for _ in range(2):
            for worker_id in (0, 1):
                pool.send_action(0, worker_id)
            batch = (await pool.get_batch(min_size=2)).sorted()
        last = batch.states[0].observation.copy()
        pool.send_action(fault, 0)
        pool.send_action(0, 1)
        cut, healthy = (await pool.get_batch(min_size=2)).sorted().states
        assert_cut_short(cut, last, fault, autoreset)
        assert healthy.observation[0] == 3 and not healthy.done  # the other env goes on
        # Under "disabled" the user resets; under "next_step" the next step is the reset.
        pool.send_action(aioenv.RESET if autoreset == "disabled" else 0, 0)
        after, _ = await pool.get_state()  # type: ignore[misc]
        assert not after.done and after.final_observation is None
        if autoreset == "same_step":  # the new episode goes on from the reset carried
            assert after.observation[0] == 1 and after.reward == 1.0
        else:
            assert after.observation[0] == 0 and after.reward == 0.0 and after.info["reset"]
        assert pool.restarts == 1
        stats = pool.episode_stats()[0]
        # The cut-short episode counts as ended: two steps, then the truncated one.
        assert (stats.episodes, stats.last_length, stats.last_return) == (1, 3, 2.0)


async def test_a_failure_right_after_a_same_step_autoreset_cuts_the_new_episode_short() -> None:
    # Under "same_step" the step that ends an episode already holds the next one's reset:
    # that episode is open, so a failure at the very next step cuts it short.
    async with aioenv.make_pool(
        env_for("sync"), 1, mode="sync", max_episode_steps=2, **options(RAISE, "same_step")
    ) as pool:
        await pool.reset_all()
        for _ in range(2):
            pool.send_action(0, 0)
            ended, _ = await pool.get_state()  # type: ignore[misc]
        assert ended.truncated and ended.final_observation is not None  # the reset carried
        pool.send_action(RAISE, 0)
        cut, _ = await pool.get_state()  # type: ignore[misc]
        assert_cut_short(cut, ended.observation, RAISE, "same_step")
        assert pool.restarts == 1


@pytest.mark.parametrize("kind", ["sync", "thread"])
async def test_a_failure_after_an_episode_ended_by_itself_cuts_nothing_short(kind: str) -> None:
    # Under "disabled" a step sent after the episode terminated finds no episode open:
    # the env that fails there is restarted and its reset answers, marked, not truncated.
    async with aioenv.make_pool(
        EndingBreakable, 1, mode=kind, **options(RAISE, "disabled")
    ) as pool:
        await pool.reset_all()
        for _ in range(2):
            pool.send_action(0, 0)
            ended, _ = await pool.get_state()  # type: ignore[misc]
        assert ended.terminated and not ended.truncated
        pool.send_action(RAISE, 0)
        after, _ = await pool.get_state()  # type: ignore[misc]
        assert not (after.terminated or after.truncated) and after.info["reset"] is True
        assert after.info["aioenv"]["restarted"] is True
        assert after.observation[0] == 0 and pool.restarts == 1
        stats = pool.episode_stats()[0]
        assert (stats.episodes, stats.last_length) == (1, 2)  # nothing more was cut short
        for _ in range(2):  # the restarted env's reset began the next episode
            pool.send_action(0, 0)
            ended, _ = await pool.get_state()  # type: ignore[misc]
        assert ended.terminated
        stats = pool.episode_stats()[0]
        assert (stats.episodes, stats.last_length, stats.total_length) == (2, 2, 4)


def assert_ended_then_restarted(ended: Step[Any], autoreset: str) -> None:
    """``ended`` is the step that terminated the episode, as the env gave it (reward 1,
    its observation and info), carrying under ``"same_step"`` the restarted env's reset."""
    assert (ended.reward, ended.terminated, ended.truncated) == (1.0, True, False)
    if autoreset == "next_step":  # the failing reset comes with the next step
        assert ended.observation[0] == 2 and ended.info == {"t": 2}
        return
    assert ended.final_observation[0] == 2 and ended.final_info == {"t": 2}
    assert ended.observation[0] == 0 and ended.info["reset"] is True
    assert "could not start a new episode" in ended.info["aioenv"]["reason"]


@pytest.mark.parametrize("autoreset", ["same_step", "next_step"])
@pytest.mark.parametrize("kind", ["sync", "thread", "process", "async"])
async def test_an_episode_that_ended_keeps_its_ending_when_its_autoreset_fails(
    kind: str, autoreset: str
) -> None:
    # The env's reset after its episode terminated raises: the episode ended for real
    # (terminated, its reward), and the restarted env's reset starts the next one.
    env = AsyncEndsThenFailsToReset if kind == "async" else EndsThenFailsToReset
    async with aioenv.make_pool(env, 1, mode=kind, **options(RAISE, autoreset)) as pool:
        await pool.reset_all()
        for _ in range(2):
            pool.send_action(0, 0)
            ended, _ = await pool.get_state()  # type: ignore[misc]
        assert_ended_then_restarted(ended, autoreset)
        pool.send_action(0, 0)
        after, _ = await pool.get_state()  # type: ignore[misc]
        assert not after.done and pool.restarts == 1
        if autoreset == "same_step":  # the new episode goes on from the reset carried
            assert after.observation[0] == 1 and after.reward == 1.0
        else:  # the restarted env's reset answers, as the reset it stands for
            assert after.observation[0] == 0 and after.reward == 0.0 and after.info["reset"]
            assert after.info["aioenv"]["restarted"] is True
        stats = pool.episode_stats()[0]
        assert (stats.episodes, stats.last_length, stats.last_return) == (1, 2, 2.0)


@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
async def test_a_ray_actors_episode_keeps_its_ending_when_its_autoreset_fails() -> None:
    async with aioenv.make_pool(
        EndsThenFailsToReset, 1, mode="ray", num_cpus=0, **options(RAISE, "same_step")
    ) as pool:
        await pool.reset_all()
        for _ in range(2):
            pool.send_action(0, 0)
            ended, _ = await pool.get_state()  # type: ignore[misc]
        assert_ended_then_restarted(ended, "same_step")
        assert pool.restarts == 1


@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("autoreset", AUTORESETS)
@pytest.mark.parametrize("fault", [RAISE, DIE])
async def test_a_ray_actors_failed_step_ends_the_episode_truncated(
    fault: int, autoreset: str
) -> None:
    async with aioenv.make_pool(
        Breakable, 1, mode="ray", num_cpus=0, **options(fault, autoreset)
    ) as pool:
        await pool.reset_all()
        pool.send_action(0, 0)
        last, _ = await pool.get_state()  # type: ignore[misc]
        pool.send_action(fault, 0)
        cut, _ = await pool.get_state()  # type: ignore[misc]
        assert_cut_short(cut, last.observation, fault, autoreset)
        pool.send_action(aioenv.RESET if autoreset == "disabled" else 0, 0)
        after, _ = await pool.get_state()  # type: ignore[misc]
        assert not after.done and after.observation[0] == (1 if autoreset == "same_step" else 0)
        stats = pool.episode_stats()[0]
        assert (stats.episodes, stats.last_length, stats.last_return) == (1, 2, 1.0)


@pytest.mark.parametrize("autoreset", AUTORESETS)
async def test_an_env_that_died_while_idle_ends_its_episode_at_the_next_step(
    autoreset: str,
) -> None:
    async with aioenv.make_pool(Breakable, 1, mode="process", **options(DIE, autoreset)) as pool:
        await pool.reset_all()
        pool.send_action(0, 0)
        step, _ = await pool.get_state()  # type: ignore[misc]
        os.kill(pool.workers[0].pid, signal.SIGKILL)  # type: ignore[attr-defined]
        assert wait_until(lambda: not process_running(pool.workers[0].pid))  # type: ignore[attr-defined]
        pool.send_action(0, 0)
        cut, _ = await pool.get_state()  # type: ignore[misc]
        assert_cut_short(cut, step.observation, DIE, autoreset)


@pytest.mark.parametrize("autoreset", AUTORESETS)
@pytest.mark.parametrize("kind", ["sync", "thread", "process"])
async def test_grouped_envs_each_end_their_episode_truncated(kind: str, autoreset: str) -> None:
    async with aioenv.make_pool(
        Breakable, 1, mode=kind, envs_per_worker=2, **options(RAISE, autoreset)
    ) as pool:
        await pool.reset_all()
        pool.send_action(np.array([0, 0]), 0)
        last, _ = await pool.get_state()  # type: ignore[misc]
        last_observations = np.array(last.observations)
        pool.send_action(np.array([0, RAISE]), 0)
        cut, _ = await pool.get_state()  # type: ignore[misc]
        assert isinstance(cut, BatchStep)
        assert cut.truncated.all() and not cut.terminated.any() and not cut.rewards.any()
        for row in range(2):
            state = Step(
                cut.observations[row],
                float(cut.rewards[row]),
                bool(cut.terminated[row]),
                bool(cut.truncated[row]),
                cut.infos.get(row, {}),
                cut.final_observations.get(row),
                cut.final_infos.get(row),
            )
            assert_cut_short(state, last_observations[row], RAISE, autoreset)
        pool.send_action(aioenv.RESET if autoreset == "disabled" else np.array([0, 0]), 0)
        after, _ = await pool.get_state()  # type: ignore[misc]
        assert not after.dones.any()
        expected = 1 if autoreset == "same_step" else 0
        np.testing.assert_array_equal(np.array(after.observations)[:, 0], [expected] * 2)


@pytest.mark.parametrize("kind", ["sync", "process"])
async def test_grouped_envs_whose_autoreset_fails_each_end_their_episode(kind: str) -> None:
    # The envs of a worker are replaced together: every row's episode ends there.
    async with aioenv.make_pool(
        EndsThenFailsToReset, 1, mode=kind, envs_per_worker=2, **options(RAISE, "same_step")
    ) as pool:
        await pool.reset_all()
        for _ in range(2):
            pool.send_action(np.array([0, 0]), 0)
            ended, _ = await pool.get_state()  # type: ignore[misc]
        assert isinstance(ended, BatchStep) and ended.dones.all() and pool.restarts == 1
        assert all(info["aioenv"]["restarted"] for info in ended.final_infos.values())


@pytest.mark.parametrize("kind", ["sync", "thread", "process"])
async def test_grouped_envs_of_a_space_batched_as_a_tuple_of_rows_end_on_their_own_rows(
    kind: str,
) -> None:
    # Text observations, which gymnasium batches as a tuple with one string per env: each
    # row's final observation is its own string, where each was taken as a Tuple space's
    # part and indexed by the row (its first character, then its second).
    async with aioenv.make_pool(
        TextBreakable, 1, mode=kind, envs_per_worker=2, **options(RAISE, "same_step")
    ) as pool:
        await pool.reset_all()
        pool.send_action(np.array([0, 0]), 0)
        last, _ = await pool.get_state()  # type: ignore[misc]
        pool.send_action(np.array([0, RAISE]), 0)
        cut, _ = await pool.get_state()  # type: ignore[misc]
    assert isinstance(cut, BatchStep) and cut.truncated.all()
    assert cut.final_observations == {0: last.observations[0], 1: last.observations[1]}
    assert last.observations[0].startswith("1/")


@pytest.mark.parametrize("kind", ["sync", "process"])
async def test_a_failure_right_after_every_row_of_a_group_reset_cuts_the_new_episodes_short(
    kind: str,
) -> None:
    # Under "same_step" a batch whose rows all ended already holds every row's next reset:
    # those episodes are open, so a failure at the next step cuts each of them short.
    async with aioenv.make_pool(
        Breakable,
        1,
        mode=kind,
        envs_per_worker=2,
        max_episode_steps=2,
        **options(RAISE, "same_step"),
    ) as pool:
        await pool.reset_all()
        for _ in range(2):
            pool.send_action(np.array([0, 0]), 0)
            ended, _ = await pool.get_state()  # type: ignore[misc]
        assert isinstance(ended, BatchStep) and ended.truncated.all()
        resets = np.array(ended.observations)  # the next episodes' resets, carried
        pool.send_action(np.array([RAISE, 0]), 0)
        cut, _ = await pool.get_state()  # type: ignore[misc]
        assert isinstance(cut, BatchStep)
        assert cut.truncated.all() and not cut.terminated.any() and not cut.rewards.any()
        for row in range(2):
            np.testing.assert_array_equal(cut.final_observations[row], resets[row])
            assert cut.final_infos[row]["aioenv"]["restarted"] is True
        assert pool.restarts == 1


# The vector face -------------------------------------------------------------------------
@pytest.mark.parametrize("autoreset", AUTORESETS)
@pytest.mark.parametrize(
    ("kind", "fault", "group"),
    [
        ("thread", RAISE, 1),
        ("process", DIE, 1),
        ("process", RAISE, 2),
        ("process", DIE, 2),
        ("async", HANG, 1),
    ],
)
def test_the_vector_env_sees_the_episode_end_truncated(
    kind: str, fault: int, group: int, autoreset: str
) -> None:
    timeout = {"step_timeout": STEP_TIMEOUT} if fault == HANG else {}
    grouping = {} if kind == "async" else {"envs_per_worker": group}
    envs = aioenv.AioVectorEnv(
        env_for(kind),
        2,
        mode=kind,
        autoreset_mode=autoreset,
        restart="on_failure",
        **timeout,
        **grouping,
    )
    # An env that raises is restarted alone, in its child; a child that dies takes its envs.
    together = fault == DIE and group == 2
    cut = [True, together]
    try:
        envs.reset(seed=0)
        last, *_ = envs.step(np.array([0, 0]))
        last = last.copy()
        observations, rewards, terminated, truncated, infos = envs.step(np.array([fault, 0]))
        assert list(truncated) == cut and not terminated.any()
        assert list(rewards) == [0.0, 0.0 if together else 1.0]
        assert list(infos["_aioenv"]) == cut
        marker_infos = infos
        if autoreset == "same_step":
            assert list(infos["_final_obs"]) == cut
            np.testing.assert_array_equal(infos["final_obs"][0], last[0])
            marker_infos = infos["final_info"]
            assert observations[0, 0] == 0  # the new env's reset
        else:
            np.testing.assert_array_equal(observations[0], last[0])
        assert REASONS[fault] in marker_infos["aioenv"]["reason"][0]
        assert marker_infos["aioenv"]["restarted"][0]
        if autoreset == "disabled":
            observations, _ = envs.reset(options={"reset_mask": truncated})
        else:
            observations, rewards, terminated, truncated, _ = envs.step(np.array([0, 0]))
            assert not (terminated.any() or truncated.any())
        new_episode = 1 if autoreset == "same_step" else 0
        assert observations[0, 0] == new_episode
        healthy = 2 if autoreset == "disabled" else 3  # the other env, when not replaced
        assert observations[1, 0] == (new_episode if together else healthy)
    finally:
        envs.close()


@pytest.mark.parametrize("autoreset", ["same_step", "next_step"])
@pytest.mark.parametrize("mode", ["inline", "process", "thread"])
def test_the_vector_env_keeps_an_episodes_ending_when_its_autoreset_fails(
    mode: str, autoreset: str
) -> None:
    with aioenv.AioVectorEnv(
        [EndsThenFailsToReset] * 2, mode=mode, autoreset_mode=autoreset, restart="on_failure"
    ) as envs:
        envs.reset(seed=0)
        envs.step(np.array([0, 0]))
        observations, rewards, terminated, truncated, infos = envs.step(np.array([0, 0]))
        assert list(rewards) == [1.0, 1.0] and terminated.all() and not truncated.any()
        if autoreset == "same_step":
            assert [final[0] for final in infos["final_obs"]] == [2, 2]
            assert list(infos["final_info"]["t"]) == [2, 2]
            assert (observations[:, 0] == 0).all() and infos["reset"].all()
            assert infos["aioenv"]["restarted"].all()
        else:
            assert (observations[:, 0] == 2).all() and "aioenv" not in infos
        observations, rewards, terminated, truncated, infos = envs.step(np.array([0, 0]))
        assert not (terminated.any() or truncated.any())
        assert list(observations[:, 0]) == ([1, 1] if autoreset == "same_step" else [0, 0])


# The rule itself -------------------------------------------------------------------------
def test_cut_short_is_a_truncated_step_that_keeps_the_users_infos_apart() -> None:
    marker = restart_marker("WorkerDied: gone")
    step = cut_short(np.zeros(2), marker)
    assert (step.reward, step.terminated, step.truncated) == (0.0, False, True)
    assert step.info == {"aioenv": {"restarted": True, "reason": "WorkerDied: gone"}}
    first = Step(np.ones(2), info={"user": 1})
    carried = cut_short(np.zeros(2), marker, first)
    assert carried.info == {"user": 1, "aioenv": marker} and first.info == {"user": 1}
    np.testing.assert_array_equal(carried.final_observation, np.zeros(2))
    assert carried.final_info == {"aioenv": marker}
    batch = BatchStep(np.zeros((2, 3)), np.ones(2), np.zeros(2, bool), np.zeros(2, bool))
    rows = cut_short_batch(batch, marker)
    assert rows.truncated.all() and not rows.rewards.any() and rows.infos[1] == {"aioenv": marker}


@pytest.mark.parametrize("autoreset", AUTORESETS)
def test_which_episode_a_failure_cuts_short_and_what_answers_the_request(autoreset: str) -> None:
    # The one rule every supervisor follows (a pool's worker, envs in line, an engine's
    # children): a failure while a step goes on cuts its episode short; under same-step
    # autoreset an ended step carries the next episode, which is open too.
    going_on, ended = Step(np.zeros(2), 1.0), Step(np.zeros(2), 1.0, terminated=True)
    batch = BatchStep(np.zeros((2, 2)), np.ones(2), np.array([True, False]), np.zeros(2, bool))
    done_batch = BatchStep(np.zeros((2, 2)), np.ones(2), np.ones(2, bool), np.zeros(2, bool))
    segment = Rollout(PolicyPackage(1, "key", policy=lambda observation: 0), num_steps=4)
    same_step = autoreset == "same_step"
    assert open_episode(going_on, 1, autoreset) is going_on
    assert open_episode(ended, 1, autoreset) is (ended if same_step else None)
    assert open_episode(batch, 1, autoreset) is batch  # one row's episode goes on
    assert open_episode(done_batch, 1, autoreset) is (done_batch if same_step else None)
    for request in (aioenv.RESET, aioenv.Reset(seed=3), segment):
        assert open_episode(going_on, request, autoreset) is None  # it cuts its own short
    assert open_episode(None, 1, autoreset) is None
    assert open_episode({"custom": 1}, 1, autoreset) is None
    # The restart answers the request where nothing is cut short, or where it is carried.
    assert restart_answers(None, autoreset)
    assert restart_answers(going_on, autoreset) is same_step


def _same_step(got: Step[Any], expected: Step[Any]) -> None:
    """Field by field: a Step's ``==`` compares its arrays as Python does (element-wise
    from 3.13's dataclasses on)."""
    for field in ("reward", "terminated", "truncated", "info", "final_info"):
        assert getattr(got, field) == getattr(expected, field)
    np.testing.assert_array_equal(got.observation, expected.observation)
    if expected.final_observation is None:
        assert got.final_observation is None
    else:
        np.testing.assert_array_equal(got.final_observation, expected.final_observation)


def test_the_states_a_cut_short_episode_and_a_restart_hand_out() -> None:
    marker = restart_marker("EnvError: boom")
    last, first = Step(np.zeros(2), 1.0, info={"user": 1}), Step(np.ones(2), info={"new": 2})
    alone = cut_short_state(last, "EnvError: boom")
    _same_step(alone, cut_short(last.observation, marker))
    carried = restarted_state(first, last, "EnvError: boom")
    _same_step(carried, cut_short(last.observation, marker, first))
    ended = Step(np.zeros(2), 1.0, terminated=True, info={"user": 1})
    kept = restarted_state(first, ended, "EnvError: boom")  # its autoreset's reset failed
    new_info = {"new": 2, "aioenv": marker}
    _same_step(kept, Step(np.ones(2), 1.0, True, False, new_info, np.zeros(2), {"user": 1}))
    marked = restarted_state(first, None, "EnvError: boom")  # nothing was cut short
    assert (marked.terminated, marked.truncated) == (False, False)
    assert marked.info == {"new": 2, "aioenv": marker}
    rows = BatchStep(np.zeros((2, 2)), np.ones(2), np.zeros(2, bool), np.zeros(2, bool))
    assert cut_short_state(rows, "EnvError: boom").truncated.all()
    new_rows = BatchStep(np.ones((2, 2)), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool))
    both = restarted_state(new_rows, rows, "EnvError: boom")
    assert both.truncated.all() and both.final_infos == {
        0: {"aioenv": marker},
        1: {"aioenv": marker},
    }
    np.testing.assert_array_equal(both.observations, new_rows.observations)


@pytest.mark.parametrize("kind", ["sync", "thread", "process"])
async def test_a_seeded_reset_after_a_cut_short_episode_seeds_the_new_env(kind: str) -> None:
    """Under ``autoreset="disabled"`` the user's reset starts the new env: the seed they
    give is the one it is reset with, as for any reset."""
    from envs import Walk

    exploding = functools.partial(Walk, explode_at=2)
    expected, _ = Walk().reset(seed=123)
    async with aioenv.make_pool(
        exploding, 1, mode=kind, restart="on_failure", autoreset="disabled"
    ) as pool:
        await pool.reset_all(seed=0)
        for _ in range(2):  # the second step raises: the episode ends cut short
            pool.send_action(0, 0)
            step, _ = await pool.get_state()  # type: ignore[misc]
        assert step.truncated and step.info["aioenv"]["restarted"]
        pool.send_action(aioenv.Reset(seed=123), 0)
        first, _ = await pool.get_state()  # type: ignore[misc]
        np.testing.assert_array_equal(first.observation, expected)

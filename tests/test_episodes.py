"""Autoreset modes, time limits and episode statistics, checked against gymnasium's own
vector env on the same seeds, step by step, for every worker kind and a mixed pool."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import Counter, Walk
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from support import modes

import aioenv
from aioenv import RESET

N = 3
GYM_MODES = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}


async def _pool_round(pool: aioenv.WorkerPool[Any], actions: dict[int, Any]) -> list[Any]:
    for worker_id, action in actions.items():
        pool.send_action(action, worker_id)
    batch = await pool.get_batch(min_size=len(actions))
    return batch.sorted().states


@pytest.mark.parametrize("autoreset", list(GYM_MODES))
async def test_autoreset_matches_gymnasium_step_by_step(mode: Any, autoreset: str) -> None:
    reference = SyncVectorEnv(
        [lambda: gymnasium.make("CartPole-v1")] * N, autoreset_mode=GYM_MODES[autoreset]
    )
    rng = np.random.default_rng(0)
    async with aioenv.make_pool("CartPole-v1", N, mode=mode, autoreset=autoreset) as pool:
        assert pool.autoreset == autoreset
        expected_obs, _ = reference.reset(seed=42)
        pool.reset(seed=42)  # worker i gets 42 + i, as gymnasium does
        steps = (await pool.get_batch(min_size=N)).sorted().states
        np.testing.assert_array_equal(np.stack([s.observation for s in steps]), expected_obs)
        episodes_ended = 0
        for _ in range(120):
            actions = rng.integers(0, 2, N)
            obs, rewards, terminated, truncated, infos = reference.step(actions)
            steps = await _pool_round(pool, dict(enumerate(actions.tolist())))
            np.testing.assert_array_equal(np.stack([s.observation for s in steps]), obs)
            np.testing.assert_array_equal([s.reward for s in steps], rewards)
            np.testing.assert_array_equal([s.terminated for s in steps], terminated)
            np.testing.assert_array_equal([s.truncated for s in steps], truncated)
            for i, step in enumerate(steps):
                if autoreset == "same_step" and step.done:
                    assert infos["_final_obs"][i]
                    np.testing.assert_array_equal(step.final_observation, infos["final_obs"][i])
                    assert step.final_info is not None
                    assert "episode" not in step.final_info  # nothing added
                    assert pool.episode_stats()[i].last_length > 0
                else:
                    assert step.final_observation is None
            done = terminated | truncated
            episodes_ended += int(done.sum())
            if autoreset == "disabled" and done.any():
                obs, _ = reference.reset(options={"reset_mask": done})
                steps = await _pool_round(pool, {i: RESET for i in np.flatnonzero(done)})
                for step, i in zip(steps, np.flatnonzero(done), strict=True):
                    np.testing.assert_array_equal(step.observation, obs[i])
        assert episodes_ended >= 5  # the comparison went through several episode ends
    reference.close()


async def test_no_mode_loses_the_final_step(mode: Any) -> None:
    """The step that ends an episode is returned with its own reward and flags in every
    mode; same_step adds the last observation, next_step delivers it as the observation."""
    kinds = [mode] if isinstance(mode, str) else mode
    for kind, autoreset in [(kind, autoreset) for kind in kinds for autoreset in GYM_MODES]:
        async with aioenv.make_pool("CartPole-v1", 1, mode=kind, autoreset=autoreset) as pool:
            pool.reset(seed=3)
            await pool.get_state()
            last: Any = None
            while True:
                pool.send_action(0, 0)  # always left: CartPole falls within ~10 steps
                step, _ = await pool.get_state()  # type: ignore[misc]
                if step.done:
                    break
                last = step
            assert step.terminated
            assert step.reward == 1.0
            final_obs = step.final_observation if autoreset == "same_step" else step.observation
            assert abs(final_obs[2]) > 0.2  # the pole angle at the end: it fell
            assert final_obs[2] != last.observation[2]
            if autoreset == "next_step":
                pool.send_action(1, 0)  # ignored: this step is the reset
                after, _ = await pool.get_state()  # type: ignore[misc]
                assert (after.reward, after.terminated, after.truncated) == (0.0, False, False)
                assert abs(after.observation[2]) < 0.05


async def test_max_episode_steps_truncates_on_top_of_the_env_limit(mode: Any) -> None:
    async with aioenv.make_pool(
        "CartPole-v1", 2, mode=modes(mode, 2), max_episode_steps=4, autoreset="next_step"
    ) as pool:
        pool.reset(seed=0)
        await pool.get_batch(min_size=2)
        flags = []
        for _ in range(4):
            steps = await _pool_round(pool, {0: 0, 1: 1})
            flags.append([s.truncated for s in steps])
        assert flags[:3] == [[False, False]] * 3
        assert flags[3] == [True, True]
        assert all("episode" not in s.info for s in steps)
        assert [s.last_length for s in pool.episode_stats()] == [4, 4]


async def test_max_episode_steps_marks_each_step_as_gymnasiums_time_limit(mode: Any) -> None:
    """An episode the env ends on the limit's own step is terminated and truncated, as
    gymnasium's TimeLimit marks it; every other step's flags are the env's or the limit's
    alone, as there."""
    limit, ended_on_the_limit = 4, 0
    reference = gymnasium.wrappers.TimeLimit(Walk(), limit)
    async with aioenv.make_pool(
        Walk, 1, mode=modes(mode, 1), max_episode_steps=limit, autoreset="disabled"
    ) as pool:
        for seed in range(16):
            reference.reset(seed=seed)
            pool.send_action(aioenv.Reset(seed=seed), 0)
            await pool.get_state()
            done = False
            while not done:
                _, _, terminated, truncated, _ = reference.step(1)
                pool.send_action(1, 0)
                step, _ = await pool.get_state()  # type: ignore[misc]
                assert (step.terminated, step.truncated) == (terminated, truncated), seed
                done = terminated or truncated
            ended_on_the_limit += terminated and truncated
    assert ended_on_the_limit  # (Walk's episodes of 4 steps end so)


async def test_episode_statistics_on_the_pool_leave_info_alone(mode: Any) -> None:
    async with aioenv.make_pool("CartPole-v1", 3, mode=modes(mode, 3), seed=1) as pool:
        pool.reset()
        returns: dict[int, list[float]] = {0: [], 1: [], 2: []}
        running = dict.fromkeys(range(3), 0.0)
        lengths = dict.fromkeys(range(3), 0)
        async for step, worker_id in pool:
            running[worker_id] += step.reward
            if step.reward:
                lengths[worker_id] += 1
            assert "episode" not in step.info
            if step.done:
                episode = pool.episode_stats()[worker_id]
                assert episode.last_return == running[worker_id]
                assert episode.last_length == lengths[worker_id]
                returns[worker_id].append(running[worker_id])
                running[worker_id], lengths[worker_id] = 0.0, 0
                if len(returns[worker_id]) < 3:
                    pool.send_action(RESET, worker_id)
            else:
                pool.send_action(int(step.observation[2] > 0), worker_id)
        stats = pool.episode_stats()
        assert [s.episodes for s in stats] == [3, 3, 3]
        for worker_id, worker_stats in enumerate(stats):
            assert worker_stats.mean_return == pytest.approx(np.mean(returns[worker_id]))
            assert worker_stats.last_return == returns[worker_id][-1]


@pytest.mark.parametrize("kind", ["sync", "thread", "process"])  # envs_per_worker's kinds
async def test_episode_stats_refused_for_workers_of_several_envs_say_so(kind: str) -> None:
    # A worker of several gymnasium envs hands out BatchSteps, whose episodes the pool
    # counts only where rollout() plays them: the refusal says that, and names the worker,
    # where it called them a custom Environment's states.
    async with aioenv.make_pool("CartPole-v1", 2, mode=kind, envs_per_worker=2, seed=0) as pool:
        await pool.reset_all()
        pool.send_action(np.zeros(2, np.int64), 1)
        await pool.get_state()
        with pytest.raises(TypeError, match="episode_stats") as refused:
            pool.episode_stats()
    message = str(refused.value)
    assert "custom" not in message and "terminated()" not in message
    assert f"{pool.workers[1].name} steps 2 envs together (envs_per_worker=2)" in message
    assert "rollout()" in message


async def test_batches_keep_per_row_final_observations() -> None:
    async with aioenv.make_pool("CartPole-v1", 2, mode="sync", autoreset="same_step") as pool:
        pool.reset(seed=5)
        await pool.get_batch(min_size=2)
        for _ in range(200):
            batch = await _batch_round(pool, {0: 0, 1: 1})
            if batch.dones.any():
                break
        rows = np.flatnonzero(batch.dones)
        assert len(rows) > 0
        for row in range(len(batch)):
            if row in rows:
                assert batch.final_observations[row] is not None
                assert batch.final_infos[row] is not None
                assert "episode" not in batch.final_infos[row]
                assert pool.episode_stats()[int(batch.worker_ids[row])].last_length > 0
            else:
                assert batch.final_observations[row] is None
                assert batch.final_infos[row] is None


async def _batch_round(pool: aioenv.WorkerPool[Any], actions: dict[int, Any]) -> aioenv.Batch[Any]:
    for worker_id, action in actions.items():
        pool.send_action(action, worker_id)
    return (await pool.get_batch(min_size=len(actions))).sorted()


async def test_autoreset_for_protocol_envs() -> None:
    # next_step: the third "step" is the reset; disabled: the env is stepped on
    for mode, autoreset, seen in (
        ("thread", "next_step", [1, 2, 0]),
        ("sync", "disabled", [1, 2, 3]),
    ):
        async with aioenv.make_pool(
            lambda: Counter(limit=2), 1, mode=mode, autoreset=autoreset
        ) as pool:
            pool.reset()
            await pool.get_state()
            states = []
            for _ in range(3):
                pool.send_action(1, 0)
                states.append((await pool.get_state())[0])  # type: ignore[index]
            assert [s["t"] for s in states] == seen, autoreset
    async with aioenv.make_pool(
        lambda: Counter(limit=2), 1, mode="sync", autoreset="same_step"
    ) as pool:
        pool.reset()
        await pool.get_state()
        pool.send_action(1, 0)
        assert (await pool.get_state())[0]["t"] == 1  # type: ignore[index]
        pool.send_action(1, 0)  # the episode ends: same_step has no final state to carry
        with pytest.raises(aioenv.EnvError, match="same_step"):
            await pool.get_state()


def test_bad_episode_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="autoreset"):
        aioenv.make_pool(Counter, 1, mode="sync", autoreset="sometimes")
    with pytest.raises(ValueError, match="max_episode_steps"):
        aioenv.make_pool(Counter, 1, mode="sync", max_episode_steps=0)

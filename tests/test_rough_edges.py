"""What a new user of the pool hits first: waiting for one worker, pausing, closed pools,
action checks that say why, episode options for custom envs, info left alone."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import Counter
from gymnasium.vector import AutoresetMode
from support import modes

import aioenv
from aioenv import RESET


async def test_get_state_of_one_worker_leaves_the_others_first_ready(mode: Any) -> None:
    async with aioenv.make_pool(Counter, 3, mode=mode) as pool:
        pool.reset()
        state, worker_id = await pool.get_state(worker_id=2)  # type: ignore[misc]
        assert worker_id == 2
        assert state["t"] == 0
        others = {(await pool.get_state())[1] for _ in range(2)}  # type: ignore[index]
        assert others == {0, 1}
        pool.send_action(1, 1)
        with pytest.raises(aioenv.NoActionInFlight, match="worker_id=0"):
            await pool.get_state(worker_id=0)
        state, worker_id = await pool.get_state(worker_id=1)  # type: ignore[misc]
        assert (worker_id, state["t"]) == (1, 1)


async def test_paused_lists_the_paused_ids() -> None:
    async with aioenv.make_pool(Counter, 4, mode="sync") as pool:
        assert pool.paused == ()
        pool.pause(3)
        pool.pause(1)
        assert pool.paused == (1, 3)
        pool.resume(1)
        assert pool.paused == (3,)


async def test_async_for_over_a_closed_pool_raises() -> None:
    pool = aioenv.make_pool(Counter, 1, mode="sync")
    await pool.aclose()
    with pytest.raises(aioenv.ClosedError):
        async for _ in pool:
            pass


async def test_check_actions_says_dtype_shape_and_bounds() -> None:
    def box_env() -> gymnasium.Env[Any, Any]:
        return gymnasium.make("Pendulum-v1")

    async with aioenv.make_pool(box_env, 1, mode="sync", check_actions=True) as pool:
        await pool.reset_all()
        with pytest.raises(aioenv.InvalidAction, match=r"float64.*float32.*astype"):
            pool.send_action(np.array([0.5]), 0)
        with pytest.raises(aioenv.InvalidAction, match=r"shape is \(2,\)"):
            pool.send_action(np.zeros(2, dtype=np.float32), 0)
        with pytest.raises(aioenv.InvalidAction, match="outside the bounds.*clip"):
            pool.send_action(np.array([9.0], dtype=np.float32), 0)
        pool.send_action(np.array([0.5], dtype=np.float32), 0)  # nothing was sent before
        await pool.get_state()


async def test_check_actions_says_where_an_action_is_nan() -> None:
    def box_env() -> gymnasium.Env[Any, Any]:
        return gymnasium.make("Pendulum-v1")

    async with aioenv.make_pool(box_env, 1, mode="sync", check_actions=True) as pool:
        await pool.reset_all()
        with pytest.raises(aioenv.InvalidAction, match=r"NaN.*flat index \[0\].*NaN stays NaN"):
            pool.send_action(np.array([np.nan], dtype=np.float32), 0)


@pytest.mark.parametrize("mode", ["inline", "process", "thread"])
def test_a_vector_env_checks_every_action_before_it_sends_any(mode: str) -> None:
    """check_actions= on AioVectorEnv: the whole batch is checked before any env is sent
    its action, wherever the envs step (in line, the engine's children, a pool), so an
    invalid action leaves every env as it was; the error names the env."""
    good = np.array([0, 1, 1, 0])
    reference = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 4)
    with aioenv.AioVectorEnv("CartPole-v1", 4, mode=mode, check_actions=True) as envs:
        observations, _ = envs.reset(seed=3)
        expected, _ = reference.reset(seed=3)
        np.testing.assert_array_equal(observations, expected)
        with pytest.raises(aioenv.InvalidAction, match=r"AioVectorEnv env 2: .*outside \[0, 1\]"):
            envs.step(np.array([0, 1, 2, 0]))
        observations = envs.step(good)[0]
        np.testing.assert_array_equal(observations, reference.step(good)[0])  # none stepped
    reference.close()


def test_a_pipelined_send_checks_its_actions_before_it_sends_any() -> None:
    with aioenv.AioVectorEnv(
        "CartPole-v1", 4, mode="process", batch_size=2, check_actions=True
    ) as envs:
        envs.async_reset(seed=0)
        env_ids = envs.recv()[4]["env_id"]
        with pytest.raises(aioenv.InvalidAction, match=f"AioVectorEnv env {env_ids[1]}: "):
            envs.send(np.array([0, 7]), env_ids)
        envs.send(np.array([0, 1]), env_ids)  # nothing was sent: both envs take these
        assert len(envs.recv()[4]["env_id"]) == 2


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_vector_env_of_a_pool_that_checks_actions_sends_none_of_a_batch_it_refuses(
    mode: str,
) -> None:
    """AioVectorEnv.from_pool over a pool made with check_actions=True: the whole batch is
    checked before any env is sent its action, in step() and in a pipelined send(), as
    the vector env's own check_actions does."""
    good = np.array([0, 1, 1, 0])
    reference = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 4)
    pool = aioenv.make_pool("CartPole-v1", 4, mode=mode, check_actions=True, autoreset="next_step")
    with aioenv.AioVectorEnv.from_pool(pool, batch_size=2) as envs:
        np.testing.assert_array_equal(envs.reset(seed=3)[0], reference.reset(seed=3)[0])
        with pytest.raises(aioenv.InvalidAction):
            envs.step(np.array([0, 1, 2, 0]))
        observations = envs.step(good)[0]
        np.testing.assert_array_equal(observations, reference.step(good)[0])  # none stepped
        envs.async_reset(seed=0)
        env_ids = envs.recv()[4]["env_id"]
        with pytest.raises(aioenv.InvalidAction):
            envs.send(np.array([0, 7]), env_ids)
        envs.send(np.array([0, 1]), env_ids)  # nothing was sent: both envs take these
        assert len(envs.recv()[4]["env_id"]) == 2
    reference.close()


async def test_episode_stats_refused_for_custom_states() -> None:
    async with aioenv.make_pool(Counter, 1, mode="sync") as pool:
        await pool.reset_all()
        with pytest.raises(TypeError, match="gymnasium envs"):
            pool.episode_stats()


async def test_max_episode_steps_refused_for_custom_envs(mode: Any) -> None:
    async with aioenv.make_pool(Counter, 1, mode=modes(mode, 1), max_episode_steps=3) as pool:
        pool.reset()
        with pytest.raises(aioenv.EnvError, match="max_episode_steps needs gymnasium envs"):
            await pool.get_state()


@pytest.mark.parametrize("kind", ["sync", "thread", "process"])
@pytest.mark.parametrize(
    ("option", "needs"),
    [
        ({"max_episode_steps": 3}, "max_episode_steps needs gymnasium envs"),
        ({"autoreset": "same_step"}, "autoreset='same_step' needs gymnasium envs"),
        ({"envs_per_worker": 2}, "envs_per_worker needs gymnasium envs"),
    ],
    ids=["max_episode_steps", "same_step", "envs_per_worker"],
)
async def test_an_option_custom_envs_cannot_take_is_refused_without_a_restart(
    kind: str, option: dict[str, Any], needs: str
) -> None:
    """The refusal is the caller's error, raised at once, naming the worker and the pool's
    options: it was taken for the env's failure, so under restart="on_failure" every env
    was rebuilt until its restart budget was spent, or (autoreset='same_step', refused at an
    episode's end) the episode was cut short and the refusal never raised."""
    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        lambda: Counter(limit=2),
        1,
        mode=kind,
        restart="on_failure",
        on_failure=failures.append,
        **option,
    ) as pool:
        action = np.zeros(2, np.int64) if "envs_per_worker" in option else 1

        async def play() -> None:
            await pool.reset_all()
            for _ in range(3):  # the episode ends at its second step
                pool.send_action(action, 0)
                await pool.get_state()

        with pytest.raises(aioenv.EnvError, match=r"worker 0 ") as raised:
            await play()
        assert pool.restarts == 0 and not failures
        assert "the pool's options raised TypeError during " in str(raised.value)
        assert needs in str(raised.value)


class _StatsByHand(gymnasium.Wrapper[Any, Any, Any, Any]):
    """Puts the user's own statistics under info["episode"], as a stats wrapper does."""

    def step(self, action: Any) -> Any:
        observation, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info = {**info, "episode": {"r": "mine"}}
        return observation, reward, terminated, truncated, info


async def test_the_users_info_is_left_alone_and_stats_come_from_rewards(mode: Any) -> None:
    def make() -> gymnasium.Env[Any, Any]:
        return _StatsByHand(gymnasium.make("CartPole-v1"))

    async with aioenv.make_pool(make, 1, mode=modes(mode, 1), seed=3) as pool:
        pool.reset()
        total, length = 0.0, 0
        async for step, worker_id in pool:
            if step.done:
                assert step.info["episode"] == {"r": "mine"}  # not overwritten
                break
            pool.send_action(0, worker_id)
            total, length = total + 1.0, length + 1
        stats = pool.episode_stats()[0]
        assert (stats.episodes, stats.last_length, stats.last_return) == (1, length, total)
        pool.send_action(RESET, 0)
        await pool.get_state()
        assert pool.episode_stats()[0].episodes == 1


@pytest.mark.parametrize("autoreset", [AutoresetMode.NEXT_STEP, "NextStep"])
def test_pools_take_gymnasium_autoreset_modes(autoreset: Any) -> None:
    pool = aioenv.make_pool(Counter, 1, mode="sync", autoreset=autoreset)
    assert pool.autoreset == "next_step"

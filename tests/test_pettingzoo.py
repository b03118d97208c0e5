"""PettingZoo parallel envs as the agent lanes of an AioVectorEnv, checked against a hand
loop over the same envs and seeds, lane by lane, and against PettingZoo's own API test."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
from collections.abc import Callable
from typing import Any, ClassVar

import cloudpickle
import numpy as np
import pytest

pytest.importorskip("pettingzoo")

import gymnasium
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.spaces import Box, Discrete
from pettingzoo import ParallelEnv
from pettingzoo.butterfly import pistonball_v6
from pettingzoo.sisl import multiwalker_v9
from pettingzoo.test import parallel_api_test

import aioenv
from aioenv.core._gymnasium import resolve_source

# The test envs travel to process workers by value, like envs of a user's __main__.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

AGENTS = ("a", "b", "c")


class Dying(ParallelEnv):  # type: ignore[misc]
    """Three agents whose lives (drawn from the seed) end at different steps: ``a`` and
    ``c`` terminate, ``b`` is truncated; ``c`` only appears at the first step. Each
    observation and reward depends on the step, the agent and its actions."""

    metadata: ClassVar[dict[str, Any]] = {"name": "dying_v0", "render_modes": ["rgb_array"]}

    def __init__(self, render_mode: str | None = None, forever: bool = False) -> None:
        self.possible_agents = list(AGENTS)
        self.render_mode = render_mode
        self.forever = forever  # no agent ever leaves
        self.agents: list[str] = []
        self._rng = np.random.default_rng()
        self._lives: dict[str, int] = {}
        self._sums: dict[str, float] = {}
        self.t = 0

    @functools.cache  # noqa: B019 (PettingZoo's own idiom)
    def observation_space(self, agent: str) -> Box:
        return Box(-1e6, 1e6, (3,), np.float64)

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> Discrete:
        return Discrete(4)

    def _observe(self, agent: str) -> np.ndarray:
        return np.array([self.t, AGENTS.index(agent), self._sums[agent]], np.float64)

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.t = 0
        lives = self._rng.integers(2, 7, size=3)
        self._lives = dict(zip(AGENTS, (int(life) for life in lives), strict=True))
        self._sums = {agent: float(self._rng.random()) for agent in AGENTS}
        self.agents = ["a", "b"]
        return {agent: self._observe(agent) for agent in self.agents}, {
            agent: {"spawned": 0} for agent in self.agents
        }

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        acting = list(self.agents)
        for agent in acting:
            self._sums[agent] += int(actions[agent]) + 0.5
        rewards = {agent: self._sums[agent] * (AGENTS.index(agent) + 1) for agent in acting}
        ending = {agent: not self.forever and self.t >= self._lives[agent] for agent in acting}
        terminations = {agent: ending[agent] and agent != "b" for agent in acting}
        truncations = {agent: ending[agent] and agent == "b" for agent in acting}
        observations = {agent: self._observe(agent) for agent in acting}
        infos: dict[str, Any] = {agent: {"age": self.t} for agent in acting}
        self.agents = [agent for agent in acting if not ending[agent]]
        if self.t == 1 and "c" not in acting:
            # spawns: in this step's result, with no reward yet
            self.agents.append("c")
            self._lives["c"] += 1
            observations["c"] = self._observe("c")
            rewards["c"], terminations["c"], truncations["c"] = 0.0, False, False
            infos["c"] = {"age": 0}
        return observations, rewards, terminations, truncations, infos

    def life(self, agent: str) -> int:
        return self._lives[agent]

    def render(self) -> np.ndarray:
        return np.full((2, 2, 3), self.t, np.uint8)


class Mixed(Dying):
    """Agent ``c``'s action space differs from the others'."""

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> Discrete:
        return Discrete(5 if agent == "c" else 4)


class Crashing(Dying):
    """Raises when any agent is sent action 3."""

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        if 3 in [int(action) for action in actions.values()]:
            raise RuntimeError("crashed")
        return super().step(actions)


def dying() -> Dying:
    return Dying()


def walkers() -> Any:
    # Walkers do not end the game when one falls: they leave at different steps.
    return multiwalker_v9.parallel_env(n_walkers=3, terminate_on_fall=False, max_cycles=100)


def walker_actions(steps: int) -> list[np.ndarray]:
    """Gaits that make env 0's walkers fall at steps 45, 46 and 75, env 1's at 45, 83 and
    86 (the middle walker mirrors the others), with the seeds the tests use."""
    gait = np.array([[-1, 1, -1, 1], [1, -1, 1, -1]], np.float32)
    mirror = np.array([1, -1, 1], np.float32)
    lanes = (gait[:, None, :] * mirror[None, :, None]).reshape(6, 4)
    return [lanes.copy() for _ in range(steps)]


def pistons() -> Any:
    return pistonball_v6.parallel_env(n_pistons=4, max_cycles=8)


# The reference: each env stepped by hand, with dicts by agent ----------------------------
def _stack(env: Any, observations: dict[str, Any]) -> np.ndarray:
    agents = env.possible_agents
    zero = np.zeros_like(observations[next(iter(observations))])
    return np.stack([np.asarray(observations.get(agent, zero)) for agent in agents])


def hand_loop(
    factories: list[Callable[[], Any]], seed: int, actions: list[np.ndarray], autoreset: str
) -> list[dict[str, Any]]:
    """What each lane should see: the reset, then each step of ``actions`` (a row per
    lane), as the spec of the lanes says, per env."""
    envs = [factory() for factory in factories]
    agents = list(envs[0].possible_agents)
    width = len(agents)
    results: list[dict[str, Any]] = []
    done = [False] * len(envs)
    rows = [env.reset(seed=seed + i) for i, env in enumerate(envs)]
    results.append(
        {
            "obs": np.concatenate(
                [_stack(env, obs) for env, (obs, _) in zip(envs, rows, strict=True)]
            ),
            "active": np.array(
                [a in obs for _, (obs, _) in zip(envs, rows, strict=True) for a in agents]
            ),
        }
    )
    for lane_actions in actions:
        out: dict[str, list[Any]] = {
            k: [] for k in ("obs", "reward", "terminated", "truncated", "active", "final")
        }
        for i, env in enumerate(envs):
            chosen = lane_actions[i * width : (i + 1) * width]
            if done[i] and autoreset == "next_step":
                obs, _ = env.reset()
                done[i] = False
                out["obs"].append(_stack(env, obs))
                out["reward"].append(np.zeros(width))
                out["terminated"].append(np.zeros(width, bool))
                out["truncated"].append(np.zeros(width, bool))
                out["active"].append(np.array([a in obs for a in agents]))
                out["final"].append(None)
                continue
            present = set(env.agents)
            obs, rew, term, trunc, _ = env.step(
                {a: chosen[j] for j, a in enumerate(agents) if a in present}
            )
            out["reward"].append(np.array([rew.get(a, 0.0) for a in agents]))
            out["terminated"].append(np.array([bool(term.get(a, False)) for a in agents]))
            out["truncated"].append(np.array([bool(trunc.get(a, False)) for a in agents]))
            out["active"].append(np.array([a in obs for a in agents]))
            stacked = _stack(env, obs)
            final = None
            if not env.agents:
                done[i] = True
                if autoreset == "same_step":
                    final = stacked
                    obs, _ = env.reset()
                    stacked = _stack(env, obs)
                    done[i] = False
            out["obs"].append(stacked)
            out["final"].append(final)
        results.append(
            {
                key: (value if key == "final" else np.concatenate(value))
                for key, value in out.items()
            }
        )
    for env in envs:
        env.close()
    return results


def lane_actions(space: Any, steps: int, seed: int) -> list[np.ndarray]:
    space.seed(seed)
    return [space.sample() for _ in range(steps)]


def assert_lanes_match(
    venv: aioenv.AioVectorEnv,
    factories: list[Callable[[], Any]],
    steps: int,
    autoreset: str = "next_step",
    actions: list[np.ndarray] | None = None,
) -> int:
    """Step ``venv`` and the hand loop with the same actions: every lane's observation,
    reward, flags and presence agree, and same-step final observations too. Returns
    how many episodes ended, so a test can require some."""
    width = venv.num_envs // len(factories)
    if actions is None:
        actions = lane_actions(venv.action_space, steps, seed=7)
    expected = hand_loop(factories, 3, actions, autoreset)
    obs, infos = venv.reset(seed=3)
    np.testing.assert_array_equal(obs, expected[0]["obs"])
    np.testing.assert_array_equal(infos["active"], expected[0]["active"])
    ended = 0
    for t, (action, want) in enumerate(zip(actions, expected[1:], strict=True)):
        obs, rewards, terminated, truncated, infos = venv.step(action)
        np.testing.assert_array_equal(obs, want["obs"], err_msg=f"step {t}")
        np.testing.assert_array_equal(rewards, want["reward"], err_msg=f"step {t}")
        np.testing.assert_array_equal(terminated, want["terminated"], err_msg=f"step {t}")
        np.testing.assert_array_equal(truncated, want["truncated"], err_msg=f"step {t}")
        np.testing.assert_array_equal(infos["active"], want["active"], err_msg=f"step {t}")
        assert infos["_active"].all()
        for i, final in enumerate(want["final"]):
            lanes = slice(i * width, (i + 1) * width)
            if final is None:
                assert "_final_obs" not in infos or not infos["_final_obs"][lanes].any()
                continue
            ended += 1
            assert infos["_final_obs"][lanes].all()
            np.testing.assert_array_equal(np.stack(infos["final_obs"][lanes]), final)
    return ended


# PettingZoo's own test: the references are valid parallel envs ----------------------------
@pytest.mark.parametrize("factory", [dying, walkers, pistons], ids=["dying", "walkers", "pistons"])
def test_test_envs_pass_pettingzoos_parallel_api_test(factory: Callable[[], Any]) -> None:
    parallel_api_test(factory(), num_cycles=40)


# Lanes against the hand loop ------------------------------------------------------------
@pytest.mark.parametrize("mode", ["inline", "process"])
@pytest.mark.parametrize("autoreset", ["next_step", "same_step"])
def test_lanes_match_a_hand_loop(mode: str, autoreset: str) -> None:
    factories = [dying, dying]
    with aioenv.AioVectorEnv(factories, mode=mode, autoreset_mode=autoreset) as venv:
        assert venv.num_envs == 6
        assert venv.single_observation_space == Box(-1e6, 1e6, (3,), np.float64)
        assert venv.single_action_space == Discrete(4)
        ended = assert_lanes_match(venv, factories, 20, autoreset)
    if autoreset == "same_step":
        assert ended >= 2  # the envs' episodes are short: several ended


def test_grouped_process_workers_match_a_hand_loop() -> None:
    factories = [dying] * 4
    with aioenv.AioVectorEnv(factories, mode="process", envs_per_worker=2) as venv:
        assert venv.group_sizes == (2, 2)  # parallel envs count as one env each
        with pytest.raises(AttributeError, match="through the engine"):
            _ = venv.pool  # their lanes step through the engine's buffer, as any env's
        assert_lanes_match(venv, factories, 16)


@pytest.mark.parametrize("mode", ["inline", "process"])
def test_multiwalker_lanes_match_a_hand_loop(mode: str) -> None:
    factories = [walkers, walkers]
    with aioenv.AioVectorEnv(factories, mode=mode) as venv:
        assert venv.num_envs == 6
        assert_lanes_match(venv, factories, 90, actions=walker_actions(90))


@pytest.mark.parametrize("mode", ["inline", "process"])
def test_pistonball_lanes_match_a_hand_loop(mode: str) -> None:
    factories = [pistons, pistons]
    with aioenv.AioVectorEnv(factories, mode=mode) as venv:
        assert venv.num_envs == 8
        assert_lanes_match(venv, factories, 12)


def test_a_fallen_walker_leaves_its_lane_zeroed_until_the_env_resets() -> None:
    with aioenv.AioVectorEnv([walkers, walkers], mode="inline") as venv:
        venv.reset(seed=3)
        left = None
        for action in walker_actions(80):
            obs, rewards, terminated, truncated, infos = venv.step(action)
            if left is not None and infos["active"].any():
                assert not infos["active"][left]
                assert not obs[left].any() and rewards[left] == 0
                assert not terminated[left] and not truncated[left]
            if left is None and terminated.any() and infos["active"].sum() > terminated.sum():
                left = int(np.flatnonzero(terminated)[0])
        assert left is not None  # a walker fell while others went on


@pytest.fixture
def registered_walkers() -> Any:
    """``Walkers-v0`` in gymnasium's registry, its entry point a parallel env's factory."""
    gymnasium.register("aioenv-tests/Walkers-v0", entry_point=walkers)
    try:
        yield "aioenv-tests/Walkers-v0"
    finally:
        del gymnasium.registry["aioenv-tests/Walkers-v0"]


@pytest.mark.parametrize("mode", ["inline", "process"])
def test_make_vec_makes_lanes_of_a_registered_parallel_env(
    registered_walkers: str, mode: str
) -> None:
    with aioenv.make_vec(registered_walkers, 2, vectorization_mode=mode) as venv:
        assert venv.num_envs == 6 and venv.spec is not None
        assert_lanes_match(venv, [walkers, walkers], 50, actions=walker_actions(50))
    with pytest.raises(ValueError, match="wrappers and max_episode_steps do not wrap"):
        aioenv.make_vec(registered_walkers, 2, vectorization_mode="inline", wrappers=[id])


def test_a_function_entry_point_of_a_gymnasium_env_keeps_its_spec() -> None:
    def cartpole(**kwargs: Any) -> Any:
        return CartPoleEnv(**kwargs)

    gymnasium.register("aioenv-tests/FnCartPole-v0", entry_point=cartpole, max_episode_steps=7)
    try:
        env = resolve_source("aioenv-tests/FnCartPole-v0")()
    finally:
        del gymnasium.registry["aioenv-tests/FnCartPole-v0"]
    assert env.spec.entry_point is cartpole and env.unwrapped.spec.entry_point is cartpole
    env.reset(seed=0)
    assert [env.step(0)[3] for _ in range(7)][-1]  # its time limit still applies


# What stays per env -----------------------------------------------------------------------
def test_seeds_masks_and_answers_are_per_env() -> None:
    with aioenv.AioVectorEnv([functools.partial(Dying, "rgb_array")] * 2, mode="inline") as venv:
        first, _ = venv.reset(seed=[5, 9])
        assert venv.np_random_seed == (5, 9)
        again, _ = venv.reset(seed=5)  # env 1 gets 6
        assert venv.np_random_seed == (5, 6)
        np.testing.assert_array_equal(first[:3], again[:3])
        assert not np.array_equal(first[3:], again[3:])
        venv.step(np.zeros(6, np.int64))
        obs, infos = venv.reset(options={"reset_mask": np.array([False, True])})
        assert obs[0, 0] == 1 and obs[3, 0] == 0  # env 0 kept its step, env 1 was reset
        np.testing.assert_array_equal(infos["_active"], [False] * 3 + [True] * 3)
        assert venv.get_attr("t") == (1, 0)
        lives = venv.call("life", "a")
        assert len(lives) == 2 and lives != (None, None)
        frames = venv.render()
        assert frames is not None and len(frames) == 2 and frames[0][0, 0, 0] == 1


@pytest.mark.parametrize("mode", ["inline", "process"])
def test_set_attr_reaches_the_parallel_env(mode: str) -> None:
    """``set_attr`` sets the parallel env's own attributes, ``render_mode`` and
    ``metadata`` too, as ``get_attr`` and ``apply`` read them."""
    with aioenv.AioVectorEnv([functools.partial(Dying, "rgb_array")] * 2, mode=mode) as venv:
        venv.set_attr("render_mode", [None, "human"])
        venv.set_attr("metadata", {"render_modes": ["human"]})
        assert venv.get_attr("render_mode") == (None, "human")
        assert venv.apply(_render_mode) == (None, "human")
        assert venv.apply(_metadata) == ({"render_modes": ["human"]},) * 2


def _render_mode(env: Any) -> Any:
    return env.render_mode


def _metadata(env: Any) -> Any:
    return env.metadata


def test_agent_infos_are_merged_by_lane() -> None:
    with aioenv.AioVectorEnv([dying, dying], mode="inline") as venv:
        _, infos = venv.reset(seed=0)
        np.testing.assert_array_equal(infos["_spawned"], [True, True, False] * 2)
        _, _, _, _, infos = venv.step(np.zeros(6, np.int64))
        np.testing.assert_array_equal(infos["age"], [1, 1, 0] * 2)
        np.testing.assert_array_equal(infos["_age"], [True] * 6)
        np.testing.assert_array_equal(infos["active"], [True] * 6)


def test_an_env_whose_agents_never_finish_ends_by_its_time_limit() -> None:
    forever = functools.partial(Dying, forever=True)
    with aioenv.AioVectorEnv([forever] * 2, mode="inline", max_episode_steps=3) as venv:
        venv.reset(seed=0)
        for _ in range(2):
            _, _, terminated, truncated, _ = venv.step(np.zeros(6, np.int64))
            assert not truncated.any() and not terminated.any()
        obs, _, terminated, truncated, infos = venv.step(np.zeros(6, np.int64))
        # a and b were there; c was too from the second step: all cut short
        np.testing.assert_array_equal(truncated, infos["active"])
        assert truncated.all() and not terminated.any()
        obs, rewards, terminated, truncated, infos = venv.step(np.zeros(6, np.int64))
        assert obs[:, 0].tolist() == [0] * 6 and not rewards.any()  # the reset
        np.testing.assert_array_equal(infos["active"], [True, True, False] * 2)


def test_an_env_cut_short_by_a_failure_truncates_all_its_lanes() -> None:
    with aioenv.AioVectorEnv(
        [Crashing] * 2, mode="process", restart="on_failure", envs_per_worker=1
    ) as venv:
        venv.reset(seed=0)
        venv.step(np.zeros(6, np.int64))
        obs, rewards, terminated, truncated, infos = venv.step(np.array([3, 0, 0, 0, 0, 0]))
        np.testing.assert_array_equal(truncated, [True] * 3 + [False] * 3)
        assert not terminated.any() and not rewards[:3].any() and rewards[3:].all()
        np.testing.assert_array_equal(infos["active"], [False] * 3 + [True] * 3)
        np.testing.assert_array_equal(infos["_aioenv"], [True] * 3 + [False] * 3)
        obs, rewards, _, truncated, infos = venv.step(np.zeros(6, np.int64))
        assert obs[:3, 0].tolist() == [0, 0, 0] and not truncated.any()  # env 0 starts over


def test_step_async_and_step_wait_step_the_lanes_as_step_does() -> None:
    with (
        aioenv.AioVectorEnv([dying] * 2, mode="process") as paired,
        aioenv.AioVectorEnv([dying] * 2, mode="inline") as lockstep,
    ):
        paired.reset(seed=1)
        lockstep.reset(seed=1)
        for action in lane_actions(lockstep.action_space, 8, seed=2):
            paired.step_async(action)
            got, want = paired.step_wait(), lockstep.step(action)
            for part, expected in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(part, expected)
            np.testing.assert_array_equal(got[4]["active"], want[4]["active"])


def test_pipelined_calls_take_whole_envs() -> None:
    factories = [dying] * 4
    with aioenv.AioVectorEnv(factories, mode="process", batch_size=6) as venv:
        assert venv.batch_size == 6 and venv.num_envs == 12
        venv.async_reset(seed=0)
        seen: set[int] = set()
        # First-ready: which envs a batch holds depends on how fast each answers, so the
        # loop runs until every env has been in one (a generous cap instead of a count).
        for _ in range(500):
            if seen == {0, 1, 2, 3}:
                break
            obs, _, _, _, infos = venv.recv()
            lanes = infos["env_id"]
            assert len(lanes) == 6 and obs.shape == (6, 3)
            envs = sorted({int(lane) // 3 for lane in lanes})
            np.testing.assert_array_equal(lanes, [e * 3 + j for e in envs for j in range(3)])
            seen.update(envs)
            venv.send(np.ones(6, np.int64), lanes)
        assert seen == {0, 1, 2, 3}
        venv.recv()
        with pytest.raises(ValueError, match="lanes of an env step together"):
            venv.send(np.ones(2, np.int64), [0, 1])


def test_a_numpy_integer_batch_size_counts_lanes_as_its_int_does() -> None:
    with aioenv.AioVectorEnv([dying] * 4, mode="thread", batch_size=np.int64(6)) as venv:
        assert venv.batch_size == 6
        venv.async_reset(seed=0)
        assert len(venv.recv()[4]["env_id"]) == 6


# Pools: the env's own dicts ------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["sync", "process"])
def test_a_pool_hands_out_the_envs_dicts_by_agent(mode: str) -> None:
    async def run() -> list[tuple[int, aioenv.AgentsStep]]:
        seen: list[tuple[int, aioenv.AgentsStep]] = []
        async with aioenv.make_pool(
            [dying, dying], mode=mode, seed=3, autoreset="next_step"
        ) as pool:
            pool.reset()
            counts = [0, 0]
            while min(counts) < 12:  # whichever worker is ready first goes on
                state, worker_id = await pool.get_state()
                seen.append((worker_id, state))
                counts[worker_id] += 1
                pool.send_action({agent: 1 for agent in state.agents}, worker_id)
            await pool.drain()
        return seen

    seen = asyncio.run(run())
    for worker_id in (0, 1):
        states = [state for wid, state in seen if wid == worker_id]
        reference = Dying()
        observations, _ = reference.reset(seed=aioenv.worker_seeds(3, 2)[worker_id])
        assert states[0].rewards == {} and states[0].agents == ("a", "b")
        for state in states[1:]:
            if reference.agents:
                observations, rewards, *_ = reference.step(dict.fromkeys(reference.agents, 1))
                assert state.rewards == rewards
            else:  # next-step autoreset: the env's reset, with no rewards
                observations, _ = reference.reset()
                assert state.rewards == {}
            assert state.observations.keys() == observations.keys()
            for agent, observation in observations.items():
                np.testing.assert_array_equal(state.observations[agent], observation)
            assert state.agents == tuple(reference.agents)
        assert any(state.done for state in states)  # an episode ended and the env went on


@pytest.mark.parametrize("mode", ["sync", "process"])
def test_a_pools_calls_reach_the_parallel_env(mode: str) -> None:
    """``get_attr``, ``set_attr`` and ``apply`` reach the PettingZoo env the factory built,
    not the adapter that makes it an Environment."""

    async def run() -> tuple[Any, Any, Any]:
        async with aioenv.make_pool([dying, dying], mode=mode, seed=3) as pool:
            pool.reset()
            for _ in range(2):
                await pool.get_state()
            forever = await pool.get_attr("forever")
            await pool.set_attr("forever", True, worker_ids=[1])
            return forever, await pool.get_attr("forever"), await pool.apply(_type_name)

    forever, changed, names = asyncio.run(run())
    assert list(forever) == [False, False]
    assert list(changed) == [False, True]
    assert list(names) == ["Dying", "Dying"]


@pytest.mark.parametrize("mode", ["sync", "process"])
def test_check_actions_takes_the_actions_of_the_agents_present(mode: str) -> None:
    """With ``check_actions=True`` an action dict holds the agents present (as the env
    takes it), not every possible agent; an agent's action outside its space is refused."""

    async def run() -> int:
        ended = 0
        async with aioenv.make_pool(
            [dying], mode=mode, seed=3, check_actions=True, autoreset="next_step"
        ) as pool:
            pool.reset()
            for _ in range(20):
                state, worker_id = await pool.get_state()
                ended += state.done
                with pytest.raises(aioenv.InvalidAction, match="not in its action space"):
                    pool.send_action({**dict.fromkeys(state.agents, 1), "a": 4}, worker_id)
                pool.send_action(dict.fromkeys(state.agents, 1), worker_id)
            await pool.drain()
        return ended

    assert asyncio.run(run()) >= 1  # agents came and went: c, then every one


def _type_name(env: Any) -> str:
    return type(env).__name__


# Errors ------------------------------------------------------------------------------------
def test_agents_with_differing_spaces_are_named() -> None:
    with pytest.raises(ValueError, match=r"action space.*: c differ from a's Discrete\(4\)"):
        aioenv.AioVectorEnv([Mixed, Mixed], mode="inline")


def test_an_aec_env_is_refused_with_the_conversion_to_use() -> None:
    with pytest.raises(TypeError, match="AEC env.*aec_to_parallel"):
        aioenv.AioVectorEnv([multiwalker_v9.env] * 2, mode="inline")


def test_a_batch_size_must_be_whole_envs() -> None:
    with pytest.raises(ValueError, match="batch_size=4 counts lanes"):
        aioenv.AioVectorEnv([dying] * 2, mode="process", batch_size=4)


def test_a_time_limit_on_a_parallel_env_id_is_refused_naming_what_a_pool_takes() -> None:
    """A pool of parallel envs refuses max_episode_steps (it needs gymnasium steps), so the
    refusal of a spec's time limit sends a pool's user to the env's own limit instead."""
    gymnasium.register("aioenv-tests/TimedWalkers-v0", entry_point=walkers, max_episode_steps=5)

    async def build() -> None:
        async with aioenv.make_pool("aioenv-tests/TimedWalkers-v0", 1, mode="sync") as pool:
            pool.reset()
            await pool.get_state()

    try:
        with pytest.raises(aioenv.EnvError, match="max_episode_steps do not wrap") as refused:
            asyncio.run(build())
    finally:
        del gymnasium.registry["aioenv-tests/TimedWalkers-v0"]
    assert "own limit" in str(refused.value) and "or pool" not in str(refused.value)


def test_import_aioenv_does_not_import_pettingzoo() -> None:
    code = "import sys, aioenv; assert 'pettingzoo' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def _steps_taken(env: Any) -> int:
    return int(env.t)


def test_apply_takes_envs_not_lanes() -> None:
    with aioenv.AioVectorEnv([dying] * 2, mode="process", envs_per_worker=2) as venv:
        venv.reset(seed=0)
        venv.step(np.zeros(6, np.int64))
        venv.apply(setattr, "t", 7, env_ids=[-1])
        assert venv.apply(_steps_taken) == (1, 7)
        with pytest.raises(IndexError, match="env index 2 is out of range for 2 envs"):
            venv.apply(_steps_taken, env_ids=[2])

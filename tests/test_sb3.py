"""Stable-Baselines3's ``VecEnv`` over aioenv (``aioenv.sb3.AioVecEnv``), checked against
SB3's own ``DummyVecEnv``: what a step, a reset and the remote calls hand out, training
bit for bit, and the probe env kept out of the user's monitor files.

SB3's own vec-env tests run against the adapter too (``make test-extras``)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch
from envs import Breakable
from gymnasium.wrappers import TimeLimit
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from aioenv.sb3 import AioVecEnv

#: Inline, and process workers grouped two to a worker (so that one worker's envs are told
#: apart by index).
MODES = [{"mode": "inline"}, {"mode": "process", "envs_per_worker": 2}]
MODE_IDS = ["inline", "process"]


class Scripted(gymnasium.Env[np.ndarray, int]):
    """Episodes that end by termination (action 1) or truncation (its TimeLimit), with
    infos of the env's own in every step and reset, and the options of its last reset."""

    def __init__(self, render_mode: str | None = "rgb_array") -> None:
        self.observation_space = gymnasium.spaces.Box(-1e6, 1e6, (2,), np.float64)
        self.action_space = gymnasium.spaces.Discrete(3)
        self.render_mode = render_mode
        self.last_options: dict[str, Any] | None = None
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        self.last_options = options
        start = float(self.np_random.integers(100))
        self.position = start
        return self._obs(), {"start": start, "seeded": seed is not None}

    def step(self, action: int) -> Any:
        self.t += 1
        self.position += float(action) + self.np_random.random()
        info = {"t": self.t, "tag": f"step {self.t}"}
        return self._obs(), 0.5 * self.t, bool(action == 1 and self.t > 2), False, info

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.position], np.float64)

    def render(self) -> np.ndarray:
        return np.full((4, 6, 3), self.t, np.uint8)

    def tell(self, scale: int, *, offset: int = 0) -> int:
        return scale * self.t + offset


def make_scripted() -> gymnasium.Env[np.ndarray, int]:
    return TimeLimit(Scripted(), max_episode_steps=5)


def make_monitored() -> gymnasium.Env[np.ndarray, int]:
    return Monitor(make_scripted())


def both(factories: list[Any], **options: Any) -> tuple[VecEnv, VecEnv]:
    return DummyVecEnv(factories), AioVecEnv(factories, **options)


def assert_infos_equal(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.keys() == reference.keys()
        for key, value in reference.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(mine[key], value)
            else:
                assert mine[key] == value, key


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_steps_resets_and_infos_are_dummy_vec_envs(options: dict[str, Any]) -> None:
    reference, ours = both([make_scripted] * 4, **options)
    try:
        for venv in (reference, ours):
            venv.seed(7)
        first = ours.reset()
        np.testing.assert_array_equal(first, reference.reset())
        assert_infos_equal(ours.reset_infos, reference.reset_infos)
        assert all(info["seeded"] for info in ours.reset_infos)
        actions = np.random.default_rng(0).integers(0, 3, size=(20, 4))
        ended = {"terminated": 0, "truncated": 0}
        for row in actions:
            obs, rewards, dones, infos = ours.step(row)
            expected = reference.step(row)
            np.testing.assert_array_equal(obs, expected[0])
            assert rewards.dtype == np.float32
            np.testing.assert_array_equal(rewards, expected[1])
            np.testing.assert_array_equal(dones, expected[2])
            assert_infos_equal(list(infos), list(expected[3]))
            assert_infos_equal(ours.reset_infos, reference.reset_infos)
            for done, info in zip(dones, infos, strict=True):
                assert ("terminal_observation" in info) == done
                if done:
                    ended["truncated" if info["TimeLimit.truncated"] else "terminated"] += 1
        assert ended["terminated"] and ended["truncated"]  # both ways of ending were seen
        np.testing.assert_array_equal(first[:, 0], 0)  # the reset's, never overwritten
    finally:
        reference.close()
        ours.close()


class Typed(gymnasium.Env[np.ndarray, int]):
    """Infos of Python and numpy scalars, nested, whose types differ from env to env (env
    ``index``'s ``"level"`` is an int or a float), ending episodes by termination."""

    def __init__(self, index: int) -> None:
        self.observation_space = gymnasium.spaces.Box(-1e6, 1e6, (2,), np.float64)
        self.action_space = gymnasium.spaces.Discrete(3)
        self.index, self.t = index, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"start": 3, "fresh": True, "level": self._level()}

    def step(self, action: int) -> Any:
        self.t += 1
        info = {
            "is_success": bool(action == 1),
            "t": self.t,
            "score": 0.5 * self.t,
            "level": self._level(),
            "own": np.float32(1.5),
            "nested": {"flag": self.t > 1, "n": self.index},
        }
        return self._obs(), 1.0, self.t >= 2 + self.index % 2, False, info

    def _level(self) -> int | float:
        return self.index if self.index % 2 else float(self.index)

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.index], np.float64)


def typed(value: Any) -> Any:
    """``value`` with the type of each value in it, arrays as lists."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    if isinstance(value, np.ndarray):
        return np.ndarray, value.dtype, value.tolist()
    return type(value), value


@pytest.mark.parametrize(
    "options", [*MODES, {"mode": "thread"}], ids=[*MODE_IDS, "thread-env-per-worker"]
)
def test_infos_keep_the_types_the_envs_gave_as_in_dummy_vec_env(options: dict[str, Any]) -> None:
    factories = [functools.partial(Typed, index) for index in range(4)]
    reference, ours = both(factories, **options)  # type: ignore[arg-type]
    try:
        ours.reset()
        reference.reset()
        assert typed(ours.reset_infos) == typed(reference.reset_infos)
        for row in np.random.default_rng(1).integers(0, 3, size=(6, 4)):
            infos = ours.step(row)[3]
            assert typed(infos) == typed(reference.step(row)[3])
            assert typed(ours.reset_infos) == typed(reference.reset_infos)
            for info in infos:
                json.dumps({**info, "terminal_observation": None, "own": None})
    finally:
        reference.close()
        ours.close()


class OwnFinalInfo(Typed):
    """Infos with keys of the env's own named as gymnasium's autoreset names its own."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return super().reset(seed=seed)[0], {"final_info": "reset"}

    def step(self, action: int) -> Any:
        *result, _ = super().step(action)
        return (*result, {"final_obs": "own", "final_info": {"own": "yes"}, "_t": "t"})


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_infos_with_keys_named_as_the_autoresets_reach_sb3_as_the_env_gave_them(
    options: dict[str, Any],
) -> None:
    reference, ours = both([functools.partial(OwnFinalInfo, 0)] * 2, **options)  # type: ignore[arg-type]
    try:
        for venv in (reference, ours):
            venv.reset()
        assert typed(ours.reset_infos) == typed(reference.reset_infos)
        for _ in range(3):
            assert typed(ours.step(np.array([0, 1]))[3]) == typed(
                reference.step(np.array([0, 1]))[3]
            )
            assert typed(ours.reset_infos) == typed(reference.reset_infos)
    finally:
        reference.close()
        ours.close()


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_seeds_and_options_apply_at_the_next_reset_only(options: dict[str, Any]) -> None:
    with_options = [{"level": 1}, {}, {"level": 2}, {}]
    venv = AioVecEnv([make_scripted] * 4, **options)
    try:
        venv.reset()
        venv.seed(40)
        venv.set_options(with_options)
        assert venv.get_attr("last_options") == [None] * 4  # not before the reset
        venv.reset()
        assert venv.get_attr("np_random_seed") == [40, 41, 42, 43]
        assert venv.get_attr("last_options") == [{"level": 1}, None, {"level": 2}, None]
        assert [info["seeded"] for info in venv.reset_infos] == [True] * 4
        venv.reset()
        assert venv.get_attr("last_options") == [None] * 4
        assert [info["seeded"] for info in venv.reset_infos] == [False] * 4
    finally:
        venv.close()


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_options_set_before_the_first_reset_apply_to_it_as_in_dummy_vec_env(
    options: dict[str, Any],
) -> None:
    """The first reset with envs' own options (reset group by group) is DummyVecEnv's."""
    with_options = [{"level": 1}, {}, {"level": 2}, {}]
    reference, ours = both([make_scripted] * 4, **options)
    try:
        for venv in (reference, ours):
            venv.seed(3)
            venv.set_options(with_options)
        np.testing.assert_array_equal(ours.reset(), reference.reset())
        assert_infos_equal(ours.reset_infos, reference.reset_infos)
        assert ours.get_attr("last_options") == [{"level": 1}, None, {"level": 2}, None]
    finally:
        reference.close()
        ours.close()


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_remote_calls_reach_the_chosen_envs_as_in_dummy_vec_env(options: dict[str, Any]) -> None:
    reference, ours = both([make_scripted, make_monitored, make_scripted, make_scripted], **options)
    try:
        for venv in (reference, ours):
            venv.reset()
            venv.step(np.array([0, 0, 0, 0]))
            venv.env_method("set_wrapper_attr", "t", 4, indices=[0, -1])
            venv.set_attr("note", "outer", indices=-3)
        for venv in (reference, ours):
            assert venv.get_attr("t") == [4, 1, 1, 4]
            assert venv.env_method("tell", 10, offset=1, indices=[-1, 1]) == [41, 11]
            assert venv.env_is_wrapped(Monitor) == [False, True, False, False]
            assert venv.env_is_wrapped(Monitor, indices=[-3, 0]) == [True, False]
            assert venv.get_attr("note", indices=[1]) == ["outer"]
            assert not venv.has_attr("note") and venv.has_attr("tell")
        # set_attr sets the outermost wrapper's attribute, as DummyVecEnv does: the env
        # underneath keeps its own.
        assert ours.env_method("get_wrapper_attr", "note", indices=1) == ["outer"]
        images = ours.get_images()
        for mine, theirs in zip(images, reference.get_images(), strict=True):
            np.testing.assert_array_equal(mine, theirs)
        np.testing.assert_array_equal(ours.render(), reference.render())
    finally:
        reference.close()
        ours.close()


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_env_method_runs_once_per_index_an_env_named_twice_twice_as_in_dummy_vec_env(
    options: dict[str, Any],
) -> None:
    reference, ours = both([make_scripted] * 4, **options)
    try:
        for venv in (reference, ours):
            venv.reset()
            steps = venv.env_method("step", 0, indices=[1, -3, 0])  # env 1 twice, then env 0
            assert [observation[0] for observation, *_ in steps] == [1, 2, 1]
            assert venv.get_attr("t") == [1, 2, 0, 0]
    finally:
        reference.close()
        ours.close()


def test_an_episode_cut_short_by_a_failure_ends_done_with_its_last_observation() -> None:
    venv = AioVecEnv([Breakable, Breakable], mode="thread", restart="on_failure")
    try:
        venv.reset()
        last, *_ = venv.step(np.array([0, 0]))
        obs, rewards, dones, infos = venv.step(np.array([1, 0]))  # env 0 raises
        assert list(dones) == [True, False]
        np.testing.assert_array_equal(infos[0]["terminal_observation"], last[0])
        assert infos[0]["TimeLimit.truncated"] is True
        assert infos[0]["aioenv"]["restarted"]
        assert "EnvError" in infos[0]["aioenv"]["reason"]
        assert obs[0][0] == 0 and obs[0][1] > last[0][1]  # the new env's reset
        assert rewards[0] == 0.0 and "aioenv" not in infos[1]
        assert venv.reset_infos[0]["reset"]
    finally:
        venv.close()


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_a_list_of_actions_for_another_number_of_envs_is_refused_naming_both(
    options: dict[str, Any],
) -> None:
    venv = AioVecEnv([make_scripted, make_scripted], **options)
    try:
        venv.reset()
        for actions in ([0, 2, 2], [0]):
            with pytest.raises(ValueError, match=f"got {len(actions)} actions for 2 envs"):
                venv.step(actions)  # type: ignore[arg-type]
        assert venv.step([0, 2])[0][:, 0].tolist() == [1, 1]  # type: ignore[arg-type]
    finally:
        venv.close()


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_a_failure_names_the_users_env_factory(options: dict[str, Any]) -> None:
    venv = AioVecEnv([Breakable, Breakable], restart="on_failure", **options)
    try:
        venv.reset()
        infos = venv.step(np.array([1, 0]))[3]  # env 0 raises
        reason = infos[0]["aioenv"]["reason"]
        assert "env 0 (Breakable)" in reason and "EnvFactory" not in reason
    finally:
        venv.close()


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_parallel_envs_whose_agents_are_several_envs_are_refused_saying_so(
    options: dict[str, Any],
) -> None:
    # Two PettingZoo envs of two walkers each are four agent lanes: not one env per factory.
    multiwalker = pytest.importorskip("pettingzoo.sisl.multiwalker_v9")

    def walkers() -> Any:
        return multiwalker.parallel_env(n_walkers=2)

    with pytest.raises(TypeError, match="2 env factories built 4 envs .agent lanes"):
        AioVecEnv([walkers, walkers], **options)


def test_the_probe_env_writes_nothing_into_monitor_files(tmp_path: Path) -> None:
    # The default mode steps a probe env to time it (in a child process); appending
    # (override_existing=False: no header) keeps whatever it would have written.
    venv = make_vec_env(
        "CartPole-v1",
        n_envs=2,
        seed=0,
        vec_env_cls=AioVecEnv,
        monitor_dir=str(tmp_path),
        monitor_kwargs={"override_existing": False},
    )
    episodes = np.zeros(2, int)
    try:
        venv.reset()
        actions = np.random.default_rng(0).integers(0, 2, size=(150, 2))
        for row in actions:
            episodes += venv.step(row)[2]
    finally:
        venv.close()
    assert episodes.min() > 0
    for env, ended in enumerate(episodes):
        assert len((tmp_path / f"{env}.monitor.csv").read_text().splitlines()) == ended


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_ppo_trains_bit_for_bit_as_through_dummy_vec_env(
    options: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path))  # else each learn() leaves a folder in /tmp

    def trained(vec_env_cls: type[VecEnv], **kwargs: Any) -> list[torch.Tensor]:
        venv = make_vec_env(
            "CartPole-v1", n_envs=2, seed=3, vec_env_cls=vec_env_cls, vec_env_kwargs=kwargs
        )
        model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, seed=3, device="cpu")
        model.learn(total_timesteps=256)
        venv.close()
        return [p.detach().clone() for p in model.policy.parameters()]

    reference = trained(DummyVecEnv)
    ours = trained(AioVecEnv, **options)
    assert len(ours) == len(reference)
    for mine, theirs in zip(ours, reference, strict=True):
        assert torch.equal(mine, theirs)


def test_a_probe_in_this_process_leaves_monitors_as_they_were(tmp_path: Path) -> None:
    from stable_baselines3.common import monitor

    writer = monitor.ResultsWriter
    venv = make_vec_env(
        make_scripted, n_envs=2, vec_env_cls=AioVecEnv, vec_env_kwargs={"mode": "sync"}
    )
    venv.close()
    assert monitor.ResultsWriter is writer
    Monitor(make_scripted(), str(tmp_path / "mine")).close()  # a monitor of one's own writes
    assert (tmp_path / "mine.monitor.csv").read_text().startswith("#")


def test_copy_false_is_refused_since_sb3_keeps_the_observations_it_is_given() -> None:
    # SB3 keeps each step's observations (its rollout and replay buffers add them after
    # the next step): arrays the vector env reuses would be overwritten there.
    with pytest.raises(TypeError, match="copy=False is not an option"):
        AioVecEnv([make_scripted] * 2, mode="process", envs_per_worker=2, copy=False).close()


def test_start_method_is_the_process_workers_start_method() -> None:
    with pytest.raises(ValueError, match="illegal_method"):
        AioVecEnv([make_scripted], start_method="illegal_method")
    venv = AioVecEnv([make_scripted, make_scripted], start_method="spawn")
    try:
        assert venv.venv.mode == "process"
        assert venv.reset().shape == (2, 2)
    finally:
        venv.close()


def test_importing_aioenv_imports_neither_sb3_nor_torch() -> None:
    # Nor does what the adapter's workers unpickle: its factories and remote calls.
    code = (
        "import sys, aioenv, aioenv.vector, aioenv._sb3_envs\n"
        "assert not {'stable_baselines3', 'torch'} & set(sys.modules), 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

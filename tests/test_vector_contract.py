"""AioVectorEnv against gymnasium's VectorEnv contract, as written in gymnasium's docs and
vector envs: constructor forms, errors and their types, seeding attributes, autoreset and
observation modes, the spec, and every generic vector wrapper."""

from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import Counter, GatedTouchy, Touchy, open_gate
from gymnasium.envs.registration import VectorizeMode
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import iterate
from gymnasium.wrappers import vector as vector_wrappers
from space_envs import echo
from support import wait_until, worker_processes, worker_threads

import aioenv
from aioenv.vector import _runtime


def cartpole() -> gymnasium.Env[Any, Any]:
    return gymnasium.make("CartPole-v1")


def assert_same_infos(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        if isinstance(value, dict):
            assert_same_infos(ours[key], value)
        elif key == "t":  # wall-clock episode time of RecordEpisodeStatistics
            assert np.shape(ours[key]) == np.shape(value)
        elif key == "final_obs":
            for mine, reference in zip(ours[key], value, strict=True):
                np.testing.assert_array_equal(mine, reference)
        else:
            np.testing.assert_array_equal(ours[key], value)


def test_a_list_of_factories_builds_one_env_each() -> None:
    def with_gravity(gravity: float) -> Any:
        def make() -> gymnasium.Env[Any, Any]:
            env = gymnasium.make("CartPole-v1")
            env.unwrapped.gravity = gravity  # type: ignore[attr-defined]
            return env

        return make

    with aioenv.AioVectorEnv([with_gravity(1.0), with_gravity(2.0)], mode="thread") as envs:
        assert envs.num_envs == 2
        assert envs.get_attr("gravity") == (1.0, 2.0)
        observations, _ = envs.reset(seed=0)
        assert observations.shape == (2, 4)


@pytest.mark.parametrize("mode", ["inline", "thread", "process"])
def test_one_env_instance_is_refused_as_several_envs_before_anything_starts(mode: str) -> None:
    # Every env would be that one object: each row's step would move the others on.
    env = gymnasium.make("CartPole-v1")
    for given, count in ((env, 2), ([env, env], None)):
        with pytest.raises(TypeError, match="2 separate envs, got an instance of TimeLimit"):
            aioenv.AioVectorEnv(given, count, mode=mode)
    assert not worker_processes()
    assert not worker_threads()


class _CallableEnv(gymnasium.Wrapper[Any, Any, Any, Any]):
    """An env instance that can also be called: still an instance, never a factory."""

    closed = False

    def __call__(self) -> None:
        raise AssertionError("an env instance was called as a factory")

    def close(self) -> None:
        self.closed = True
        super().close()


@pytest.mark.parametrize("mode", ["inline", "thread"])
def test_a_callable_env_instance_is_an_instance_not_a_factory(mode: str) -> None:
    env = _CallableEnv(gymnasium.make("CartPole-v1"))
    with pytest.raises(TypeError, match="2 separate envs, got an instance of _CallableEnv"):
        aioenv.AioVectorEnv(env, 2, mode=mode)
    with aioenv.AioVectorEnv(env, 1, mode=mode) as envs:
        assert not env.closed  # the probe left open the one env the vector env steps
        observations, _ = envs.reset(seed=0)
        envs.step(np.array([0]))
        assert observations.shape == (1, 4)
    assert env.closed
    assert not worker_threads()


def test_an_env_registered_at_run_time_builds_in_worker_processes() -> None:
    gymnasium.register("AioenvRunTimeOnly-v0", entry_point=Touchy, max_episode_steps=2)
    try:
        with aioenv.make_vec("AioenvRunTimeOnly-v0", 2, vectorization_mode="process") as envs:
            envs.reset(seed=0)
            *_, truncated, _ = envs.step(np.array([0, 0]))
            _, _, _, truncated, _ = envs.step(np.array([0, 0]))
            assert truncated.all()  # the spec's max_episode_steps travelled too
    finally:
        del gymnasium.registry["AioenvRunTimeOnly-v0"]


def test_a_wrong_number_of_actions_sends_nothing_and_leaves_the_env_usable() -> None:
    with aioenv.AioVectorEnv("CartPole-v1", 3, mode="thread") as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="2 actions for 3 envs"):
            envs.step(np.array([0, 1]))
        with pytest.raises(ValueError, match="4 actions for 3 envs"):
            envs.step(np.array([0, 1, 0, 1]))
        observations, *_ = envs.step(np.array([0, 1, 0]))
        assert observations.shape == (3, 4)
        envs.reset()


@pytest.mark.loops
def test_a_step_interrupted_by_ctrl_c_leaves_the_env_usable(gate: str) -> None:
    # Even where SIGINT was inherited ignored (a test run started in the background).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_a_step(gate)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_a_step(gate: str) -> None:
    began = f"{gate}-began"  # made by the envs as their steps begin

    def press_ctrl_c_once_a_step_began() -> None:
        if wait_until(lambda: os.path.exists(began), timeout=30):
            os.kill(os.getpid(), signal.SIGINT)

    with aioenv.AioVectorEnv([lambda: GatedTouchy(gate, began)] * 2, mode="thread") as envs:
        envs.reset(seed=0)
        presser = threading.Thread(target=press_ctrl_c_once_a_step_began)
        presser.start()
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.array([0, 0]))  # blocked until the gate opens
        presser.join()
        open_gate(gate)
        _, rewards, *_ = envs.step(np.array([0, 0]))
        np.testing.assert_array_equal(rewards, [1.0, 1.0])


@pytest.mark.loops
@pytest.mark.parametrize("restart", ["never", "on_failure"])
def test_ctrl_c_in_a_coroutine_envs_step_is_the_callers_and_leaves_the_env_usable(
    gate: str, restart: str
) -> None:
    """A plain env in a coroutine worker steps on the caller's own thread, where Ctrl-C
    lands in the env's step: it is the caller's, as a sync worker's (not the env's death)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_a_coroutine_step(gate, restart)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_a_coroutine_step(gate: str, restart: str) -> None:
    began = f"{gate}-began"  # made by the first env as its step begins
    opened = f"{gate}-opened"  # the second env's gate, open from the start
    open_gate(opened)

    def press_ctrl_c_once_a_step_began() -> None:
        if wait_until(lambda: os.path.exists(began), timeout=30):
            os.kill(os.getpid(), signal.SIGINT)

    factories = [lambda: GatedTouchy(gate, began), lambda: GatedTouchy(opened)]
    with aioenv.AioVectorEnv(factories, mode="coroutine", restart=restart) as envs:
        envs.reset(seed=0)
        presser = threading.Thread(target=press_ctrl_c_once_a_step_began)
        presser.start()
        with pytest.raises(KeyboardInterrupt):  # was: WorkerDied, or nothing once restarted
            envs.step(np.array([0, 0]))  # blocked until the gate opens
        presser.join()
        open_gate(gate)
        _, rewards, *_ = envs.step(np.array([0, 0]))
        np.testing.assert_array_equal(rewards, [1.0, 1.0])
        assert envs.pool.restarts == 0 and envs.pool.failures == 0


def _ctrl_c() -> None:
    raise KeyboardInterrupt


@pytest.mark.loops
def test_ctrl_c_landing_as_a_step_ends_leaves_the_next_step_working(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C that lands once the step's states are in, before the loop it ran on (in the
    caller's thread) has stopped, is the caller's; the next step works."""
    exchange = _runtime.exchange

    async def interrupted_as_it_ends(*args: Any) -> Any:
        states = await exchange(*args)
        asyncio.get_running_loop().call_soon(_ctrl_c)  # runs before the loop stops
        return states

    with aioenv.AioVectorEnv([Touchy] * 2, mode="thread") as envs:
        envs.reset(seed=0)
        monkeypatch.setattr(_runtime, "exchange", interrupted_as_it_ends)
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.array([0, 0]))
        monkeypatch.setattr(_runtime, "exchange", exchange)
        # was: RuntimeError: Event loop stopped before Future completed, the step left running
        _, rewards, *_ = envs.step(np.array([0, 0]))
        np.testing.assert_array_equal(rewards, [1.0, 1.0])


@pytest.mark.parametrize("space", ["Box", "Dict"])
@pytest.mark.parametrize(
    ("mode", "grouping"),
    [
        ("inline", {}),
        ("sync", {}),
        ("thread", {}),
        ("process", {}),
        ("process", {"envs_per_worker": 2}),
    ],
)
def test_a_masked_first_reset_gives_the_envs_left_out_zeros_as_gymnasium_does(
    space: str, mode: str, grouping: dict[str, Any]
) -> None:
    """A first reset that leaves envs out (SB3's per-env options reset them by groups) has
    zeros for their observations, as gymnasium's ``AsyncVectorEnv`` does (its shared
    memory starts as zeros); the others are their envs' resets."""
    mask = [True, False, True, False]
    zeros = np.zeros(2, np.float32)  # Echo's Box; its Dict is that Box and a Discrete
    expected = [
        echo(space, i).reset(seed=1 + i)[0]
        if reset
        else (zeros if space == "Box" else {"gear": 0, "pos": zeros})
        for i, reset in enumerate(mask)
    ]
    factories = [functools.partial(echo, space, i) for i in range(4)]
    with aioenv.AioVectorEnv(factories, mode=mode, **grouping) as envs:
        observations, infos = envs.reset(seed=1, options={"reset_mask": np.array(mask)})
    rows = list(iterate(envs.observation_space, observations))
    for ours, theirs in zip(rows, expected, strict=True):
        for key in ours if space == "Dict" else [None]:
            np.testing.assert_array_equal(
                ours if key is None else ours[key], theirs if key is None else theirs[key]
            )
    np.testing.assert_array_equal(infos["_draw"], [True, False, True, False])


@pytest.mark.parametrize("mode", ["sync", "thread", "process"])
def test_a_sub_env_exception_surfaces_as_itself_and_the_env_stays_usable(mode: str) -> None:
    with aioenv.AioVectorEnv([lambda: Touchy(fragile=True), Touchy], mode=mode) as envs:
        with pytest.raises(ValueError, match="unlucky seed") as raised:
            envs.reset(seed=[13, 0])  # env 0 raises, env 1 does not
        notes = "".join(getattr(raised.value, "__notes__", [])) or str(raised.value.__cause__)
        assert "env 0" in notes
        assert "Traceback" in notes
        envs.reset(seed=0)  # every state of the failed call was taken: this works
        with pytest.raises(ValueError, match="fragile env stepped with 1"):
            envs.step(np.array([1, 1]))
        envs.reset()
        _, rewards, *_ = envs.step(np.array([0, 1]))
        np.testing.assert_array_equal(rewards, [1.0, 1.0])


@pytest.mark.parametrize("mode", ["inline", "sync", "thread", "process"])
def test_a_sub_env_exception_in_a_call_surfaces_as_itself(mode: str) -> None:
    with aioenv.AioVectorEnv([Touchy, Touchy], mode=mode) as envs:
        envs.reset(seed=0)
        with pytest.raises(AttributeError, match="no_such_attribute") as raised:
            envs.get_attr("no_such_attribute")  # as gymnasium's vector envs raise it
        notes = "".join(getattr(raised.value, "__notes__", [])) or str(raised.value.__cause__)
        assert "env 0" in notes
        with pytest.raises(TypeError, match="positional argument"):
            envs.call("step")
        with pytest.raises(ZeroDivisionError):
            envs.apply(lambda env: 1 / 0, env_ids=[1])
        assert envs.get_attr("observation_space") == (envs.single_observation_space,) * 2


def test_spaces_are_checked_at_construction_and_nothing_is_left_running() -> None:
    def frozen_lake() -> gymnasium.Env[Any, Any]:
        return gymnasium.make("FrozenLake-v1")

    with pytest.raises(RuntimeError, match="observation space"):
        aioenv.AioVectorEnv([cartpole, frozen_lake], mode=["thread", "process"])
    assert wait_until(lambda: not worker_processes() and not worker_threads(), timeout=10)


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ("NoSuchEnv-v0", gymnasium.error.NameNotFound),
        (Counter, TypeError),  # not a gymnasium env
    ],
)
def test_a_failing_constructor_starts_or_leaves_nothing(env: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        aioenv.AioVectorEnv(env, 2, mode=["thread", "process"])
    assert not worker_processes()
    assert not worker_threads()


def test_np_random_seed_and_np_random_per_env() -> None:
    with aioenv.AioVectorEnv("CartPole-v1", 3, mode="process") as envs:
        envs.reset(seed=42)
        assert envs.np_random_seed == (42, 43, 44)
        generators = envs.np_random
        assert len(generators) == 3
        assert all(isinstance(g, np.random.Generator) for g in generators)


def test_reset_mask_must_be_a_bool_array() -> None:
    with aioenv.AioVectorEnv("CartPole-v1", 2, mode="sync", autoreset_mode="Disabled") as envs:
        envs.reset(seed=0)
        with pytest.raises(TypeError, match="numpy array"):
            envs.reset(options={"reset_mask": [True, False]})
        with pytest.raises(TypeError, match="dtype"):
            envs.reset(options={"reset_mask": np.array([1, 0])})
        envs.reset(options={"reset_mask": np.array([True, False])})


def test_after_close_calls_say_the_env_is_closed() -> None:
    envs = aioenv.AioVectorEnv("CartPole-v1", 2, mode="thread")
    envs.close()
    for call in (envs.reset, lambda: envs.step(np.array([0, 0])), lambda: envs.get_attr("x")):
        with pytest.raises(gymnasium.error.ClosedEnvironmentError, match="closed"):
            call()
    with pytest.raises(aioenv.ClosedError):
        envs.reset()
    envs.close()  # idempotent


def test_a_context_manager_closes_it() -> None:
    with aioenv.AioVectorEnv("CartPole-v1", 2, mode=["thread", "process"]) as envs:
        envs.reset(seed=0)
    assert envs.closed
    assert wait_until(lambda: not worker_processes() and not worker_threads(), timeout=10)


@pytest.mark.parametrize(
    "autoreset",
    [AutoresetMode.SAME_STEP, "SameStep", "same_step"],
)
def test_autoreset_mode_takes_gymnasium_members_and_values(autoreset: Any) -> None:
    with aioenv.AioVectorEnv("CartPole-v1", 1, mode="sync", autoreset_mode=autoreset) as envs:
        assert envs.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
        assert envs.autoreset_mode is AutoresetMode.SAME_STEP
    with aioenv.make_vec(
        "CartPole-v1", 1, vectorization_mode="sync", vector_kwargs={"autoreset_mode": autoreset}
    ) as envs:
        assert envs.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP


def test_observation_mode_different_batches_differing_spaces() -> None:
    def wide() -> gymnasium.Env[Any, Any]:
        box = gymnasium.spaces.Box(-10.0, 10.0, (1,), np.float32)
        return gymnasium.wrappers.TransformObservation(Touchy(), lambda o: o, box)

    fns = [Touchy, wide]
    reference = SyncVectorEnv(fns, observation_mode="different")
    with aioenv.AioVectorEnv(fns, mode="thread", observation_mode="different") as envs:
        assert envs.observation_space == reference.observation_space
        assert envs.single_observation_space == reference.single_observation_space
        np.testing.assert_array_equal(envs.reset(seed=0)[0], reference.reset(seed=0)[0])
    with pytest.raises(RuntimeError, match="observation space"):
        aioenv.AioVectorEnv(fns, mode="thread")  # "same" is the default
    reference.close()


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_an_unknown_observation_mode_is_refused_before_any_worker_starts(
    mode: str, tmp_path: Path
) -> None:
    built = tmp_path / "built"  # written by whatever builds an env: the probe env too

    def make() -> gymnasium.Env[Any, Any]:
        built.touch()
        return gymnasium.make("CartPole-v1")

    with pytest.raises(ValueError, match="observation_mode") as theirs:
        SyncVectorEnv([make], observation_mode="bogus")
    built.unlink(missing_ok=True)
    with pytest.raises(ValueError, match=re.escape(str(theirs.value))):  # gymnasium's text
        aioenv.AioVectorEnv(make, 2, mode=mode, observation_mode="bogus")
    assert not built.exists()  # no worker (nor the probe env) was started first
    assert not worker_processes()
    assert not worker_threads()


def test_make_vec_spec_rebuilds_the_same_vector_env() -> None:
    first = aioenv.make_vec(
        "CartPole-v1",
        3,
        vectorization_mode="thread",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        max_episode_steps=7,
    )
    with first:
        assert first.spec is not None
        assert first.spec.kwargs["num_envs"] == 3
        second = aioenv.make_vec(first.spec)
        with second:
            assert second.num_envs == 3
            assert second.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
            np.testing.assert_array_equal(first.reset(seed=1)[0], second.reset(seed=1)[0])
            for _ in range(7):
                truncated = second.step(np.zeros(3, dtype=np.int64))[3]
            assert truncated.all()  # max_episode_steps=7 was rebuilt too


@pytest.mark.parametrize(
    ("member", "mode"), [(VectorizeMode.ASYNC, "process"), (VectorizeMode.SYNC, "sync")]
)
def test_make_vec_takes_gymnasiums_vectorize_mode_members(member: VectorizeMode, mode: str) -> None:
    # gymnasium.make_vec's docs recommend the enum over its values
    with aioenv.make_vec("CartPole-v1", 2, vectorization_mode=member) as envs:
        assert envs.mode == mode
        assert envs.spec is not None
        assert envs.spec.kwargs["vectorization_mode"] == member.value  # as gymnasium records it
        assert envs.reset(seed=0)[0].shape == (2, 4)


def _stats_then_scaled_reward(env: gymnasium.Env[Any, Any]) -> gymnasium.Env[Any, Any]:
    stats = gymnasium.wrappers.RecordEpisodeStatistics(env)
    return gymnasium.wrappers.TransformReward(stats, lambda r: 0.5 * r)


def test_the_users_episode_statistics_are_not_overwritten() -> None:
    reference = gymnasium.make_vec(
        "CartPole-v1", 2, vectorization_mode="sync", wrappers=[_stats_then_scaled_reward]
    )
    with aioenv.make_vec(
        "CartPole-v1", 2, vectorization_mode="thread", wrappers=[_stats_then_scaled_reward]
    ) as envs:
        _rollout_matches(envs, reference, steps=60)
    reference.close()


CARTPOLE_WRAPPERS: dict[str, Any] = {
    "TransformObservation": lambda e: vector_wrappers.TransformObservation(e, lambda o: o * 2),
    "VectorizeTransformObservation": lambda e: vector_wrappers.VectorizeTransformObservation(
        e, gymnasium.wrappers.TransformObservation, func=lambda o: o + 1, observation_space=None
    ),
    "FlattenObservation": vector_wrappers.FlattenObservation,
    "ReshapeObservation": lambda e: vector_wrappers.ReshapeObservation(e, (2, 2)),
    "DtypeObservation": lambda e: vector_wrappers.DtypeObservation(e, np.float64),
    "NormalizeObservation": vector_wrappers.NormalizeObservation,
    "TransformReward": lambda e: vector_wrappers.TransformReward(e, lambda r: r * 3),
    "VectorizeTransformReward": lambda e: vector_wrappers.VectorizeTransformReward(
        e, gymnasium.wrappers.TransformReward, func=lambda r: r - 1
    ),
    "ClipReward": lambda e: vector_wrappers.ClipReward(e, 0.0, 0.5),
    "NormalizeReward": vector_wrappers.NormalizeReward,
    "RecordEpisodeStatistics": vector_wrappers.RecordEpisodeStatistics,
    "DictInfoToList": vector_wrappers.DictInfoToList,
    "TransformAction": lambda e: vector_wrappers.TransformAction(e, lambda a: 1 - a),
    "VectorizeTransformAction": lambda e: vector_wrappers.VectorizeTransformAction(
        e, gymnasium.wrappers.TransformAction, func=lambda a: 1 - a, action_space=None
    ),
}
PENDULUM_WRAPPERS: dict[str, Any] = {
    "ClipAction": vector_wrappers.ClipAction,
    "RescaleAction": lambda e: vector_wrappers.RescaleAction(e, -1.0, 1.0),
    "RescaleObservation": lambda e: vector_wrappers.RescaleObservation(e, -1.0, 1.0),
}


def test_every_generic_vector_wrapper_is_covered() -> None:
    covered = set(CARTPOLE_WRAPPERS) | set(PENDULUM_WRAPPERS)
    # Not covered: image-only (grayscale, resize), Dict-only (filter), rendering and
    # array-framework wrappers (jax, torch: not installed); and names gymnasium lists in
    # __all__ without defining them in this version.
    image_render_or_framework = {
        "GrayscaleObservation",
        "ResizeObservation",
        "FilterObservation",
        "RenderObservation",
        "RenderCollection",
        "RecordVideo",
        "HumanRendering",
        "ArrayConversion",
        "JaxToNumpy",
        "JaxToTorch",
        "NumpyToTorch",
        "TimeAwareObservation",
        "FrameStackObservation",
        "DelayObservation",
    }
    classes = {
        name
        for name in vector_wrappers.__all__
        if name not in image_render_or_framework  # some import optional packages
        and isinstance(getattr(vector_wrappers, name), type)
    }
    assert classes <= covered


@pytest.mark.parametrize(
    ("env_id", "wrap"),
    [("CartPole-v1", w) for w in CARTPOLE_WRAPPERS.values()]
    + [("Pendulum-v1", w) for w in PENDULUM_WRAPPERS.values()],
    ids=list(CARTPOLE_WRAPPERS) + list(PENDULUM_WRAPPERS),
)
def test_vector_wrappers_work_over_it_as_over_sync_vector_env(env_id: str, wrap: Any) -> None:
    reference = wrap(gymnasium.make_vec(env_id, 2, vectorization_mode="sync"))
    with aioenv.make_vec(env_id, 2, vectorization_mode="sync") as inner:
        _rollout_matches(wrap(inner), reference, steps=40)
    reference.close()


def _rollout_matches(ours: Any, reference: Any, steps: int) -> None:
    obs_a, info_a = ours.reset(seed=7)
    obs_b, info_b = reference.reset(seed=7)
    np.testing.assert_allclose(obs_a, obs_b)
    if isinstance(info_b, dict):
        assert_same_infos(info_a, info_b)
    reference.action_space.seed(3)
    for _ in range(steps):
        actions = reference.action_space.sample()
        # copies: VectorizeTransformAction writes its result into the array it is given
        a, b = ours.step(np.copy(actions)), reference.step(np.copy(actions))
        for mine, theirs in zip(a[:4], b[:4], strict=True):
            np.testing.assert_allclose(mine, theirs)
        if isinstance(b[4], dict):
            assert_same_infos(a[4], b[4])
        else:
            assert len(a[4]) == len(b[4])


# Errors that name the problem and the fix ---------------------------------------------------
class _TakesRestart(gymnasium.Env[np.ndarray, int]):
    """An env whose own constructor takes ``restart``: make_vec passes it on, as gymnasium's
    make_vec would."""

    observation_space = gymnasium.spaces.Box(0, 1, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, restart: str = "no") -> None:
        self.restart = restart

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> Any:
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_make_vec_says_pool_options_go_in_vector_kwargs_and_the_mode_in_vectorization_mode() -> (
    None
):
    with pytest.raises(
        TypeError,
        match=r"passes its keyword arguments to the env, as gymnasium.make_vec does, and "
        r"CartPole-v1 does not take restart=: .*pass vector_kwargs=\{'restart': 'on_failure'\}",
    ):
        aioenv.make_vec("CartPole-v1", 2, vectorization_mode="sync", restart="on_failure")
    with pytest.raises(
        TypeError,
        match=r"make_vec\(\) takes vectorization_mode= itself, and vector_kwargs gave "
        r"mode='inline' too: pass vectorization_mode='inline' to make_vec and leave 'mode' out",
    ):
        aioenv.make_vec("CartPole-v1", 2, vector_kwargs={"mode": "inline"})
    with pytest.raises(ValueError, match=r"vectorization_mode='bogus'; choose one of 'auto', 'in"):
        aioenv.make_vec("CartPole-v1", 2, vectorization_mode="bogus")
    with pytest.raises(
        TypeError,
        match=r"make_vec\(\)'s vector_kwargs got an unknown option 'stepp_timeout'.*did you "
        r"mean step_timeout=\?",
    ):
        aioenv.make_vec(
            "CartPole-v1", 2, vectorization_mode="sync", vector_kwargs={"stepp_timeout": 1}
        )
    assert not worker_processes()
    assert not worker_threads()
    # The fix works, and an env that takes the keyword itself still gets it.
    kwargs = {"restart": "on_failure"}
    with aioenv.make_vec("CartPole-v1", 2, vectorization_mode="sync", vector_kwargs=kwargs) as envs:
        assert envs.pool.options.restart == "on_failure"
    gymnasium.register("AioenvTakesRestart-v0", entry_point=_TakesRestart)
    try:
        with aioenv.make_vec(
            "AioenvTakesRestart-v0", 2, vectorization_mode="inline", restart="yes"
        ) as envs:
            assert envs.get_attr("restart") == ("yes", "yes")
    finally:
        del gymnasium.registry["AioenvTakesRestart-v0"]


@pytest.mark.parametrize("num_envs", [0, -2])
def test_num_envs_below_one_says_it_must_be_at_least_one(num_envs: int) -> None:
    with pytest.raises(ValueError, match=rf"got num_envs={num_envs}: .* must be an int >= 1"):
        aioenv.AioVectorEnv("CartPole-v1", num_envs, mode="sync")


@pytest.mark.parametrize("mode", ["inline", "sync"])
def test_seeds_and_actions_of_the_wrong_kind_say_what_is_taken(mode: str) -> None:
    takes = r"seed must be None, an int \(env i gets seed \+ i\) or a sequence of 4 ints or Nones"
    with aioenv.AioVectorEnv("CartPole-v1", 4, mode=mode) as envs:
        with pytest.raises(
            TypeError, match=rf"reset\(\)'s {takes}, one per env; got the float 1.5"
        ):
            envs.reset(seed=1.5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=rf"reset\(\)'s {takes}.*; got the str 'abc'"):
            envs.reset(seed="abc")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=rf"{takes}.*; got 3 seeds for 4 envs"):
            envs.reset(seed=[0, 1, 2])
        with pytest.raises(TypeError, match=r"got seed\[2\]=2.5, a float"):
            envs.reset(seed=[0, 1, 2.5, None])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=rf"async_reset\(\)'s {takes}"):
            envs.async_reset(seed=1.5)  # type: ignore[arg-type]
        envs.reset(seed=[0, None, 2, 3])
        batch = (
            r"takes a batch of 4 actions, one per env .*got the str 'left': a str is not a batch"
        )
        with pytest.raises(TypeError, match=rf"step\(\) {batch}"):
            envs.step("left")
        with pytest.raises(TypeError, match=rf"step_async\(\) {batch}"):
            envs.step_async("left")
        observations, *_ = envs.step(np.zeros(4, np.int64))  # nothing was sent
        assert observations.shape == (4, 4)
        envs.async_reset(seed=0)
        envs.recv()
        with pytest.raises(TypeError, match=r"send\(\) takes a batch of actions, one per env"):
            envs.send("left")
        envs.send(np.zeros(4, np.int64))
        assert envs.recv()[0].shape == (4, 4)


def test_an_unknown_mode_lists_the_modes_of_the_function_called() -> None:
    with pytest.raises(
        ValueError,
        match=r"^AioVectorEnv\(\) got mode='bogus'; choose one of 'auto', 'inline', 'sync', "
        r"'thread', 'process', 'coroutine', 'ray' \(old spellings taken: 'async' for 'coroutine'\)",
    ):
        aioenv.AioVectorEnv("CartPole-v1", 2, mode="bogus")
    with pytest.raises(ValueError, match=r"mode\[1\]='inline'; a list of modes takes worker modes"):
        aioenv.AioVectorEnv("CartPole-v1", 2, mode=["sync", "inline"])
    with pytest.raises(
        ValueError, match=r"^make_pool\(\) got mode='bogus'; choose one of 'sync',"
    ) as raised:
        aioenv.make_pool("CartPole-v1", 2, mode="bogus")
    assert "'auto'" not in str(raised.value) and "'inline'" not in str(raised.value)
    assert not worker_processes()
    assert not worker_threads()


def test_a_misspelt_option_names_the_function_called_and_the_close_match() -> None:
    with pytest.raises(
        TypeError,
        match=r"^AioVectorEnv\(\) got an unknown option 'stepp_timeout': it is no pool or worker "
        r"option; did you mean step_timeout=\?$",
    ):
        aioenv.AioVectorEnv("CartPole-v1", 2, mode="sync", stepp_timeout=1)
    with pytest.raises(TypeError, match=r"'batchsize'.*did you mean batch_size=\?"):
        aioenv.AioVectorEnv("CartPole-v1", 2, mode="sync", batchsize=1)
    with pytest.raises(
        TypeError, match=r"^AioVectorEnv\(\) got an unknown option 'colour'.*'Pool opt"
    ):
        aioenv.AioVectorEnv("CartPole-v1", 2, mode="inline", colour="red")
    with pytest.raises(
        TypeError, match=r"^make_pool\(\) got an unknown option 'stepp_timeout'.*step_timeout="
    ):
        aioenv.make_pool(Counter, 2, mode="sync", stepp_timeout=1)
    assert not worker_processes()
    assert not worker_threads()


@pytest.mark.parametrize("mode", ["auto", "process"])
@pytest.mark.parametrize(
    ("option", "says"),
    [
        ({"step_timeout": 0}, "step_timeout must be None or a number > 0, got 0"),
        ({"max_restarts": -1}, "max_restarts must be an int >= 0, got -1"),
        ({"max_episode_steps": 0}, "max_episode_steps must be None or an int >= 1, got 0"),
        ({"autoreset_mode": "bogus"}, "autoreset must be one of 'disabled', 'same_step'"),
    ],
    ids=["step_timeout", "max_restarts", "max_episode_steps", "autoreset_mode"],
)
def test_a_bad_pool_option_value_is_refused_before_any_env_is_built(
    mode: str, option: dict[str, Any], says: str, tmp_path: Path
) -> None:
    built = tmp_path / "built"  # written by whatever process builds an env

    def make() -> gymnasium.Env[Any, Any]:
        built.touch()
        return gymnasium.make("CartPole-v1")

    with pytest.raises(ValueError, match=re.escape(says)):
        aioenv.AioVectorEnv(make, 2, mode=mode, **option)
    assert not built.exists()  # no probe env was built (in a child process) first
    assert not worker_processes()
    assert not worker_threads()


@pytest.mark.parametrize(
    ("mode", "per_worker"), [("thread", None), ("process", None), ("process", 2), ("inline", None)]
)
def test_reset_options_reach_every_env_seeded_or_not(mode: str, per_worker: int | None) -> None:
    """A user's reset options reach each env's reset as SyncVectorEnv hands them, whether
    the reset is seeded or not, however the envs are grouped."""
    from envs import Tattling

    reference = SyncVectorEnv([Tattling] * 4)
    grouping = {} if per_worker is None else {"envs_per_worker": per_worker}
    with aioenv.AioVectorEnv(Tattling, 4, mode=mode, **grouping) as ours:
        for seed in (3, None):
            options = {"level": 2 if seed is None else 1}
            _, mine = ours.reset(seed=seed, options=options)
            _, theirs = reference.reset(seed=seed, options=options)
            assert mine["options"]["level"].tolist() == theirs["options"]["level"].tolist()
            assert mine["options"]["level"].tolist() == [options["level"]] * 4
    reference.close()

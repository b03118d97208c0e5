"""The gymnasium ids a script can make are the ids every worker can make: ids the script
registered (at run time, or with an entry point in ``__main__``), and ``module:Id`` ids,
whose module registers them when imported."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import Walk

import aioenv
from aioenv.core._environment import BatchStep

MODULE_ID = "registered_pkg:Thing-v0"  # tests/registered_pkg registers Thing-v0
RUN_TIME_ID = "AioenvTest/Walk-v0"  # a namespace of its own, like ALE/Pong-v5
OFF_CPU = {"num_cpus": 0}  # the test Ray instance has 2 CPUs; these actors reserve none

#: Every worker kind, and the ways several envs share a worker or a process.
LOCAL_KINDS: dict[str, dict[str, Any]] = {
    "sync": {"mode": "sync"},
    "thread": {"mode": "thread"},
    "process": {"mode": "process"},
    "process_grouped": {"mode": "process", "envs_per_worker": 2},
    "process_hosted": {"mode": "process", "envs_per_process": 2},
    "async": {"mode": "async"},
}
RAY_KINDS: dict[str, dict[str, Any]] = {
    "ray": {"mode": "ray", **OFF_CPU},
    "ray_hosted": {"mode": "ray", "envs_per_actor": 2, **OFF_CPU},
}


@pytest.fixture
def module_id() -> Iterator[str]:
    """``registered_pkg:Thing-v0`` with its package not imported yet, so that naming the id
    is what registers it; afterwards the id and the package are gone again."""
    assert "registered_pkg" not in sys.modules
    assert "Thing-v0" not in gymnasium.registry
    yield MODULE_ID
    gymnasium.registry.pop("Thing-v0", None)
    sys.modules.pop("registered_pkg", None)


@contextlib.contextmanager
def registered(env_id: str, **spec: Any) -> Iterator[str]:
    """``env_id`` registered in this process (as a script does at its top) while inside."""
    gymnasium.register(env_id, **spec)
    try:
        yield env_id
    finally:
        gymnasium.registry.pop(env_id, None)


def observations(state: Any) -> np.ndarray:
    """A worker's observations, one row per env."""
    if isinstance(state, BatchStep):
        return np.asarray(state.observations)
    return np.asarray(state.observation)[None]


async def assert_pool_runs_walk(pool: aioenv.WorkerPool[Any]) -> None:
    """Each env of ``pool`` is a ``Walk``: observations ``(draw, step)``, the step counting."""
    for worker_id in range(len(pool.workers)):
        pool.send_action(aioenv.RESET, worker_id)
    batch = await pool.get_batch(min_size=len(pool.workers))
    for state in batch.states:
        assert observations(state).shape[1:] == (2,)
        assert (observations(state)[:, 1] == 0).all()
    for worker_id in batch.worker_ids.tolist():
        worker = pool.workers[worker_id]
        pool.send_action(
            np.zeros(worker.num_envs, dtype=np.int64) if worker.num_envs > 1 else 0, worker_id
        )
    batch = await pool.get_batch(min_size=len(pool.workers))
    for state in batch.states:
        assert (observations(state)[:, 1] == 1).all()


@pytest.mark.parametrize("options", LOCAL_KINDS.values(), ids=LOCAL_KINDS.keys())
async def test_a_module_id_builds_in_every_worker_kind(
    module_id: str, options: dict[str, Any]
) -> None:
    async with aioenv.make_pool(module_id, 2, seed=0, **options) as pool:
        await assert_pool_runs_walk(pool)


@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("options", RAY_KINDS.values(), ids=RAY_KINDS.keys())
async def test_a_module_id_builds_in_ray_actors(module_id: str, options: dict[str, Any]) -> None:
    async with aioenv.make_pool(module_id, 2, seed=0, **options) as pool:
        await assert_pool_runs_walk(pool)


@pytest.mark.parametrize("mode", ["sync", "process", ["thread", "process"]])
def test_a_module_id_makes_a_vector_env(module_id: str, mode: Any) -> None:
    with aioenv.AioVectorEnv(module_id, 2, mode=mode) as envs:
        assert envs.single_observation_space == Walk.observation_space
        first, _ = envs.reset(seed=0)
        assert first.shape == (2, 2) and (first[:, 1] == 0).all()


def test_make_vec_takes_a_module_id(module_id: str) -> None:
    with aioenv.make_vec(module_id, 2, vectorization_mode="process") as envs:
        first, _ = envs.reset(seed=0)
        assert first.shape == (2, 2) and (first[:, 1] == 0).all()
        assert envs.spec is not None and envs.spec.id == "Thing-v0"


def test_a_module_that_does_not_import_is_an_error_naming_the_id_and_module() -> None:
    with pytest.raises(ModuleNotFoundError, match=r"'no_such_pkg:Thing-v0'.*'no_such_pkg'"):
        aioenv.make_pool("no_such_pkg:Thing-v0", 1, mode="sync")


def test_a_module_that_does_not_register_the_id_is_gymnasiums_error_saying_so(
    module_id: str,
) -> None:
    with pytest.raises(gymnasium.error.NameNotFound, match="'registered_pkg'.*'Other-v0'"):
        aioenv.make_pool("registered_pkg:Other-v0", 1, mode="sync")


def walk_by_id() -> gymnasium.Env[Any, Any]:
    return gymnasium.make(RUN_TIME_ID)


RUN_TIME_KINDS: dict[str, dict[str, Any]] = {
    "process": {"mode": "process"},
    "process_grouped": {"mode": "process", "envs_per_worker": 2},
    "process_hosted": {"mode": "process", "envs_per_process": 2},
}


@pytest.mark.parametrize("options", RUN_TIME_KINDS.values(), ids=RUN_TIME_KINDS.keys())
async def test_an_id_registered_at_run_time_builds_in_a_factory_in_worker_processes(
    options: dict[str, Any],
) -> None:
    with registered(RUN_TIME_ID, entry_point=Walk):
        async with aioenv.make_pool(lambda: gymnasium.make(RUN_TIME_ID), 2, **options) as pool:
            await assert_pool_runs_walk(pool)


@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
async def test_an_id_registered_at_run_time_builds_in_a_factory_in_a_ray_actor() -> None:
    with registered(RUN_TIME_ID, entry_point=Walk):
        async with aioenv.make_pool(
            lambda: gymnasium.make(RUN_TIME_ID), 2, mode="ray", envs_per_actor=2, **OFF_CPU
        ) as pool:
            await assert_pool_runs_walk(pool)


async def test_a_restarted_process_knows_the_ids_of_the_first() -> None:
    with registered(RUN_TIME_ID, entry_point=Walk):
        async with aioenv.make_pool(walk_by_id, 1, mode="process", restart="on_failure") as pool:
            await assert_pool_runs_walk(pool)
            first = pool.workers[0].pid  # type: ignore[attr-defined]
            os.kill(first, signal.SIGKILL)
            pool.send_action(0, 0)
            state, _ = await pool.get_state()
            assert state.truncated and state.info["aioenv"]["restarted"]  # its episode ends
            pool.send_action(0, 0)
            state, _ = await pool.get_state()  # the new process's reset
            assert state.info["aioenv"]["restarted"] and not state.truncated
            assert pool.workers[0].pid != first  # type: ignore[attr-defined]
            assert observations(state).shape == (1, 2)


async def test_a_spec_that_cannot_travel_is_left_out_and_the_others_still_build() -> None:
    lock = threading.Lock()  # a closure over a lock cannot be pickled

    def locked_walk() -> Walk:
        with lock:
            return Walk()

    with (
        registered(RUN_TIME_ID, entry_point=Walk),
        registered("AioenvTest/Locked-v0", entry_point=locked_walk),
    ):
        factories = [walk_by_id, lambda: gymnasium.make("AioenvTest/Locked-v0")]
        async with aioenv.make_pool(factories, mode="process") as pool:
            pool.send_action(aioenv.RESET, 0)
            state, _ = await pool.get_state()
            assert observations(state).shape == (1, 2)
            pool.send_action(aioenv.RESET, 1)
            # gymnasium's own error, in the worker that needs the spec that stayed behind.
            with pytest.raises(aioenv.EnvError, match="Locked"):
                await pool.get_state()


def test_a_worker_keeps_the_ids_it_has_and_gains_the_ones_it_lacks() -> None:
    from aioenv.core import _registry

    with (
        registered(RUN_TIME_ID, entry_point=Walk, max_episode_steps=3),
        registered("AioenvTest/Kept-v0", entry_point=Walk, max_episode_steps=3),
    ):
        parents = _registry.snapshot()
        # As in a worker: one id is missing, another one is registered its own way.
        del gymnasium.registry[RUN_TIME_ID]
        kept = gymnasium.registry["AioenvTest/Kept-v0"]
        gymnasium.registry["AioenvTest/Kept-v0"] = dataclasses.replace(kept, max_episode_steps=7)
        _registry.merge(parents)
        assert gymnasium.spec(RUN_TIME_ID).max_episode_steps == 3
        assert gymnasium.spec(RUN_TIME_ID).entry_point is Walk
        assert gymnasium.spec("AioenvTest/Kept-v0").max_episode_steps == 7


SCRIPT = """
    import gymnasium as gym
    import numpy as np

    import aioenv


    class Corridor(gym.Env):
        observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float64)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.x = 0.0
            return np.array([self.x]), {}

        def step(self, action):
            self.x += 1.0 + action
            return np.array([self.x]), 1.0, self.x >= 10, False, {}


    gym.register("ScriptOnly/Corridor-v0", entry_point=Corridor)
    gym.register("ScriptOnly/CorridorByName-v0", entry_point="__main__:Corridor")

    if __name__ == "__main__":
        factories = [
            lambda: gym.make("ScriptOnly/Corridor-v0"),
            lambda: gym.make("ScriptOnly/CorridorByName-v0"),
        ]
        with aioenv.AioVectorEnv(factories, mode="process") as envs:
            envs.reset(seed=0)
            observations, *_ = envs.step(np.array([0, 1]))
            print(observations.ravel().tolist())
"""


def test_a_script_that_registers_ids_at_its_top_makes_them_in_worker_processes(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=50, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[1.0, 2.0]"


PACKAGE_SCRIPT = """
    import gymnasium as gym
    import numpy as np
    import registered_pkg

    import aioenv

    gym.register_envs(registered_pkg)

    if __name__ == "__main__":
        factories = [
            lambda: gym.make("Thing-v0"),
            lambda: gym.make("registered_pkg:Thing-v0"),  # imports it again in the worker
        ]
        with aioenv.AioVectorEnv(factories, mode="process") as envs:
            observations, _ = envs.reset(seed=0)
            print(observations[:, 1].tolist())
"""


def test_a_script_that_imports_a_package_of_envs_makes_its_ids_in_worker_processes(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(PACKAGE_SCRIPT))
    tests = str(Path(__file__).parent)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([tests, *sys.path])},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0.0, 0.0]"
    # The package registers its id again in the worker, over the parent's copy, quietly.
    assert "Overriding environment" not in result.stderr

"""A real ``gymnasium.vector.VectorEnv`` over an aioenv pool, for synchronous code.

The pool runs on an event loop in a background thread (an anyio blocking portal), so the
vector env works from plain code and from inside a running loop alike. ``reset`` and
``step`` follow gymnasium's conventions exactly: batched 5-tuple, info dicts with ``_key``
masks, the three autoreset modes, ``reset(seed=s)`` seeding env ``i`` with ``s + i``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

import anyio.from_thread
import gymnasium
import numpy as np
import numpy.typing as npt
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from ._environment import EnvSource, GymnasiumEnvironment, build_environment
from ._factory import make_pool
from ._pool import WorkerPool
from ._sentinels import RESET, Reset

__all__ = ["AioVectorEnv", "GymnasiumFactory", "make_vec"]

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

_MODES = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}


def _autoreset_name(autoreset: str | AutoresetMode) -> str:
    if isinstance(autoreset, AutoresetMode):
        return {mode: name for name, mode in _MODES.items()}[autoreset]
    return autoreset


class AioVectorEnv(VectorEnv):
    """A drop-in for ``SyncVectorEnv``/``AsyncVectorEnv`` backed by an aioenv pool.

    ``AioVectorEnv(env, num_envs, mode="process", autoreset="next_step", **pool_options)``:
    ``env`` is a gymnasium id or a factory; ``mode`` and the pool options are those of
    :func:`aioenv.make_pool` (``"thread"``, a list of modes, ``step_timeout=``, ...).
    """

    def __init__(
        self,
        env: EnvSource,
        num_envs: int,
        *,
        mode: str | Sequence[str] = "process",
        autoreset: str | AutoresetMode = "next_step",
        **pool_options: Any,
    ) -> None:
        pool = make_pool(
            env, num_envs, mode=mode, autoreset=_autoreset_name(autoreset), **pool_options
        )
        self._setup(pool, env)

    @classmethod
    def from_pool(cls, pool: WorkerPool[Any]) -> AioVectorEnv:
        """Wrap a pool that has not been used from an event loop yet (its autoreset mode
        becomes the vector env's)."""
        for worker in pool.workers:
            if worker.event_loop is not None:
                raise RuntimeError(
                    f"{worker.name} is already bound to an event loop; build the pool and "
                    "wrap it with AioVectorEnv.from_pool() before using it"
                )
        venv = cls.__new__(cls)
        venv._setup(pool, pool.workers[0].source)
        return venv

    def _setup(self, pool: WorkerPool[Any], source: EnvSource) -> None:
        # Like gymnasium's AsyncVectorEnv: one env built here for spaces and metadata.
        probe = build_environment(source)
        if not isinstance(probe, GymnasiumEnvironment):
            raise TypeError("AioVectorEnv needs gymnasium envs; use a pool for other envs")
        try:
            single = probe.env
            self.metadata = dict(single.metadata)
            self.render_mode = single.render_mode
            self.spec = single.spec
            self.single_observation_space = single.observation_space
            self.single_action_space = single.action_space
        finally:
            probe.close()
        self.num_envs = len(pool)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata["autoreset_mode"] = _MODES[pool.autoreset]
        self._pool = pool
        self._env_obs: list[Any] = [None] * self.num_envs
        self._portal_context = anyio.from_thread.start_blocking_portal(
            "asyncio", backend_options=_loop_options()
        )
        self._portal = self._portal_context.__enter__()
        self._portal.call(pool.__aenter__)

    @property
    def pool(self) -> WorkerPool[Any]:
        return self._pool

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"reset() needs {self.num_envs} seeds, got {len(seeds)}")
        options = dict(options) if options is not None else None
        mask = np.ones(self.num_envs, dtype=np.bool_)
        if options is not None and "reset_mask" in options:
            mask = np.asarray(options.pop("reset_mask"))
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_ or not mask.any():
                raise ValueError(
                    f"options['reset_mask'] must be a bool array of shape ({self.num_envs},) "
                    "with at least one True"
                )
        ids = np.flatnonzero(mask).tolist()
        requests = [
            RESET if seeds[i] is None and options is None else Reset(seeds[i], options) for i in ids
        ]
        states = self._portal.call(self._exchange, ids, requests)
        infos: dict[str, Any] = {}
        for i, step in zip(ids, states, strict=True):
            self._env_obs[i] = step.observation
            infos = self._add_info(infos, step.info, i)
        return self._observations(), infos

    def step(
        self, actions: Any
    ) -> tuple[
        Any, npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.bool_], dict[str, Any]
    ]:
        ids = list(range(self.num_envs))
        states = self._portal.call(self._exchange, ids, list(iterate(self.action_space, actions)))
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}
        for i, step in enumerate(states):
            self._env_obs[i] = step.observation
            rewards[i], terminations[i], truncations[i] = (
                step.reward,
                step.terminated,
                step.truncated,
            )
            if step.final_info is not None:
                final = {"final_obs": step.final_observation, "final_info": step.final_info}
                infos = self._add_info(infos, final, i)
            infos = self._add_info(infos, step.info, i)
        return self._observations(), rewards, terminations, truncations, infos

    async def _exchange(self, ids: list[int], actions: list[Any]) -> list[Any]:
        pool = self._pool
        for worker_id, action in zip(ids, actions, strict=True):
            pool.send_action(action, worker_id)
        batch = await pool.get_batch(min_size=len(ids))
        return batch.sorted().states

    def _observations(self) -> Any:
        out = create_empty_array(self.single_observation_space, self.num_envs)
        return concatenate(self.single_observation_space, self._env_obs, out)  # type: ignore[arg-type]

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return tuple(self._portal.call(functools.partial(self._pool.call, name, *args, **kwargs)))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return tuple(self._portal.call(self._pool.get_attr, name))

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        self._portal.call(self._pool.set_attr, name, values)

    def render(self) -> tuple[Any, ...] | None:
        frames = self.call("render")
        return None if all(frame is None for frame in frames) else frames

    def close_extras(self, **kwargs: Any) -> None:
        portal_context = self.__dict__.pop("_portal_context", None)
        if portal_context is None:
            return
        try:
            self._portal.call(self._pool.aclose)
        finally:
            portal_context.__exit__(None, None, None)


def _loop_options() -> dict[str, Any]:
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: F401

        return {"use_uvloop": True}
    return {}


class GymnasiumFactory:
    """A picklable factory: ``gymnasium.make(env_id, **kwargs)`` then each wrapper."""

    def __init__(
        self,
        env_id: str | gymnasium.envs.registration.EnvSpec,
        kwargs: dict[str, Any],
        wrappers: Sequence[Callable[[gymnasium.Env[Any, Any]], gymnasium.Env[Any, Any]]] = (),
    ) -> None:
        self.env_id = env_id
        self.kwargs = kwargs
        self.wrappers = list(wrappers)
        self.description = env_id if isinstance(env_id, str) else env_id.id

    def __call__(self) -> gymnasium.Env[Any, Any]:
        env = gymnasium.make(self.env_id, **self.kwargs)
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env


def make_vec(
    id: str | gymnasium.envs.registration.EnvSpec,
    num_envs: int = 1,
    vectorization_mode: str | Sequence[str] = "process",
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gymnasium.Env[Any, Any]], gymnasium.Env[Any, Any]]] | None = None,
    **kwargs: Any,
) -> AioVectorEnv:
    """Mirrors ``gymnasium.make_vec``: ``kwargs`` go to ``gymnasium.make``, ``wrappers``
    wrap each env, ``vector_kwargs`` go to :class:`AioVectorEnv` (``autoreset=``, pool
    options), and ``vectorization_mode`` is the worker mode (``"process"``, ``"thread"``,
    ``"sync"`` or one per env)."""
    factory = GymnasiumFactory(id, kwargs, wrappers or ())
    return AioVectorEnv(factory, num_envs, mode=vectorization_mode, **(vector_kwargs or {}))

"""Stable-Baselines3's ``VecEnv`` over aioenv's workers: :class:`AioVecEnv`, a drop-in for
``SubprocVecEnv`` and ``DummyVecEnv`` (``pip install aioenv[sb3]``).

Importing ``aioenv`` does not import this module, Stable-Baselines3 or torch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

from . import _sb3_envs as envs_side
from .core._environment import Step
from .vector._choice import AUTO
from .vector._env import AioVectorEnv

__all__ = ["AioVecEnv"]

#: The autoreset SB3 expects: a done env's step returns its next episode's first
#: observation, the last one in ``info["terminal_observation"]``.
_AUTORESET = "same_step"


class AioVecEnv(VecEnv):
    """A Stable-Baselines3 ``VecEnv`` whose envs step where :class:`~aioenv.AioVectorEnv`
    places them: ``AioVecEnv(env_fns)`` in place of ``SubprocVecEnv(env_fns)`` or
    ``DummyVecEnv(env_fns)``, or ``make_vec_env(..., vec_env_cls=AioVecEnv,
    vec_env_kwargs={...})``.

    ``env_fns`` is a list of functions that build gymnasium envs, one per env;
    ``start_method`` is ``SubprocVecEnv``'s (``"fork"``, ``"forkserver"``, ``"spawn"``),
    the start method of process workers (aioenv's ``context=``; giving it means process
    workers). The keywords are :class:`~aioenv.AioVectorEnv`'s: ``mode`` (default
    ``"auto"``: in the calling thread for cheap envs, else in child processes),
    ``envs_per_worker``, ``step_timeout``, ``restart`` and the other pool options.

    It behaves as SB3's own vec envs: ``seed(s)`` and ``set_options(...)`` take effect at
    the next ``reset()`` (env ``i`` gets ``s + i``), ``reset()`` returns the observations
    (their infos in ``reset_infos``); ``step`` returns float32 rewards, ``dones`` and one
    info dict per env, whose env was reset when done, its last observation in
    ``info["terminal_observation"]`` and ``info["TimeLimit.truncated"]`` saying whether
    it ended by truncation alone. An episode cut short by a failure that aioenv restarted
    the env for ends so too: done, truncated, with its last observation, and aioenv's note
    in ``info["aioenv"]``. ``get_attr``, ``set_attr`` (on each env's outermost wrapper),
    ``env_method``, ``has_attr`` and ``env_is_wrapped`` take ``indices``, negative ones
    too. The vector env behind it is ``.venv``.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gymnasium.Env[Any, Any]]],
        start_method: str | None = None,
        *,
        mode: str | Sequence[str] = AUTO,
        **options: Any,
    ) -> None:
        for taken in ("autoreset", "autoreset_mode"):
            if taken in options:
                raise TypeError(
                    f"AioVecEnv: {taken}= is not an option: SB3 resets a done env in the "
                    "step that ended it, with its last observation in the info"
                )
        if not options.get("copy", True):
            raise TypeError(
                "AioVecEnv: copy=False is not an option: SB3 keeps the observations a step "
                "returns (in its rollout and replay buffers), so each must be its own array"
            )
        if start_method is not None:
            if "context" in options:
                raise TypeError("AioVecEnv: pass start_method= or context=, not both")
            options["context"] = start_method
        factories = [envs_side.EnvFactory(env_fn) for env_fn in env_fns]
        self.venv = AioVectorEnv(factories, mode=mode, autoreset_mode=_AUTORESET, **options)
        # The workers and states of the last step or reset, which the vector env's batches
        # leave here: their infos as the envs gave them (the vector env's are gymnasium's
        # arrays, of numpy types).
        self._kept: list[Any] = []
        self.venv._batches.kept = self._kept
        try:
            if self.venv.num_envs != len(factories):  # PettingZoo parallel envs' agent lanes
                raise TypeError(
                    f"AioVecEnv: its {len(factories)} env factories built "
                    f"{self.venv.num_envs} envs (agent lanes of parallel envs); it takes "
                    "gymnasium envs, one per factory: use aioenv.AioVectorEnv for lanes"
                )
            super().__init__(
                len(factories),
                self.venv.single_observation_space,
                self.venv.single_action_space,
            )
        except BaseException:
            self.venv.close()
            raise

    def __repr__(self) -> str:
        return f"AioVecEnv(num_envs={self.num_envs}, mode={self.venv.mode!r})"

    def reset(self) -> VecEnvObs:
        observations: Any = None
        reset_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        # Envs with the same options are reset together; SB3 passes no options for {}.
        for options, mask in _grouped(self._options, self.num_envs):
            seeds = [seed if mask[env] else None for env, seed in enumerate(self._seeds)]
            if len(mask) != mask.sum():
                options = {**options, "reset_mask": mask}
            observations, _ = self.venv.reset(seed=seeds, options=options or None)
            for env, info in enumerate(self._env_infos()[0]):
                if mask[env]:
                    reset_infos[env] = info
        self.reset_infos = reset_infos
        self._reset_seeds()
        self._reset_options()
        return observations  # type: ignore[no-any-return]

    def step_async(self, actions: np.ndarray) -> None:
        space = self.venv.single_action_space
        if isinstance(actions, list):  # one action per env, as SB3 allows (the step counts)
            actions = concatenate(space, actions, create_empty_array(space, len(actions)))
        self.venv.step_async(actions)

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, terminations, truncations, _ = self.venv.step_wait()
        per_env, finals = self._env_infos()
        dones = np.logical_or(terminations, truncations)
        by_time_limit = np.logical_and(truncations, np.logical_not(terminations)).tolist()
        step_infos: list[dict[str, Any]] = []
        for env, (done, info) in enumerate(zip(dones.tolist(), per_env, strict=True)):
            if done:
                # The step's own info is the ended episode's; the one beside the new
                # observation belongs to the reset.
                self.reset_infos[env] = info
                last, info = finals[env]
                info["terminal_observation"] = last
            info["TimeLimit.truncated"] = by_time_limit[env]
            step_infos.append(info)
        return observations, rewards.astype(np.float32), dones, step_infos

    def close(self) -> None:
        self.venv.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            import warnings

            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is "
                "`rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None] * self.num_envs
        return list(self.venv.call("render"))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._apply(envs_side.get_attr, indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        # SB3 sets the attribute on the outermost wrapper, where get_wrapper_attr finds it
        # first.
        self._apply(setattr, indices, attr_name, value)

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        return self._apply(envs_side.call_method, indices, method_name, method_args, method_kwargs)

    def has_attr(self, attr_name: str) -> bool:
        return all(self._apply(envs_side.has_attr, None, attr_name))

    def env_is_wrapped(
        self,
        wrapper_class: type[gymnasium.Wrapper],
        indices: VecEnvIndices = None,
    ) -> list[bool]:
        return self._apply(envs_side.is_wrapped, indices, wrapper_class)

    def _env_infos(self) -> tuple[list[dict[str, Any]], dict[int, tuple[Any, dict[str, Any]]]]:
        """The info each env gave in the last step or reset, and the last observation and
        info of each env that ended an episode there: copies of the envs' own, as
        DummyVecEnv hands them out (a process worker's batch gives its rows' back so)."""
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        finals: dict[int, tuple[Any, dict[str, Any]]] = {}
        for worker, state in zip(*self._kept, strict=True):
            lo = self.venv._layout.starts[worker]
            if isinstance(state, Step):  # a worker of one env
                own, last = {0: state.info}, {0: state.final_observation}
                ended = {} if state.final_info is None else {0: state.final_info}
            else:
                own, ended, last = state.infos, state.final_infos, state.final_observations
            for row, info in own.items():
                infos[lo + row] = copy.deepcopy(info)
            for row, info in ended.items():
                finals[lo + row] = last[row], copy.deepcopy(info)
        self._kept.clear()  # (the states' observations may be views of shared memory)
        return infos, finals

    def _apply(self, function: Callable[..., Any], indices: VecEnvIndices, *args: Any) -> list[Any]:
        env_ids = None if indices is None else list(self._get_indices(indices))
        if env_ids and len({env % self.num_envs for env in env_ids}) < len(env_ids):
            # An env named twice runs it twice, in order, as in SB3's own vec envs.
            return [self.venv.apply(function, *args, env_ids=[env])[0] for env in env_ids]
        return list(self.venv.apply(function, *args, env_ids=env_ids))


def _grouped(
    options: list[dict[str, Any]], num_envs: int
) -> list[tuple[dict[str, Any], np.ndarray]]:
    """The envs' reset options, each with a mask of the envs it is for (in order)."""
    groups: list[tuple[dict[str, Any], np.ndarray]] = []
    for env, env_options in enumerate(options):
        for known, mask in groups:
            if _same(known, env_options):
                mask[env] = True
                break
        else:
            mask = np.zeros(num_envs, dtype=np.bool_)
            mask[env] = True
            groups.append((env_options, mask))
    return groups


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    try:
        return bool(a == b)
    except Exception:  # values that do not compare (arrays): reset apart
        return a is b

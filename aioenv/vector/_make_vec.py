"""``make_vec``: gymnasium's ``make_vec`` with aioenv's worker modes, and a ``spec`` that
rebuilds the same vector env (``make_vec(envs.spec)``)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
from gymnasium.envs.registration import EnvSpec

from ..core._gymnasium import GymnasiumFactory, resolve_spec
from ..core._registry import shippable
from ._env import AioVectorEnv

__all__ = ["make_vec"]

Wrapper = Callable[[gymnasium.Env[Any, Any]], gymnasium.Env[Any, Any]]
#: gymnasium's own vectorization modes, for specs written by gymnasium.make_vec: here
#: "async" keeps gymnasium's meaning (processes), never the coroutine mode's old spelling.
_GYMNASIUM_MODES = {"async": "process", "sync": "sync"}


def make_vec(
    id: str | EnvSpec,
    num_envs: int = 1,
    vectorization_mode: str | Sequence[str] = "auto",
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Wrapper] | None = None,
    **kwargs: Any,
) -> AioVectorEnv:
    """Mirrors ``gymnasium.make_vec``: ``kwargs`` go to ``gymnasium.make``, ``wrappers``
    wrap each env, ``vector_kwargs`` go to :class:`AioVectorEnv` (``autoreset_mode=``,
    ``observation_mode=``, pool options), and ``vectorization_mode`` is the mode
    (``"auto"``, the default, chooses as :class:`AioVectorEnv` does; ``"inline"``,
    ``"process"``, ``"thread"``, ``"sync"``, ``"coroutine"`` for an env whose
    ``reset``/``step`` are ``async def``, or one per env). ``"async"`` keeps gymnasium's
    meaning, ``"process"``, unlike ``make_pool``'s ``mode``, where it is the old spelling
    of ``"coroutine"``. ``id`` is an id or a spec; the spec is looked up here, so an env
    registered at run time in this process builds in worker processes too. The result's
    ``spec`` records ``num_envs`` and the vector options: ``make_vec(envs.spec)`` rebuilds
    the same vector env."""
    spec = _resolved(id)
    spec_kwargs = dict(spec.kwargs)
    spec.kwargs = {}
    num_envs = spec_kwargs.pop("num_envs", num_envs)
    vectorization_mode = spec_kwargs.pop("vectorization_mode", vectorization_mode)
    vector_kwargs = dict(spec_kwargs.pop("vector_kwargs", vector_kwargs) or {})
    wrappers = spec_kwargs.pop("wrappers", wrappers)
    spec_kwargs.update(kwargs)
    mode: str | list[str] = (
        _GYMNASIUM_MODES.get(vectorization_mode, vectorization_mode)
        if isinstance(vectorization_mode, str)
        else [_GYMNASIUM_MODES.get(one, one) for one in vectorization_mode]
    )
    factory = GymnasiumFactory(spec, dict(spec_kwargs), wrappers or ())
    venv = AioVectorEnv(factory, num_envs, mode=mode, **vector_kwargs)
    recorded = copy.copy(spec)
    recorded.kwargs = dict(spec_kwargs)
    if num_envs != 1:
        recorded.kwargs["num_envs"] = num_envs
    recorded.kwargs["vectorization_mode"] = vectorization_mode
    if vector_kwargs:
        recorded.kwargs["vector_kwargs"] = vector_kwargs
    if wrappers:
        recorded.kwargs["wrappers"] = list(wrappers)
    venv.spec = recorded
    return venv


def _resolved(id: str | EnvSpec) -> EnvSpec:
    if isinstance(id, str):
        return copy.deepcopy(resolve_spec(id))
    if not isinstance(id, EnvSpec):
        raise TypeError(f"make_vec() takes an env id or an EnvSpec, got {type(id).__name__}")
    return shippable(copy.deepcopy(id))

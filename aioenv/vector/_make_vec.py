"""``make_vec``: gymnasium's ``make_vec`` with aioenv's worker modes, and a ``spec`` that
rebuilds the same vector env (``make_vec(envs.spec)``)."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium
from gymnasium.envs.registration import EnvSpec, VectorizeMode, load_env_creator

from ..core._gymnasium import GymnasiumFactory, resolve_spec
from ..core._registry import shippable
from ..pool._factory import check_option_names, option_names
from ._choice import check_mode
from ._env import VECTOR_KEYWORDS, AioVectorEnv

__all__ = ["make_vec"]

Wrapper = Callable[[gymnasium.Env[Any, Any]], gymnasium.Env[Any, Any]]
#: gymnasium's own vectorization modes, for specs written by gymnasium.make_vec: here
#: "async" keeps gymnasium's meaning (processes), never the coroutine mode's old spelling.
_GYMNASIUM_MODES = {"async": "process", "sync": "sync"}
#: What make_vec takes itself, by the name vector_kwargs might give it under instead.
_OWN_PARAMETERS = {"mode": "vectorization_mode", "num_envs": "num_envs"}


def make_vec(
    id: str | EnvSpec,
    num_envs: int = 1,
    vectorization_mode: str | VectorizeMode | Sequence[str] = "auto",
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
    the same vector env. gymnasium's ``VectorizeMode`` members are taken as their values."""
    _check_vector_kwargs(vector_kwargs)
    spec = _resolved(id)
    _check_env_kwargs(spec, kwargs)
    spec_kwargs = dict(spec.kwargs)
    spec.kwargs = {}
    num_envs = spec_kwargs.pop("num_envs", num_envs)
    vectorization_mode = spec_kwargs.pop("vectorization_mode", vectorization_mode)
    if isinstance(vectorization_mode, VectorizeMode):
        vectorization_mode = vectorization_mode.value
    check_mode(
        vectorization_mode,
        "make_vec() got vectorization_mode",
        " or 'async' (gymnasium's name for 'process')",
    )
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


def _check_vector_kwargs(vector_kwargs: Mapping[str, Any] | None) -> None:
    """A clear error for what vector_kwargs cannot take: make_vec's own parameters (which
    it passes to AioVectorEnv itself) and unknown options."""
    for name, parameter in _OWN_PARAMETERS.items():
        if vector_kwargs is not None and name in vector_kwargs:
            raise TypeError(
                f"make_vec() takes {parameter}= itself, and vector_kwargs gave {name}="
                f"{vector_kwargs[name]!r} too: pass {parameter}={vector_kwargs[name]!r} to "
                f"make_vec and leave {name!r} out of vector_kwargs"
            )
    check_option_names(vector_kwargs or (), "make_vec()'s vector_kwargs", VECTOR_KEYWORDS)


def _check_env_kwargs(spec: EnvSpec, kwargs: dict[str, Any]) -> None:
    """make_vec's ``kwargs`` go to the env, as gymnasium's do; an aioenv option among them
    that the env does not take was meant for vector_kwargs: say so, before any env is
    built."""
    for_make = set(inspect.signature(gymnasium.make).parameters)  # max_episode_steps, ...
    meant = {
        name: value
        for name, value in kwargs.items()
        if name in option_names().union(VECTOR_KEYWORDS)
        and name not in for_make
        and not _env_takes(spec, name)
    }
    if meant:
        names = ", ".join(f"{name}=" for name in meant)
        raise TypeError(
            f"make_vec() passes its keyword arguments to the env, as gymnasium.make_vec "
            f"does, and {spec.id} does not take {names}: "
            f"{'that is an aioenv option' if len(meant) == 1 else 'those are aioenv options'}"
            f" of the vector env; pass vector_kwargs={meant!r} instead"
        )


def _env_takes(spec: EnvSpec, name: str) -> bool:
    """Whether the env's constructor (its spec's entry point) takes keyword ``name``;
    True where that cannot be told (the env then says what it takes when built)."""
    entry_point = spec.entry_point
    try:
        creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
        parameters = inspect.signature(creator).parameters.values()  # type: ignore[arg-type]
    except Exception:  # nothing to look at: the env is built as gymnasium builds it
        return True
    return any(
        parameter.kind is inspect.Parameter.VAR_KEYWORD
        or (parameter.name == name and parameter.kind is not inspect.Parameter.POSITIONAL_ONLY)
        for parameter in parameters
    )

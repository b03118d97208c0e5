"""Gymnasium's envs as aioenv's, and building the env a worker runs: the adapter of a
``gymnasium.Env`` to :class:`~aioenv.Environment`, gymnasium ids resolved
to picklable factories in the parent, and whatever the user passed (an id, a factory, an
instance) turned into an environment, or refused with a :class:`NotAnEnvironment` that says
why.

Also coroutine environments: envs whose ``reset``/``step`` are ``async def``. Two shapes are
accepted, and only :class:`~aioenv.AsyncEnvWorker` runs them (:func:`as_async_environment`):

- the :class:`~aioenv.Environment` protocol with ``async def reset(seed=None)`` and
  ``async def step(action)`` returning states, and a plain ``terminated(state)``;
- an *async gymnasium env*: ``observation_space``, ``action_space``,
  ``async def reset(seed=None, options=None) -> (observation, info)`` and
  ``async def step(action) -> (observation, reward, terminated, truncated, info)``, adapted
  to :class:`~aioenv.Step` states by :class:`AsyncGymnasiumEnvironment`.

``close`` may be plain or ``async def``, and so may methods reached through ``pool.call``.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import gymnasium
from gymnasium.envs.registration import EnvSpec, load_env_creator
from gymnasium.spaces import Box
from gymnasium.vector.utils import iterate

from ._agents import AEC_PROBLEM, ParallelEnvironment, is_aec_env, is_parallel_env
from ._environment import EnvAdapter, Environment, EnvSource, Step, describe_source, is_environment
from ._registry import resolve_spec

__all__ = [
    "AsyncGymnasiumEnvironment",
    "GymnasiumEnvironment",
    "GymnasiumFactory",
    "NotAnEnvironment",
    "as_async_environment",
    "as_environment",
    "build_environment",
    "gymnasium_reset",
    "gymnasium_step",
    "is_coroutine_env",
    "is_env_instance",
    "refuse_shared",
    "resolve_source",
    "resolve_spec",
    "split_rows",
]

O = TypeVar("O")


class GymnasiumEnvironment(EnvAdapter, Generic[O]):
    """Adapts a ``gymnasium.Env`` to :class:`Environment` with :class:`Step` states."""

    env: gymnasium.Env[Any, Any]

    @property
    def observation_space(self) -> gymnasium.Space[Any]:
        return self.env.observation_space

    @property
    def action_space(self) -> gymnasium.Space[Any]:
        return self.env.action_space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Step[O]:
        return gymnasium_reset(self.env, self.env.reset(seed=seed, options=options))

    def step(self, action: Any) -> Step[O]:
        return gymnasium_step(self.env, self.env.step(action))

    def close(self) -> None:
        self.env.close()

    def get_attr(self, name: str) -> Any:
        return self.env.get_wrapper_attr(name)

    def set_attr(self, name: str, value: Any) -> None:
        self.env.set_wrapper_attr(name, value)


def gymnasium_step(env: gymnasium.Env[Any, Any], result: Any) -> Step[Any]:
    """The Step of ``env.step``'s ``result``: gymnasium's 5-tuple, or a TypeError that
    says what came instead."""
    if not isinstance(result, tuple) or len(result) != 5:
        raise _refused(
            env, "step", result, "5-tuple (observation, reward, terminated, truncated, info)"
        )
    observation, reward, terminated, truncated, info = result
    return Step(observation, float(reward), bool(terminated), bool(truncated), info)


def gymnasium_reset(env: object, result: Any) -> Step[Any]:
    """The Step of ``env.reset``'s ``result`` (reward 0.0, neither flag set): gymnasium's
    pair, or a TypeError that says what came instead (the old gym API's observation
    alone, say, which a 2-row array would unpack)."""
    if not isinstance(result, tuple) or len(result) != 2:
        raise _refused(env, "reset", result, "pair (observation, info)")
    observation, info = result
    return Step(observation, 0.0, False, False, info)


def _refused(env: object, method: str, result: object, expected: str) -> TypeError:
    """The error for what ``env``'s ``method`` (``"reset"`` or ``"step"``) returned
    instead of gymnasium's ``expected`` result, saying what it was: ``a 3-tuple``, ``a
    dict``."""
    got = f"{len(result)}-tuple" if isinstance(result, tuple) else type(result).__name__
    return TypeError(
        f"{type(env).__name__}.{method}() returned a {got}; aioenv expects gymnasium's {expected}"
    )


def is_coroutine_env(obj: object) -> bool:
    """``obj`` is an env instance whose ``step`` is an ``async def`` (a coroutine env)."""
    return not isinstance(obj, type) and inspect.iscoroutinefunction(getattr(obj, "step", None))


class NotAnEnvironment(TypeError):
    """What a worker was given cannot be its env: ``problem`` says why and what to do.
    Only strings are kept, so the error pickles (it crosses a process worker's pipe)."""

    aioenv_blame = "the env source"  # the caller's: no restart would fix it (see Failure)

    def __init__(self, name: str, problem: str, built_by: str | None = None) -> None:
        super().__init__(name, problem, built_by)
        self.name, self.problem, self.built_by = name, problem, built_by

    def __str__(self) -> str:
        if self.built_by is None:
            return f"got {self.name}, {self.problem}"
        return f"the env factory {self.built_by} built {self.name}, {self.problem}"


#: Why a plain worker refuses a coroutine env, and where it runs.
_COROUTINE_ENV_PROBLEM = (
    "a coroutine env (its step() is async def), which only coroutine workers can await; "
    "pass mode='coroutine' (make_pool, AioVectorEnv, make_vec's vectorization_mode) or "
    "build an AsyncEnvWorker"
)


def as_environment(obj: object) -> Environment[Any, Any]:
    """Wrap a gymnasium env; pass an :class:`Environment` through; reject anything else."""
    if is_coroutine_env(obj):
        raise NotAnEnvironment(type(obj).__name__, _COROUTINE_ENV_PROBLEM)
    if isinstance(obj, gymnasium.Env):
        return GymnasiumEnvironment(obj)
    if is_environment(obj):
        return obj  # type: ignore[return-value]
    if is_parallel_env(obj):
        return ParallelEnvironment(obj)
    if is_aec_env(obj):
        raise NotAnEnvironment(type(obj).__name__, AEC_PROBLEM)
    raise NotAnEnvironment(
        type(obj).__name__,
        "which is neither a gymnasium.Env nor an aioenv.Environment (an object with "
        "reset(seed), step(action) and terminated(state))",
    )


class AsyncGymnasiumEnvironment(EnvAdapter, Generic[O]):
    """Adapts an async gymnasium env (see the module's docstring) to :class:`Step` states."""

    @property
    def observation_space(self) -> Any:
        return getattr(self.env, "observation_space", None)

    @property
    def action_space(self) -> Any:
        return getattr(self.env, "action_space", None)

    async def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Step[O]:
        return gymnasium_reset(self.env, await self.env.reset(seed=seed, options=options))

    async def step(self, action: Any) -> Step[O]:
        return gymnasium_step(self.env, await self.env.step(action))

    async def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result


def as_async_environment(obj: object) -> Environment[Any, Any]:
    """Pass a coroutine :class:`Environment` through, adapt an async gymnasium env, and
    treat anything else as :func:`as_environment` does (a plain env runs on the event loop
    too, blocking it while it steps)."""
    if not is_coroutine_env(obj):
        return as_environment(obj)
    if not inspect.iscoroutinefunction(getattr(obj, "reset", None)):
        raise TypeError(
            f"got {type(obj).__name__}, whose step() is async def but whose reset() is not (or "
            "is missing): make reset() an async def too, as a coroutine env's step and reset are"
        )
    if callable(getattr(obj, "terminated", None)):
        return obj  # type: ignore[return-value]
    return AsyncGymnasiumEnvironment(obj)


def is_env_instance(source: EnvSource) -> bool:
    """``source`` is an env itself, not what builds one: a ``gymnasium.Env``, an
    :class:`Environment` or a coroutine env instance, callable or not (an id or any other
    callable is a factory). Every place that tells the two apart asks this."""
    if isinstance(source, str):
        return False
    return (
        isinstance(source, gymnasium.Env)
        or is_environment(source)
        or is_coroutine_env(source)
        or not callable(source)
    )


def build_environment(
    source: EnvSource, adapt: Callable[[object], Environment[Any, Any]] = as_environment
) -> Environment[Any, Any]:
    """Build the environment a worker runs: ``gymnasium.make`` for an id, a call for a
    factory, the object itself for an instance; ``adapt`` turns it into an environment
    (default :func:`as_environment`)."""
    if isinstance(source, str):
        return adapt(gymnasium.make(source))
    if is_env_instance(source) or not callable(source):  # (the second for the type checker)
        return adapt(source)
    built = source()
    try:
        return adapt(built)
    except NotAnEnvironment as exc:
        raise NotAnEnvironment(exc.name, exc.problem, describe_source(source)) from None


class GymnasiumFactory:
    """A picklable factory: ``gymnasium.make(env_id, **kwargs)`` then each wrapper.
    ``env_id`` is an ``EnvSpec``, resolved in the parent (:func:`resolve_source`'s, or
    ``make_vec``'s); a spec is built without gymnasium's registry, so an env registered
    in the parent at run time builds in a worker process too."""

    def __init__(
        self,
        env_id: EnvSpec,
        kwargs: dict[str, Any],
        wrappers: Sequence[Callable[[gymnasium.Env[Any, Any]], gymnasium.Env[Any, Any]]] = (),
    ) -> None:
        self.env_id = env_id
        self.kwargs = kwargs
        self.wrappers = list(wrappers)
        self.description = env_id.id

    def __call__(self) -> Any:
        """The env: ``gymnasium.make``'s, wrapped; or the PettingZoo parallel env that the
        id's entry point builds, as it is (gymnasium's wrappers and time limit are for
        gymnasium envs: a ValueError if the spec or the factory asks for them)."""
        spec = _parallel_aware(self.env_id)
        try:
            env = gymnasium.make(spec, **self.kwargs)
        except _ParallelBuilt as built:
            return self._parallel(built.args[0])
        if spec is not self.env_id:
            # the env's spec names the registered entry point, not the catcher
            made = env.unwrapped.spec
            if made is not None:
                env.unwrapped.spec = dataclasses.replace(made, entry_point=self.env_id.entry_point)
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env

    def _parallel(self, env: Any) -> Any:
        if self.wrappers or self.env_id.max_episode_steps is not None:
            env.close()
            raise ValueError(
                f"{self.description} builds a PettingZoo parallel env, which gymnasium's "
                "wrappers and max_episode_steps do not wrap: drop them (pass "
                "max_episode_steps= to the vector env instead; in a pool, use the env's own "
                "limit, such as max_cycles)"
            )
        return env


class _ParallelBuilt(Exception):
    """An entry point built a PettingZoo parallel env, its one argument: carried out of
    ``gymnasium.make`` (which refuses anything but a ``gymnasium.Env``) without building
    it twice."""


class _ParallelCatcher:
    """An entry point that hands a parallel env out by raising :class:`_ParallelBuilt`."""

    def __init__(self, creator: Callable[..., Any]) -> None:
        self.creator = creator
        metadata = getattr(creator, "metadata", None)
        if isinstance(metadata, dict):
            self.metadata = metadata  # what gymnasium.make checks render modes against

    def __call__(self, **kwargs: Any) -> Any:
        built = self.creator(**kwargs)
        if is_parallel_env(built):
            raise _ParallelBuilt(built)
        return built


def _parallel_aware(env_id: EnvSpec) -> EnvSpec:
    """``env_id`` with an entry point that lets a parallel env out of ``gymnasium.make``;
    the spec itself where the entry point is a ``gymnasium.Env`` class (the common case:
    nothing changes)."""
    entry = env_id.entry_point
    creator = entry if callable(entry) else load_env_creator(entry) if entry else None
    if creator is None or (isinstance(creator, type) and issubclass(creator, gymnasium.Env)):
        return env_id
    return dataclasses.replace(env_id, entry_point=_ParallelCatcher(creator))


def refuse_shared(sources: Sequence[EnvSource], caller: str, copies: int = 1) -> None:
    """TypeError where an env instance of ``sources`` would be several envs (each source
    built ``copies`` times, and an instance listed more than once), all one object."""
    listed = collections.Counter(map(id, sources))
    for source in sources:
        separate = copies * listed[id(source)]
        if is_env_instance(source) and separate > 1:
            raise TypeError(
                f"{caller} needs a gymnasium id or a zero-argument factory to build "
                f"{separate} separate envs, got an instance of {type(source).__name__}; "
                "pass e.g. `lambda: MyEnv()`"
            )


def resolve_source(source: EnvSource) -> EnvSource:
    """A gymnasium id becomes a factory over its spec, resolved in this process (so an
    unknown id fails here, before any worker starts); anything else is returned as is."""
    if isinstance(source, str):
        return GymnasiumFactory(resolve_spec(source), {})
    return source


#: How gymnasium's ``iterate`` splits the batched array spaces: a plain ``iter``.
_ITERATED_AS_ROWS = iterate.dispatch(Box)


#: Whether ``iterate`` splits a space type as rows, per type asked (its dispatch costs a
#: third of a small batch's split).
_AS_ROWS: dict[type, bool] = {}


def split_rows(space: Any, actions: Any) -> list[Any]:
    """A batch of ``space`` split into one action per env, as gymnasium's ``iterate``
    splits it (for the array spaces ``iterate`` is ``iter``: the same rows, without its
    dispatch)."""
    kind = type(space)
    as_rows = _AS_ROWS.get(kind)
    if as_rows is None:
        as_rows = _AS_ROWS[kind] = iterate.dispatch(kind) is _ITERATED_AS_ROWS
    if as_rows:
        # try/except, not contextlib.suppress: the context manager costs as much as the
        # split of a small batch
        try:
            return list(actions)
        except TypeError:  # not iterable: iterate's error says so
            pass
    return list(iterate(space, actions))

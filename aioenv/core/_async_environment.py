"""Coroutine environments: envs whose ``reset``/``step`` are ``async def``. Two shapes are
accepted, and only :class:`~aioenv.AsyncEnvWorker` runs them:

- the :class:`~aioenv.Environment` protocol with ``async def reset(seed=None)`` and
  ``async def step(action)`` returning states, and a plain ``terminated(state)``;
- an *async gymnasium env*: ``observation_space``, ``action_space``,
  ``async def reset(seed=None, options=None) -> (observation, info)`` and
  ``async def step(action) -> (observation, reward, terminated, truncated, info)``, adapted
  to :class:`~aioenv.Step` states by :class:`AsyncGymnasiumEnvironment`.

``close`` may be plain or ``async def``, and so may methods reached through ``pool.call``.
"""

from __future__ import annotations

import inspect
from typing import Any, Generic, TypeVar

from ._environment import EnvAdapter, Environment, Step
from ._gymnasium import as_environment, describe_result, gymnasium_step, is_coroutine_env

__all__ = ["AsyncGymnasiumEnvironment", "as_async_environment"]

O = TypeVar("O")


class AsyncGymnasiumEnvironment(EnvAdapter, Generic[O]):
    """Adapts an async gymnasium env (see the module) to :class:`Step` states."""

    @property
    def observation_space(self) -> Any:
        return getattr(self.env, "observation_space", None)

    @property
    def action_space(self) -> Any:
        return getattr(self.env, "action_space", None)

    async def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Step[O]:
        result = await self.env.reset(seed=seed, options=options)
        if not isinstance(result, tuple) or len(result) != 2:
            raise TypeError(
                f"{type(self.env).__name__}.reset() returned {describe_result(result)}; aioenv "
                "expects gymnasium's pair (observation, info)"
            )
        observation, info = result
        return Step(observation, 0.0, False, False, info)

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
    treat anything else as :func:`~aioenv.core._gymnasium.as_environment` does (a plain env
    runs on the event loop too, blocking it while it steps)."""
    if not is_coroutine_env(obj):
        return as_environment(obj)
    if not callable(getattr(obj, "reset", None)):
        raise TypeError(f"got {type(obj).__name__!s}, whose step() is async but has no reset()")
    if callable(getattr(obj, "terminated", None)):
        return obj  # type: ignore[return-value]
    return AsyncGymnasiumEnvironment(obj)

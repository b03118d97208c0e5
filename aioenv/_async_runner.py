"""The environment side of :class:`~aioenv.AsyncEnvWorker`: :class:`EnvRunner`'s requests,
answered by awaiting the env's coroutines on the event loop. The bookkeeping (seeds,
autoreset, time limit, episode statistics, failures) is :class:`EnvRunner`'s own: only
the calls into the env are awaited here."""

from __future__ import annotations

import inspect
from typing import Any

from ._async_environment import as_async_environment
from ._messages import ControlRequest, Failure
from ._runner import EnvRunner, answer_control, with_reset
from ._segment import Rollout, play_async
from ._sentinels import RESET, Command, Reset

__all__ = ["AsyncEnvRunner"]


class AsyncEnvRunner(EnvRunner):
    """An :class:`EnvRunner` whose env methods may be coroutine functions. Use the
    ``a``-prefixed methods; an env's plain methods are called as they are."""

    _adapt = staticmethod(as_async_environment)

    async def ahandle(self, action: Any) -> Any:
        """Answer ``RESET``, a ``Reset(...)``, a step or a rollout: the state, or a Failure."""
        if type(action) is Rollout:
            return await play_async(self, action)
        if isinstance(action, Reset):
            state = await self.areset(action.seed, action.options)
        elif isinstance(action, Command) and action is RESET:
            state = await self.areset()
        else:
            state = await self.astep(action)
        self.last = state  # a rollout goes on from here
        return state

    async def areset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        env = self._built()
        if env is None:
            return self.build_failure
        try:
            return await _settled(self._reset(env, seed, options))
        except Exception as exc:
            return Failure.from_exception(exc, "reset")

    async def astep(self, action: Any) -> Any:
        env = self._built()
        if env is None:
            return self.build_failure
        try:
            if self._needs_reset:  # autoreset "next_step": this action is ignored
                return await _settled(self._reset(env, None, None))
            state = env.step(action)
            if inspect.isawaitable(state):
                state = await state
        except Exception as exc:
            return Failure.from_exception(exc, "step")
        try:
            state, reset_now = self._end_of_step(env, state)
            if reset_now:
                state = with_reset(state, await _settled(self._reset(env, None, None)))
            return state
        except Exception as exc:
            return Failure.from_exception(exc, "autoreset")

    async def acontrol(self, request: ControlRequest) -> Any:
        """Answer a control request, awaiting a coroutine method's result."""
        if request.op in ("configure", "policy"):
            return self.control(request)
        env = self._built()
        if env is None:
            return self.build_failure
        try:
            return await _settled(answer_control(env, request))
        except Exception as exc:
            return Failure.from_exception(exc, f"{request.op} {request.name!r}")

    async def aclose(self) -> Failure | None:
        close = getattr(self.env, "close", None)
        self.env = None
        if close is None:
            return None
        try:
            await _settled(close())
        except Exception as exc:
            return Failure.from_exception(exc, "close")
        return None


async def _settled(value: Any) -> Any:
    """``value``, awaited if it is awaitable (an env's method may be plain or async)."""
    if inspect.isawaitable(value):
        return await value
    return value

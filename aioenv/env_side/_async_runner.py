"""The environment side of :class:`~aioenv.AsyncEnvWorker`: :class:`EnvRunner`'s own plans
(seeds, autoreset, time limit, rollouts, failures), driven by awaiting the env's
coroutines on the event loop (:func:`~aioenv.env_side._plan.drive_async`), and one short
cut for the commonest request of an async gymnasium env, a step
(:meth:`AsyncEnvRunner.step_call`)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from ..core._gymnasium import AsyncGymnasiumEnvironment, as_async_environment, gymnasium_step
from ..core._messages import ControlRequest, Failure
from ._plan import drive_async
from ._runner import NOT_ACTIONS, EnvRunner

__all__ = ["AsyncEnvRunner"]


class AsyncEnvRunner(EnvRunner):
    """An :class:`EnvRunner` whose env methods may be coroutine functions. Use the
    ``a``-prefixed methods, whose coroutines are to be awaited; an env's plain methods are
    called as they are.

    They hand out the driver's own coroutine rather than wrap it in one of their own: each
    coroutine between the worker's task and the env is passed through on every resumption
    of the env (thousands of envs on one loop pay that per step)."""

    _adapt = staticmethod(as_async_environment)
    #: The async gymnasium env itself when ``env`` is its adapter (for :meth:`step_call`).
    _async_gym: Any = None

    def build(self) -> Failure | None:
        failure = super().build()
        if type(self.env) is AsyncGymnasiumEnvironment:
            self._async_gym = self.env.env
        return failure

    def ahandle(self, action: Any) -> Coroutine[Any, Any, Any]:
        """Answer ``RESET``, a ``Reset(...)``, a step or a rollout: the state, or a Failure."""
        return drive_async(self.handle_plan(action))

    def acontrol(self, request: ControlRequest) -> Coroutine[Any, Any, Any]:
        """Answer a control request, awaiting a coroutine method's result."""
        return drive_async(self.control_plan(request))

    def aclose(self) -> Coroutine[Any, Any, Failure | None]:
        return drive_async(self.close_plan())

    # The short cut of a step -----------------------------------------------------------
    # A step of an async gymnasium env whose episode goes on without a reset first is
    # most of what thousands of envs on one loop ask: the worker's task awaits the env's
    # own step coroutine (no plan, no driver, no adapter between them, each of which is
    # passed through on every resumption) and hands its result to :meth:`stepped`, which
    # answers it with the bookkeeping of step_plan's own code (_settle, step_raised).

    def step_call(self, request: Any) -> Coroutine[Any, Any, Any] | None:
        """The env's step coroutine for ``request`` where the short cut applies (the
        caller awaits it and hands the result to :meth:`stepped`, or what it raised to
        :meth:`step_raised`), else None: :meth:`ahandle` or :meth:`acontrol` answers."""
        gym = self._async_gym
        if gym is None or self.needs_reset or isinstance(request, NOT_ACTIONS):
            return None
        try:
            return gym.step(request)  # type: ignore[no-any-return]
        except Exception as exc:  # raised before its first await: not a coroutine function
            return _raise(exc)

    def stepped(self, result: Any) -> tuple[Any, Coroutine[Any, Any, Any] | None]:
        """The answer to a step whose env returned ``result``, and None; or the step that
        ended the episode and the coroutine of its autoreset (``same_step``), which
        answers (a driver of step_plan's own autoreset plan)."""
        env = self.env
        assert env is not None
        try:
            state = gymnasium_step(self._async_gym, result)
        except Exception as exc:
            return self.step_raised(exc), None
        state, reset_now = self._settle(env, state)
        if reset_now:
            return state, drive_async(self._autoreset_plan(env, state))
        return state, None


async def _raise(exc: Exception) -> Any:
    raise exc

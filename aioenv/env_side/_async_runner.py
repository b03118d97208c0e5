"""The environment side of :class:`~aioenv.AsyncEnvWorker`: :class:`EnvRunner`'s own plans
(seeds, autoreset, time limit, rollouts, failures), driven by awaiting the env's
coroutines on the event loop (:func:`~aioenv.env_side._plan.drive_async`). Nothing else is here."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from ..core._async_environment import as_async_environment
from ..core._messages import ControlRequest, Failure
from ._plan import drive_async
from ._runner import EnvRunner

__all__ = ["AsyncEnvRunner"]


class AsyncEnvRunner(EnvRunner):
    """An :class:`EnvRunner` whose env methods may be coroutine functions. Use the
    ``a``-prefixed methods, whose coroutines are to be awaited; an env's plain methods are
    called as they are.

    They hand out the driver's own coroutine rather than wrap it in one of their own: each
    coroutine between the worker's task and the env is passed through on every resumption
    of the env (thousands of envs on one loop pay that per step)."""

    _adapt = staticmethod(as_async_environment)

    def ahandle(self, action: Any) -> Coroutine[Any, Any, Any]:
        """Answer ``RESET``, a ``Reset(...)``, a step or a rollout: the state, or a Failure."""
        return drive_async(self.handle_plan(action))

    def acontrol(self, request: ControlRequest) -> Coroutine[Any, Any, Any]:
        """Answer a control request, awaiting a coroutine method's result."""
        return drive_async(self.control_plan(request))

    def aclose(self) -> Coroutine[Any, Any, Failure | None]:
        return drive_async(self.close_plan())

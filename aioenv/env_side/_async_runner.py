"""The environment side of :class:`~aioenv.AsyncEnvWorker`: :class:`EnvRunner`'s own plans
(seeds, autoreset, time limit, rollouts, failures), driven by awaiting the env's
coroutines on the event loop (:func:`~aioenv.env_side._plan.drive_async`). Nothing else is here."""

from __future__ import annotations

from typing import Any

from ..core._async_environment import as_async_environment
from ..core._messages import ControlRequest, Failure
from ._plan import drive_async
from ._runner import EnvRunner

__all__ = ["AsyncEnvRunner"]


class AsyncEnvRunner(EnvRunner):
    """An :class:`EnvRunner` whose env methods may be coroutine functions. Use the
    ``a``-prefixed methods; an env's plain methods are called as they are."""

    _adapt = staticmethod(as_async_environment)

    async def ahandle(self, action: Any) -> Any:
        """Answer ``RESET``, a ``Reset(...)``, a step or a rollout: the state, or a Failure."""
        return await drive_async(self.handle_plan(action))

    async def acontrol(self, request: ControlRequest) -> Any:
        """Answer a control request, awaiting a coroutine method's result."""
        return await drive_async(self.control_plan(request))

    async def aclose(self) -> Failure | None:
        return await drive_async(self.close_plan())

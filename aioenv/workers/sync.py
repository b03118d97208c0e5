"""A worker that runs its env inline, in the caller's thread, when the action is sent."""

from __future__ import annotations

from typing import Any, TypeVar

from .._environment import EnvSource
from .._runner import EnvRunner
from ._base import Worker

__all__ = ["SyncWorker"]

S = TypeVar("S")


class SyncWorker(Worker[S]):
    """Steps the env inside ``send_action``: no concurrency, fully deterministic, easy to
    debug (a breakpoint in the env just works). The env is built at the first action, so a
    construction error is raised by ``get_state`` exactly as for the other kinds."""

    kind = "sync"

    def __init__(
        self, env: EnvSource, *, seed: int | None = None, cleanup_time: float = 5.0
    ) -> None:
        super().__init__(env, seed=seed, cleanup_time=cleanup_time)
        self._runner = EnvRunner(env, seed)

    def _submit(self, seq: int, action: Any) -> None:
        runner = self._runner
        if self.observation_space is None and runner.env is None:
            runner.build()
            self.observation_space, self.action_space = runner.spaces
        result = runner.reset() if self._request_kind(action) else runner.step(action)
        self._on_reply(seq, result)

    def _start_close(self) -> None:
        self._runner.close()

    async def _wait_closed(self, cleanup_time: float) -> None:
        return None

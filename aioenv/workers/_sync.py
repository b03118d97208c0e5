"""A worker that runs its env inline, in the caller's thread, when the action is sent."""

from __future__ import annotations

import time
from typing import Any, TypeVar

from ..core._docs import documented_with
from ..core._environment import VectorSource
from ..core._messages import ControlRequest
from ..core._seeds import GroupSeed
from ..env_side._vector_runner import make_runner
from ._base import Worker

__all__ = ["SyncWorker"]

S = TypeVar("S")


@documented_with(Worker)
class SyncWorker(Worker[S]):
    """Steps the env inside ``send_action``: no concurrency, fully deterministic, easy to
    debug (a breakpoint in the env just works). The env is built at the first action, so a
    construction error is raised by ``get_state`` exactly as for the other kinds.

    A step cannot be interrupted in line: with a ``step_timeout``, a step that took longer
    is treated as timed out once it returns (its state is discarded), as the other kinds
    would have; an env that hangs forever hangs the caller.
    """

    kind = "sync"
    answers_in_line = True

    def _setup(self, seed: int | None) -> None:
        self._spawn(VectorSource.first_seed(self.source, seed))

    def _spawn(self, seed: GroupSeed) -> None:
        self._runner = make_runner(self.source, seed, self._episode)

    def _submit(self, seq: int, action: Any) -> None:
        runner = self._runner
        timeout = self._supervisor.timeout()
        started = time.monotonic()
        try:
            if not runner.built:
                runner.build()
                if self.observation_space is None:
                    self.observation_space, self.action_space = runner.spaces
            result = runner.handle(action)
        except KeyboardInterrupt:
            raise  # Ctrl-C during an inline step is the caller's, not the env's
        except BaseException as exc:  # SystemExit and the like: this env is done
            self._on_env_exit(exc)
            return
        elapsed = time.monotonic() - started
        if timeout is not None and elapsed > timeout:
            self._timed_out(seq, timeout, elapsed)
            return
        self._on_reply(seq, result)

    def _submit_control(self, seq: int, request: ControlRequest) -> None:
        self._on_reply(seq, self._runner.control(request))

    def _start_close(self) -> None:
        self._runner.close()

    async def _wait_closed(self, cleanup_time: float) -> None:
        return None

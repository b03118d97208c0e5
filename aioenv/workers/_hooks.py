"""The hooks a worker kind implements: how it starts an env, sends it requests, drops it
after a failure and closes it. :class:`~aioenv.workers.Worker` does everything else."""

from __future__ import annotations

import abc
import asyncio
from typing import Any

from ..core._messages import ControlRequest
from ..loops._host import CoroutineHost

__all__ = ["KindHooks"]


class KindHooks(abc.ABC):
    """What a worker kind (sync, thread, process, ...) implements. Replies go back through
    ``Worker._on_reply(seq, result)``; a dead env through ``Worker._on_death(error)``.
    Hooks only: every field belongs to :class:`~aioenv.workers.Worker`."""

    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:  # noqa: B027 (optional)
        """Hook: start watching this worker from ``loop``."""

    def _abandon(self) -> None:  # noqa: B027 (optional)
        """Hook: stop at once, without a loop."""

    def _run_coroutines_in(self, host: CoroutineHost) -> None:  # noqa: B027 (optional)
        """Hook: run the env's coroutines through ``host`` rather than on the worker's loop
        (a pool bridged to a trio run); only a kind whose env is a coroutine env has any."""

    @abc.abstractmethod
    def _spawn(self, seed: int | None) -> None:
        """Start a fresh env with ``seed`` for its first reset (at a restart)."""

    @abc.abstractmethod
    def _submit(self, seq: int, action: Any) -> None:
        """Start request ``seq`` (RESET or a step) without blocking."""

    def _submit_control(self, seq: int, request: ControlRequest) -> None:
        """Send control request ``seq`` to the env without blocking: by default as a
        request, which the env answers in order with the others."""
        self._submit(seq, request)

    def _start_delay_cause(self) -> str | None:
        """Hook: why the env may not have started yet, for a start-up timeout's message;
        None: nothing known."""
        return None

    def _discard_env(self, env_gone: bool) -> None:
        """Drop the current env at once; its late replies must never be delivered.
        ``env_gone``: it died or hung (rather than raised), so nothing of it can be kept.
        By default it is asked to close, as at :meth:`_start_close` (sync and thread
        workers: their next env is a new runner, or a new thread)."""
        self._start_close()

    @abc.abstractmethod
    def _start_close(self) -> None:
        """Ask the env to close, without blocking."""

    @abc.abstractmethod
    async def _wait_closed(self, cleanup_time: float) -> None:
        """Wait for the worker to end, forcing it after ``cleanup_time`` seconds."""

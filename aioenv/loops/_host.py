"""What hosts an event loop for synchronous callers, and what hosts a coroutine env's calls
away from its pool's loop.

A :data:`LoopHost` is an asyncio loop that synchronous code hands coroutines to:
:class:`~aioenv.loops._inline.InlineLoop` runs it in the caller's own thread during each
call, :class:`~aioenv.loops._background.BackgroundLoop` in a daemon thread of its own.
:func:`host_for_sync_calls` chooses between them. A :class:`CoroutineHost` is handed to
the coroutine workers of a pool whose coroutine envs run somewhere else than the pool's
loop (under trio, in the trio run: see :mod:`aioenv.loops._trio_bridge`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from ._background import BackgroundLoop
from ._here import loop_running_here
from ._inline import InlineLoop

__all__ = ["CoroutineHost", "LoopHost", "host_for_sync_calls"]

T = TypeVar("T")


#: An event loop that synchronous code runs coroutines on, one of the two hosts. Both have
#: ``running`` (calls can still be made), ``in_loop_thread`` (the caller runs on the loop
#: right now, so a call from it would wait on itself), ``call(function, *args,
#: timeout=None)`` (run ``function(*args)`` on the loop and return its result; if the
#: caller is interrupted, the coroutine is cancelled before the exception goes on) and
#: ``stop(timeout=5.0)``.
LoopHost = InlineLoop | BackgroundLoop


class CoroutineHost(Protocol):
    """Where a coroutine env's calls run when not on its pool's loop."""

    async def run_env_call(self, function: Callable[[], Awaitable[T]]) -> T:
        """Await ``function()`` where the env runs. Cancelled, it cancels it there and
        waits for it to end."""

    def env_error_hint(self, error: BaseException | None) -> str:
        """What to add to the message of the env's ``error`` (an env that called a library
        its host does not run), or nothing."""


def host_for_sync_calls(thread_name: str) -> LoopHost:
    """The loop for a pool driven by synchronous calls (``AioVectorEnv``), chosen where it
    is made. Outside any event loop (a training script), the loop runs in the calling thread
    during each call (:class:`~aioenv.loops._inline.InlineLoop`): a call costs no hand-off
    to another thread and back. Inside a running loop (a notebook, async code, a trio run),
    it runs in a daemon thread named ``thread_name``
    (:class:`~aioenv.loops._background.BackgroundLoop`)."""
    if loop_running_here():
        return BackgroundLoop(thread_name)
    return InlineLoop()

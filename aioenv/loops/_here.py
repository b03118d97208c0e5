"""What runs the calling thread: an asyncio loop, a trio run, or nothing; and what a pool
called there needs. Trio is only looked for here, never imported: its bridge
(:mod:`aioenv.loops._trio_bridge`) is imported once trio is running (trio is optional).

A :class:`CoroutineHost` is handed to the coroutine workers of a pool whose coroutine envs
run somewhere else than the pool's loop (under trio, in the trio run: see
:mod:`aioenv.loops._trio_bridge`)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

__all__ = [
    "CoroutineHost",
    "loop_running_here",
    "not_on_asyncio",
    "raised_in",
    "running_loop",
    "still_here",
    "to_the_end",
    "thread_id",
    "trio_running_here",
]

T = TypeVar("T")

#: The calling thread's id (no system call), for :func:`still_here`.
thread_id = threading.get_ident


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The asyncio loop running in this thread, or None. It asks the system for the
    process id on every call (asyncio's check for a forked child): per-request paths
    use :func:`still_here` instead."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def to_the_end(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even where asyncio itself cancels the calling task
    meanwhile (``Task.cancel``, as ``asyncio.wait_for`` does past its timeout), which
    anyio's shielded scopes do not stop; that cancellation is raised once it has ended.
    It runs in a task of its own, awaited through ``asyncio.shield``, so it is awaited
    on asyncio only (its one caller, :meth:`~aioenv.workers.Worker.aclose`, runs on the
    asyncio loop it has just bound the worker to; under trio, where no asyncio loop runs,
    a shielded scope would be enough, and it would be awaited as it is)."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            cancelled = exc  # (the task's own cancellation ends the loop: raised below)
    if cancelled is not None and not task.cancelled():
        raise cancelled
    return task.result()


def still_here(loop: asyncio.AbstractEventLoop | None, thread: int | None) -> bool:
    """``loop``, found running in thread ``thread`` (by :func:`running_loop`), is still
    the loop running in the calling thread: it runs, and this is its thread (a thread runs
    one loop at a time). The per-request form of ``running_loop() is loop``, with no
    system call; False sends the caller to :func:`running_loop`. (A loop that stopped and
    now runs in another thread would pass for this one: objects bound to a loop are used
    from its thread only.)"""
    return thread == thread_id() and loop is not None and loop.is_running()


def trio_running_here() -> bool:
    """This thread runs trio and no asyncio loop: an aioenv pool must be bridged here (see
    :mod:`aioenv.loops._trio_bridge`). Free when trio was never imported; called off the
    hot path."""
    if running_loop() is not None:
        return False
    trio = sys.modules.get("trio")
    return trio is not None and bool(trio.lowlevel.in_trio_run())


def loop_running_here() -> bool:
    """An event loop runs in this thread right now (asyncio's, or a trio run: a loop run
    inside it would break it)."""
    return running_loop() is not None or trio_running_here()


def not_on_asyncio(what: str) -> RuntimeError:
    """The error for ``what`` called where no asyncio loop runs, saying what to do."""
    if trio_running_here():
        return RuntimeError(
            f"{what} was called under trio on the pool itself; under trio use the object "
            "that `async with pool as bridged:` gives (it runs the pool on a private "
            "asyncio loop), and call its methods"
        )
    return RuntimeError(f"{what} must be called from async code running in an asyncio event loop")


class CoroutineHost(Protocol):
    """Where a coroutine env's calls run when not on its pool's loop."""

    async def run_env_call(self, function: Callable[[], Awaitable[T]]) -> T:
        """Await ``function()`` where the env runs. Cancelled, it cancels it there and
        waits for it to end."""

    def env_error_hint(self, error: BaseException | None) -> str:
        """What to add to the message of the env's ``error`` (an env that called a library
        its host does not run), or nothing."""


def raised_in(library: str, error: BaseException | None) -> bool:
    """``error`` was raised inside ``library`` (trio, asyncio): the env called a library of
    another event loop than the one its coroutines run on."""
    module = sys.modules.get(library)
    if error is None or module is None or module.__file__ is None:
        return False
    package = os.path.dirname(module.__file__)
    return any(
        frame.filename.startswith(package) for frame in traceback.extract_tb(error.__traceback__)
    )

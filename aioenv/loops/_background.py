"""An event loop in a daemon thread, for synchronous code that drives a pool.

The thread is a daemon, so it never holds up interpreter exit; whatever runs on it is
closed by its owner's ``close`` (called by hand, by ``with``, by a finalizer when the owner
is garbage collected, or by an ``atexit`` hook registered after multiprocessing's, so it
runs while worker processes and this loop are still there).

What runs on the loop for a caller in another thread runs in a context of its own (empty),
not in a copy of the caller's, as ``call_soon_threadsafe`` would have it: code on the loop
must not see the caller's context variables. Among them is the one in which ``anyio.run``
and anyio's pytest plugin record the library their run uses (sniffio's
``current_async_library_cvar``), which anyio reads before looking at the running loop: carried
over from a run on trio, it would make anyio's cancel scopes and task groups take this
asyncio loop for trio.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ._choice import new_loop

__all__ = ["BackgroundLoop", "close_at_exit", "within"]

T = TypeVar("T")

_at_exit: dict[int, Callable[[], None]] = {}
_hook_registered = False


def close_at_exit(key: int, close: Callable[[], None] | None) -> None:
    """Call ``close`` at interpreter exit unless it is withdrawn first (``close=None``)."""
    global _hook_registered
    if close is None:
        _at_exit.pop(key, None)
        return
    if not _hook_registered:
        atexit.register(_run_exit_hooks)
        _hook_registered = True
    _at_exit[key] = close


def _run_exit_hooks() -> None:
    while _at_exit:
        _, close = _at_exit.popitem()
        with contextlib.suppress(Exception):
            close()


class BackgroundLoop:
    """An asyncio loop (uvloop where installed) running in a daemon thread named
    ``name``; :meth:`call` runs a coroutine function on it and waits for the result."""

    def __init__(self, name: str) -> None:
        # Made here and run in the thread (a loop may run in another thread than the one
        # that made it, in one thread at a time): it takes calls once this returns.
        self._loop = new_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def post(self, callback: Callable[..., object], *args: Any) -> None:
        """Schedule ``callback(*args)`` on the loop, in a context of its own (see the module
        docstring); from any thread. Raises ``RuntimeError`` once the loop is closed."""
        self._loop.call_soon_threadsafe(callback, *args, context=contextvars.Context())

    @property
    def in_loop_thread(self) -> bool:
        """The caller runs in the loop's thread."""
        return threading.current_thread() is self._thread

    @property
    def running(self) -> bool:
        """The loop runs and takes calls (not stopped)."""
        return self._thread.is_alive() and not self._loop.is_closed()

    def call(
        self,
        function: Callable[..., Coroutine[Any, Any, T]],
        *args: Any,
        timeout: float | None = None,
    ) -> T:
        """Run ``function(*args)`` on the loop and return its result. If the caller is
        interrupted (Ctrl-C), the coroutine is cancelled and waited for to its end before
        the exception goes on (a second interruption stops that wait)."""
        ended: concurrent.futures.Future[asyncio.Task[T]] = concurrent.futures.Future()
        cancel = self.start(function, args, timeout, ended.set_result)
        try:
            return ended.result().result()  # the task's outcome, once it has ended
        except BaseException:
            with contextlib.suppress(BaseException):
                cancel()
                ended.result()
            raise

    def start(
        self,
        function: Callable[..., Coroutine[Any, Any, T]],
        args: tuple[Any, ...],
        timeout: float | None,
        done: Callable[[asyncio.Task[T]], object],
    ) -> Callable[[], None]:
        """Start ``function(*args)`` (cancelled past ``timeout`` seconds, None: no limit)
        as a task on the loop, from any thread; ``done(task)`` is called on the loop once
        it has ended. Returns what cancels the task, from any thread (a ``RuntimeError``
        once the loop is closed). Both calls are posted (see :meth:`post`), so the task is
        started before it is cancelled, and runs in a context of its own."""
        tasks: list[asyncio.Task[T]] = []

        def start() -> None:  # its task copies the context of its own that post gives
            tasks.append(asyncio.ensure_future(within(function, args, timeout)))
            tasks[0].add_done_callback(done)

        self.post(start)
        return lambda: self.post(lambda: tasks and tasks[0].cancel())

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and wait up to ``timeout`` seconds for its thread to end."""
        loop = self._loop
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


async def within(
    function: Callable[..., Coroutine[Any, Any, T]], args: tuple[Any, ...], timeout: float | None
) -> T:
    """``await function(*args)``, cancelled past ``timeout`` seconds (None: no limit)."""
    if timeout is None:
        return await function(*args)
    return await asyncio.wait_for(function(*args), timeout)

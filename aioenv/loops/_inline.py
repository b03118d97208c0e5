"""An event loop that runs in the caller's own thread, only while a call runs; and what a
caller gets, chosen by what runs its thread: the host of a pool driven by synchronous calls
(:func:`host_for_sync_calls`), and the pool itself or, in a trio run, the stand-in that
runs it on a private asyncio loop (:func:`for_this_loop`). The trio bridge imports nothing
of this module, so this module may import the bridge (only once trio runs: trio is
optional) with no import circle.

A synchronous ``AioVectorEnv.step`` on it costs no hand-off to another thread and back
(about 170 µs on uvloop for a blocking-portal round trip): the calling thread runs the
loop until the step's states are in, then the loop rests until the next call. Between
calls nothing is lost: process workers' replies wait in their sockets, thread workers'
in the loop's queue (``call_soon_threadsafe``), timers fire late at the next run.

A thread runs one event loop at a time: a call made while another loop runs in the
calling thread (a vector env made in a script, then closed from async code) runs this
loop in a short-lived helper thread instead, and blocks the caller until it is done.
Code that already runs a loop when it makes the vector env gets a background loop
instead (see :func:`host_for_sync_calls`).

A helper thread per such call, rather than one kept for the loop: the loop then rests in
no thread between calls, as it does otherwise, nothing is left to stop when it closes,
and the call runs in the helper thread's own (empty) context, not the caller's (under
anyio on trio, that context says trio runs the thread: see
:mod:`aioenv.loops._background`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ._background import BackgroundLoop, within
from ._choice import new_loop
from ._here import loop_running_here, trio_running_here

__all__ = ["InlineLoop", "LoopHost", "for_this_loop", "host_for_sync_calls", "in_helper_thread"]

T = TypeVar("T")


class InlineLoop:
    """An event loop that :meth:`call` runs in the calling thread until its result is in."""

    def __init__(self) -> None:
        self._loop = new_loop(started_per_call=True)
        self._ctrl_c = _CTRL_C.opened()  # Ctrl-C taken as asyncio.run takes it

    @property
    def running(self) -> bool:
        """Calls can still be made (not stopped)."""
        return not self._loop.is_closed()

    @property
    def in_loop_thread(self) -> bool:
        """A call is running right now (so another cannot be made from inside it)."""
        return self._loop.is_running()

    def call(
        self,
        function: Callable[..., Coroutine[Any, Any, T]],
        *args: Any,
        timeout: float | None = None,
    ) -> T:
        """Run ``function(*args)`` to completion on the loop, in this thread. If the caller
        is interrupted (Ctrl-C), the coroutine is cancelled and run to its end before the
        exception goes on, so nothing of it is left half done."""
        if loop_running_here():
            call = functools.partial(self.call, function, *args, timeout=timeout)
            return in_helper_thread(call, self._interrupt)
        loop = self._loop
        task = loop.create_task(within(function, args, timeout))
        ctrl_c = _CTRL_C if self._ctrl_c and threading.get_ident() == _CTRL_C.main else None
        if ctrl_c is not None:
            ctrl_c.task, ctrl_c.interrupted = task, False
        try:
            result = loop.run_until_complete(task)
        except BaseException:
            # Run again even if it is done: its end's callback (which stops the loop) may
            # still be due, and would stop the next call's run. Not run_until_complete: it
            # leaves the loop running for ever where the task ended with KeyboardInterrupt.
            task.cancel()
            task.add_done_callback(lambda _: loop.stop())
            with contextlib.suppress(BaseException):
                loop.run_forever()
            if ctrl_c is not None and ctrl_c.interrupted:
                raise KeyboardInterrupt from None
            raise
        finally:
            if ctrl_c is not None:
                ctrl_c.task = None
        if ctrl_c is not None and ctrl_c.interrupted:  # (the call ended as it was cancelled)
            raise KeyboardInterrupt
        return result

    def _interrupt(self, call: concurrent.futures.Future[Any]) -> None:
        """Interrupt ``call``, run on the loop in a helper thread, as Ctrl-C would there."""

        def interrupt() -> None:
            if not call.done():  # (else left from a call that ended first: nothing to do)
                raise KeyboardInterrupt

        self._loop.call_soon_threadsafe(interrupt)

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel whatever is left on the loop and close it."""
        loop = self._loop
        if loop.is_closed() or loop.is_running():
            return
        if self._ctrl_c:
            self._ctrl_c = False
            _CTRL_C.close()
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        with contextlib.suppress(BaseException):
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


class _CtrlC:
    """Ctrl-C in the main thread while a call runs the loop there, taken as ``asyncio.run``
    takes it: the call's task is cancelled, run to its end, and KeyboardInterrupt raised
    once it has ended, rather than raised wherever the loop happens to be, which can leave
    a callback of the loop's unrun and the task waiting for it for ever. Outside a call, and
    a second time within one, it raises KeyboardInterrupt at once, as Python's own handler
    does. Installed in place of Python's own handler only, while an InlineLoop made in the
    main thread is open."""

    def __init__(self) -> None:
        self.main = threading.main_thread().ident
        self.loops = 0  # the open InlineLoops that installed it
        self.task: asyncio.Task[Any] | None = None  # the call running in the main thread
        self.interrupted = False
        self.handler = self.handle  # (one bound method, compared by identity)

    def opened(self) -> bool:
        """Installed (or already), for a new InlineLoop: whether it is."""
        if threading.get_ident() != self.main:
            return False
        current = signal.getsignal(signal.SIGINT)
        if current is signal.default_int_handler:
            signal.signal(signal.SIGINT, self.handler)
        elif current is not self.handler:
            return False  # the user's own handler: left alone
        self.loops += 1
        return True

    def close(self) -> None:
        """An InlineLoop that installed it is closed: the last one puts Python's back."""
        self.loops -= 1
        here = threading.get_ident() == self.main
        if self.loops == 0 and here and signal.getsignal(signal.SIGINT) is self.handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def handle(self, signum: int, frame: Any) -> None:
        task = self.task
        if task is None or self.interrupted or task.done():
            raise KeyboardInterrupt
        self.interrupted = True
        task.cancel()
        task.get_loop().call_soon_threadsafe(lambda: None)  # wake it from its select


_CTRL_C = _CtrlC()


#: An event loop that synchronous code runs coroutines on, one of the two hosts. Both have
#: ``running`` (calls can still be made), ``in_loop_thread`` (the caller runs on the loop
#: right now, so a call from it would wait on itself), ``call(function, *args,
#: timeout=None)`` (run ``function(*args)`` on the loop and return its result; if the
#: caller is interrupted, the coroutine is cancelled before the exception goes on) and
#: ``stop(timeout=5.0)``.
LoopHost = InlineLoop | BackgroundLoop


def host_for_sync_calls(thread_name: str) -> LoopHost:
    """The loop for a pool driven by synchronous calls (``AioVectorEnv``), chosen where it
    is made. Outside any event loop (a training script), the loop runs in the calling thread
    during each call (:class:`InlineLoop`): a call costs no hand-off to another thread and
    back. Inside a running loop (a notebook, async code, a trio run), it runs in a daemon
    thread named ``thread_name`` (:class:`~aioenv.loops._background.BackgroundLoop`)."""
    if loop_running_here():
        return BackgroundLoop(thread_name)
    return InlineLoop()


def for_this_loop(pool: T) -> T:
    """``pool`` itself where an asyncio loop (or none) runs this thread; in a trio run, the
    stand-in that runs it on a private asyncio loop
    (:func:`aioenv.loops._trio_bridge.bridged`), which only then is imported."""
    if not trio_running_here():
        return pool
    from ._trio_bridge import bridged

    return bridged(pool)


def in_helper_thread(
    call: Callable[[], T], interrupt: Callable[[concurrent.futures.Future[Any]], None] | None = None
) -> T:
    """``call()`` in a new thread (which runs no event loop), waited for here. If the
    caller is interrupted (Ctrl-C), ``interrupt`` is given the call's future, to make it
    end, and the call is waited for to its end before the exception goes on."""
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            done.set_result(call())
        except BaseException as exc:  # carried to the caller's thread
            done.set_exception(exc)

    helper = threading.Thread(target=run, name="aioenv-inline-loop-call", daemon=True)
    try:  # done, not the thread, is waited for: an interrupted join takes it for ended
        helper.start()
        done.exception()
    except BaseException:
        with contextlib.suppress(BaseException):  # a second interruption stops the wait
            if interrupt is not None:
                interrupt(done)
                done.exception()
                helper.join()
        raise
    helper.join()
    return done.result()

"""Calls that block (starting a child process, creating or killing a Ray actor) made off
the event loop: a host asked for one on a running loop hands it to a thread here, and
hears of its end through the loop; asked for one anywhere else, it makes it at once."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ..loops._here import running_loop

__all__ = ["OffLoopCalls", "call_soon_threadsafe"]

#: How long :meth:`OffLoopCalls.release` waits for an idle thread to end; it is woken
#: and has nothing left to do, so only a stalled machine would take this long.
_ENDING_WAIT = 5.0


class OffLoopCalls:
    """Runs blocking calls in the order they were asked for, in a thread named
    ``thread_name``, started when there is one to make. Once its calls are made, the thread
    waits for more while someone holds it (:meth:`hold`: a user that may ask again, such as
    an open worker that may be restarted), at most ``linger`` seconds after its last call,
    then ends (so no thread outlives the work); the last :meth:`release` ends an idle one at
    once and returns when it has ended (so no thread outlives its last user). Why wait:
    ``Thread.start`` returns only once the new thread runs, milliseconds on a busy machine,
    during which the event loop that asked for the call stands still; calls that come in a
    burst (the restarts after a fault that hit several workers) or as a run's steady
    trickle share one thread instead."""

    def __init__(self, thread_name: str, linger: float = 1.0) -> None:
        self._thread_name = thread_name
        self._linger = linger
        self._lock = threading.Condition()
        self._queue: collections.deque[tuple[concurrent.futures.Future[Any], Callable[[], Any]]]
        self._queue = collections.deque()
        self._running = False
        self._waiting = False  # the thread runs, waiting for a call
        self._calling = False  # the thread makes a call
        self._holders = 0
        self._thread: threading.Thread | None = None

    @property
    def idle(self) -> bool:
        """A thread runs and waits for a call (none is queued or being made)."""
        return self._waiting

    def hold(self) -> None:
        """One more user may ask for calls: an idle thread waits for them (see above)."""
        with self._lock:
            self._holders += 1

    def release(self) -> None:
        """A user of :meth:`hold` will ask for no more: with none left, an idle thread ends,
        and this returns once it has (one still making a call ends after it)."""
        with self._lock:
            self._holders -= 1
            if self._holders > 0 or self._queue or self._calling:
                return  # still held, or it has calls to make and ends after them
            self._lock.notify_all()
            ending = self._thread
        # It only has to take the lock back and return (microseconds, a few milliseconds
        # on a busy machine): waiting for that is what lets a closed pool say that none
        # of its threads is left.
        if ending is not None and ending is not threading.current_thread():
            ending.join(timeout=_ENDING_WAIT)

    def run(self, call: Callable[[], Any], off_loop: bool = True) -> concurrent.futures.Future[Any]:
        """``call`` handed to the thread (:meth:`submit`) where it is asked for on a running
        event loop, unless not ``off_loop``; else made at once, here, where what it raises
        is raised: its future, then done."""
        if off_loop and running_loop() is not None:
            return self.submit(call)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_result(call())
        return future

    def submit(self, call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._queue.append((future, call))
            if self._running:
                self._lock.notify()  # the thread may be waiting for more
            else:
                self._running = True
                self._thread = threading.Thread(
                    target=self._run, name=self._thread_name, daemon=True
                )
                self._thread.start()
        return future

    def _run(self) -> None:
        while True:
            with self._lock:
                idle_until = time.monotonic() + self._linger  # (once its calls are made)
                while not self._queue:
                    now = time.monotonic()
                    if now >= idle_until or self._holders <= 0:
                        self._running = False
                        return
                    self._waiting = True
                    self._lock.wait(idle_until - now)
                    self._waiting = False
                future, call = self._queue.popleft()
                self._calling = True
            try:
                result = call()
            except BaseException as exc:  # handed to whoever waits for it
                self._call_made()
                future.set_exception(exc)
            else:
                self._call_made()
                future.set_result(result)

    def _call_made(self) -> None:
        # Before its caller hears of it: a caller that then releases the last hold finds
        # the thread done with its calls, and waits for it to end.
        with self._lock:
            self._calling = False


def call_soon_threadsafe(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    """``callback`` on ``loop``, from any thread; nothing if the loop closed meanwhile
    (nobody waits for it then)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)

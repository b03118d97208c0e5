"""Calls that block (starting a child process, creating or killing a Ray actor) made off
the event loop: a host asked for one on a running loop hands it to a thread here, and
hears of its end through the loop; asked for one anywhere else, it makes it at once."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["OffLoopCalls", "call_soon_threadsafe", "on_event_loop"]


class OffLoopCalls:
    """Runs blocking calls in the order they were asked for, in a thread named
    ``thread_name`` started when there is one to make and gone when there is none left
    (so no thread outlives the work)."""

    def __init__(self, thread_name: str) -> None:
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._queue: collections.deque[tuple[concurrent.futures.Future[Any], Callable[[], Any]]]
        self._queue = collections.deque()
        self._running = False

    def submit(self, call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._queue.append((future, call))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name=self._thread_name, daemon=True).start()
        return future

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                future, call = self._queue.popleft()
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to whoever waits for it
                future.set_exception(exc)


def on_event_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_soon_threadsafe(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    """``callback`` on ``loop``, from any thread; nothing if the loop closed meanwhile
    (nobody waits for it then)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)

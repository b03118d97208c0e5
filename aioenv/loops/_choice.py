"""Which event loop aioenv makes: the one rule for uvloop against asyncio's own loop.

uvloop where it is installed (it is not on Windows), for ``aioenv.run`` and for the loops
aioenv runs in threads of its own; asyncio's own loop where uvloop is missing, and for a
loop that is started again for every call in the main thread (see :func:`uvloop_for`).
aioenv pools work on any asyncio loop; uvloop makes them faster.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import ModuleType
from typing import Any, TypeVar

__all__ = ["new_loop", "run", "uvloop_for"]

T = TypeVar("T")


def uvloop_for(*, started_per_call: bool = False) -> ModuleType | None:
    """uvloop, to make a loop in this thread with, or None for asyncio's own loop.

    ``started_per_call``: the loop runs only while a call runs and rests in between (an
    :class:`~aioenv.loops._inline.InlineLoop`). In the main thread uvloop sets up its
    signal wake-up (a socket pair, made and closed) every time it starts running, about
    30 µs per call: more than it saves a lockstep step over asyncio's own loop, which sets
    it up once. A loop run once (``aioenv.run``) or in a thread other than the main one
    sets up nothing per call."""
    if started_per_call and threading.current_thread() is threading.main_thread():
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def new_loop(*, started_per_call: bool = False) -> asyncio.AbstractEventLoop:
    """A new event loop for this thread (or for the thread of aioenv's own that it is
    handed to: see :class:`~aioenv.loops._background.BackgroundLoop`), by
    :func:`uvloop_for`'s rule."""
    uvloop = uvloop_for(started_per_call=started_per_call)
    return asyncio.new_event_loop() if uvloop is None else uvloop.new_event_loop()


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """``asyncio.run(main)`` on uvloop where it is installed (not on Windows), else on the
    default loop. aioenv pools work on any asyncio loop; uvloop makes them faster."""
    uvloop = uvloop_for()
    if uvloop is None:
        return asyncio.run(main, debug=debug)
    return uvloop.run(main, debug=debug)  # type: ignore[no-any-return]

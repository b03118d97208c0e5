"""Running a coroutine on the fastest event loop available."""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["COROUTINE_HOSTS", "for_this_loop", "not_on_asyncio", "run", "trio_running_here"]

T = TypeVar("T")

#: Event loops whose coroutine envs run somewhere else, with what runs them there: the loop
#: of a pool bridged to trio, whose coroutine envs run in the trio run (they may use trio).
#: The host awaits ``function()`` there; cancelled, it cancels it there and waits for it.
COROUTINE_HOSTS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
] = weakref.WeakKeyDictionary()


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """``asyncio.run(main)`` on uvloop where it is installed (not on Windows), else on the
    default loop. aioenv pools work on any asyncio loop; uvloop makes them faster."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main, debug=debug)
    return uvloop.run(main, debug=debug)


def trio_running_here() -> bool:
    """This thread runs trio and no asyncio loop: an aioenv pool must be bridged here (see
    :mod:`aioenv._trio`). Free when trio was never imported; called off the hot path."""
    if asyncio._get_running_loop() is not None:
        return False
    trio = sys.modules.get("trio")
    return trio is not None and bool(trio.lowlevel.in_trio_run())


def for_this_loop(pool: T) -> T:
    """``pool`` itself where an asyncio loop (or none) runs this thread; in a trio run, the
    stand-in that runs it on a private asyncio loop (:func:`aioenv._trio.bridged`), which
    only then is imported (trio is optional)."""
    if not trio_running_here():
        return pool
    from ._trio import bridged

    return bridged(pool)


def not_on_asyncio(what: str) -> RuntimeError:
    """The error for ``what`` called where no asyncio loop runs, saying what to do."""
    if trio_running_here():
        return RuntimeError(
            f"{what} was called under trio on the pool itself; under trio use the object "
            "that `async with pool as bridged:` gives (it runs the pool on a private "
            "asyncio loop), and call its methods"
        )
    return RuntimeError(f"{what} must be called from async code running in an asyncio event loop")

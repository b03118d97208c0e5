"""Which object a pool's caller gets: the pool itself, or, in a trio run, the stand-in that
runs it on a private asyncio loop. Apart from :mod:`aioenv.loops._here` so that what the
bridge imports never imports the bridge back (trio is optional: the bridge is imported
only once trio runs)."""

from __future__ import annotations

from typing import TypeVar

from ._here import trio_running_here

__all__ = ["for_this_loop"]

T = TypeVar("T")


def for_this_loop(pool: T) -> T:
    """``pool`` itself where an asyncio loop (or none) runs this thread; in a trio run, the
    stand-in that runs it on a private asyncio loop
    (:func:`aioenv.loops._trio_bridge.bridged`), which only then is imported."""
    if not trio_running_here():
        return pool
    from ._trio_bridge import bridged

    return bridged(pool)

"""Running a coroutine on the fastest event loop available."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """``asyncio.run(main)`` on uvloop where it is installed (not on Windows), else on the
    default loop. aioenv pools work on any asyncio loop; uvloop makes them faster."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main, debug=debug)
    return uvloop.run(main, debug=debug)

"""Event loops: which one aioenv makes, and what hosts one for code that is not async.

The public name is this re-export (and the same name at ``aioenv``'s top level); the
modules themselves are private: ``_choice`` (the one rule for uvloop against asyncio's own
loop), ``_inline`` and ``_background`` (the two hosts; ``_inline`` also holds
:data:`~aioenv.loops._inline.LoopHost`, either host, and the choice of a host for
synchronous callers and of the object a pool's caller gets: the pool, or its trio
stand-in), ``_here`` (what runs the calling thread, and the host of a coroutine env's calls
away from its pool's loop) and ``_trio_bridge`` (pools under trio; the only module that
imports trio, itself imported only once trio runs).
"""

from ._choice import run

__all__ = ["run"]

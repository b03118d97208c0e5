"""Control requests in flight (call a method, get or set an attribute) and the futures
their answers go to. Answered in order with the steps, by sequence number."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..core._messages import Failure

__all__ = ["PendingControls"]


class PendingControls:
    """The futures of one worker's control requests, by sequence number."""

    def __init__(self) -> None:
        self._futures: dict[int, asyncio.Future[Any]] = {}

    def __contains__(self, seq: int) -> bool:
        return seq in self._futures

    def __len__(self) -> int:
        return len(self._futures)

    def add(self, seq: int, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = loop.create_future()
        self._futures[seq] = future
        return future

    def discard(self, seq: int) -> None:
        self._futures.pop(seq, None)

    def answer(self, seq: int, result: Any, to_error: Callable[[Failure], BaseException]) -> None:
        """Complete request ``seq`` with ``result``, or the error a :class:`Failure` maps to."""
        future = self._futures.pop(seq, None)
        if future is None or future.done():
            return
        if isinstance(result, Failure):
            future.set_exception(to_error(result))
        else:
            future.set_result(result)

    def fail(self, seq: int, error: BaseException) -> None:
        """Complete request ``seq`` with ``error`` (its answer could not be read)."""
        future = self._futures.pop(seq, None)
        if future is not None and not future.done():
            future.set_exception(error)

    def fail_all(self, error: BaseException) -> None:
        futures, self._futures = self._futures, {}
        for future in futures.values():
            if not future.done():
                future.set_exception(error)

"""A worker's requests: their sequence numbers, the one whose reply is awaited, the control
requests answered in order after it (the futures their answers go to), and where the
worker's states go.

A reply is used only while its request is awaited (the step, reset or rollout in flight)
or pending (a control request: call a method, get or set an attribute); any other reply
is stale (a late answer to a request given up on) and is dropped unread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..core._errors import WorkerError
from ..core._messages import Failure
from ._inbox import Inbox, Outcome

__all__ = ["InFlight"]


class InFlight:
    """One worker's requests, numbered from 1, and the inbox its states go to (the
    worker's own, or its pool's once it joins one). The worker owns it; its per-step path
    numbers a request and delivers its state by writing these fields itself, as a call
    per step would cost more than the step's bookkeeping."""

    __slots__ = ("awaited", "controls", "inbox", "next_seq")

    def __init__(self) -> None:
        self.inbox = Inbox(ordered=True)
        #: The request whose reply is still to come; 0: none.
        self.awaited = 0
        #: The futures of the control requests still to be answered, by sequence number.
        self.controls: dict[int, asyncio.Future[Any]] = {}
        #: The number the next request gets.
        self.next_seq = 1

    def begin_control(self, loop: asyncio.AbstractEventLoop) -> tuple[int, asyncio.Future[Any]]:
        """Number a new control request; its answer goes to the future."""
        seq = self.next_seq
        self.next_seq = seq + 1
        future: asyncio.Future[Any] = loop.create_future()
        # Its error counts as seen: a caller cut short drops it, unreported by asyncio's GC.
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self.controls[seq] = future
        return seq, future

    def answer_control(
        self, seq: int, result: Any, to_error: Callable[[Failure], BaseException]
    ) -> None:
        """Complete control request ``seq`` with ``result``, or the error a :class:`Failure`
        maps to."""
        future = self.controls.pop(seq, None)
        if future is None or future.done():
            return
        if isinstance(result, Failure):
            future.set_exception(to_error(result))
        else:
            future.set_result(result)

    def fail_control(self, seq: int, error: BaseException) -> None:
        """Complete control request ``seq`` with ``error`` (its answer could not be read)."""
        future = self.controls.pop(seq, None)
        if future is not None and not future.done():
            future.set_exception(error)

    def fail_controls(self, error: BaseException) -> None:
        """Complete every pending control request with ``error``."""
        futures, self.controls = self.controls, {}
        for future in futures.values():
            if not future.done():
                future.set_exception(error)

    def forget(self, worker_id: int | None) -> None:
        """Await no reply any more: one that comes is stale, and no state is owed."""
        self.awaited = 0
        self.inbox.forgive(worker_id)

    def fail(self, worker_id: int | None, error: WorkerError) -> None:
        """``error`` is raised in place of the awaited request's state, if one is awaited."""
        in_flight, self.awaited = self.awaited, 0
        if in_flight:
            self.inbox.deliver(Outcome(worker_id, None, error))

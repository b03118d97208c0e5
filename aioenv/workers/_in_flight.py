"""A worker's requests: their sequence numbers, the one whose reply is awaited, the control
requests answered in order after it, and where the worker's states go.

A reply is used only while its request is awaited (the step, reset or rollout in flight)
or pending (a control request); any other reply is stale (a late answer to a request
given up on) and is dropped unread."""

from __future__ import annotations

import asyncio
from typing import Any

from ..core._errors import WorkerError
from ._controls import PendingControls
from ._inbox import Inbox, Outcome

__all__ = ["InFlight"]


class InFlight:
    """One worker's requests, numbered from 1, and the address of its states: ``inbox``
    (the worker's own, or its pool's) under ``worker_id``. The worker owns it; both change
    when the worker joins a pool."""

    __slots__ = ("_next_seq", "awaited", "controls", "inbox", "worker_id")

    def __init__(self) -> None:
        self.inbox = Inbox(ordered=True)
        self.worker_id: int | None = None
        #: The request whose reply is still to come; 0: none.
        self.awaited = 0
        self.controls = PendingControls()
        self._next_seq = 1

    def begin(self) -> int:
        """Number a new request (a step, reset or rollout), now awaited: its state is owed."""
        seq = self._next_seq
        self._next_seq = seq + 1
        self.awaited = seq
        self.inbox.owe(self.worker_id)
        return seq

    def begin_control(self, loop: asyncio.AbstractEventLoop) -> tuple[int, asyncio.Future[Any]]:
        """Number a new control request; its answer goes to the future."""
        seq = self._next_seq
        self._next_seq = seq + 1
        return seq, self.controls.add(seq, loop)

    def is_used(self, seq: int) -> bool:
        """A reply to ``seq`` would be used (not stale): worth decoding."""
        return bool(seq) and (seq == self.awaited or seq in self.controls)

    def forget(self) -> None:
        """Await no reply any more: one that comes is stale, and no state is owed."""
        self.awaited = 0
        self.inbox.forgive(self.worker_id)

    def deliver(self, state: Any, borrowed: bool) -> None:
        """The awaited request's state came: hand it to the inbox."""
        self.awaited = 0
        self.inbox.deliver(Outcome(self.worker_id, state, None, borrowed))

    def fail(self, error: WorkerError) -> None:
        """``error`` is raised in place of the awaited request's state, if one is awaited."""
        in_flight, self.awaited = self.awaited, 0
        if in_flight:
            self.inbox.deliver(Outcome(self.worker_id, None, error))

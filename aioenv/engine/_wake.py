"""How one process tells another that its half of a shared buffer is ready, and how the
other waits for it: a counter in the kernel.

A :class:`Wake` counts posts. :meth:`Wake.post` adds one; :meth:`Wake.take` takes every
post made since the last take (none: :class:`BlockingIOError`); :meth:`Wake.wait` takes
them too, waiting first: spinning on :meth:`~Wake.take` while the idle-spin rule says
spinning pays (:class:`~aioenv.env_side._idle_spin.IdleSpin`, the one place of that rule),
then asleep in ``poll(2)`` with the GIL released, until a post, a deadline, or one of the
descriptors it watches becomes readable (a child's ``Process.sentinel``, the other end of
a socket: the other side is gone). Because it counts, several processes can post to one
wake and its waiter learns how many have: a lockstep step waits on one wake for all of
its children's answers.

The counter is an ``eventfd`` where the platform has one. Elsewhere, or with
``AIOENV_ENGINE_WAKE=pipe`` in the environment (how the suite runs the fallback), it is a
pipe whose bytes are the posts. Both are plain descriptors: they pass to a child like any
other (``socket.send_fds``), and a wake is rebuilt there from them
(:meth:`Wake.from_descriptors`).

Memory ordering. Neither side ever reads a flag in shared memory to learn that the other
is done: every hand-off goes through a system call on the counter, spins included (each
poll is a non-blocking ``read``). The kernel takes the eventfd's lock (the pipe's, in the
fallback) in both the ``write`` that posts and the ``read`` that takes the post, and a
lock's release and next acquire order every store made before the release before every
load made after the acquire, on x86_64 and on aarch64 alike (the kernel's locks are
release/acquire on every architecture it runs on). So what the poster wrote into shared
memory before :meth:`~Wake.post` is what the taker reads after :meth:`~Wake.take` or
:meth:`~Wake.wait` returns, with no atomics of our own and nothing compiled. (The one
byte read without a post, a child's mark in the buffer, is read only once a deadline has
passed, to tell a late child from one whose post is on its way: it decides nothing about
data, and a stale read only names a child that was at its deadline anyway; or once the
child has exited, which the parent learns through the kernel too, to tell whether its
post was among those taken.)
"""

from __future__ import annotations

import functools
import math
import os
import select
import time
from collections.abc import Callable, Sequence

from ..env_side._idle_spin import IdleSpin

__all__ = ["WAKE_ENVIRONMENT", "Gone", "Wake", "kernel_counter"]

#: Set to ``pipe`` to make every new wake a pipe (the fallback) where an eventfd exists.
WAKE_ENVIRONMENT = "AIOENV_ENGINE_WAKE"

_READABLE = select.POLLIN | select.POLLHUP | select.POLLERR


def kernel_counter() -> bool:
    """Whether new wakes are eventfds: the platform has them and the fallback is not
    forced."""
    return hasattr(os, "eventfd") and os.environ.get(WAKE_ENVIRONMENT, "") != "pipe"


class Gone(Exception):
    """A descriptor a wait watched became readable before any post came: the side that
    should have posted is gone (exited, or closed its end)."""

    def __init__(self, fd: int) -> None:
        super().__init__(f"descriptor {fd} became readable: the other side is gone")
        self.fd = fd


class Wake:
    """A counter of posts that other processes can share (see the module's docstring).

    ``reader`` and ``writer`` are its descriptors: the same eventfd twice, or a pipe's two
    ends. The wake owns them (:meth:`close`)."""

    def __init__(self, reader: int, writer: int) -> None:
        self._reader, self._writer = reader, writer
        self._eventfd = reader == writer
        self._poll = select.poll()
        self._watched: tuple[int, ...] = ()
        self._poll.register(reader, select.POLLIN)
        #: Add one to the counter, waking a waiter. (The system call itself, bound here:
        #: a post and a take are on every step's path, and binding leaves no Python call
        #: between the caller and the kernel.)
        self.post: Callable[[], object]
        #: Every post since the last take (at least one); :class:`BlockingIOError` if
        #: there is none. A pipe whose every writer closed reads as :class:`Gone`.
        self.take: Callable[[], int]
        if self._eventfd:
            self.post = functools.partial(os.eventfd_write, writer, 1)
            self.take = functools.partial(os.eventfd_read, reader)
        else:
            self.post = functools.partial(os.write, writer, b"\x01")
            self.take = self._take_from_pipe

    @classmethod
    def new(cls) -> Wake:
        """A new wake: an eventfd, or a pipe (see :func:`kernel_counter`)."""
        if kernel_counter():
            fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            return cls(fd, fd)
        reader, writer = os.pipe()
        for fd in (reader, writer):
            os.set_blocking(fd, False)
        return cls(reader, writer)

    @classmethod
    def from_descriptors(cls, descriptors: Sequence[int]) -> Wake:
        """The wake whose :meth:`descriptors` another process sent us (the eventfd, its
        reader and writer alike, or the pipe's two ends)."""
        return cls(descriptors[0], descriptors[-1])

    def descriptors(self) -> tuple[int, ...]:
        """What to send another process for it to post to, and wait on, this wake: the
        eventfd, or the pipe's two ends."""
        return (self._reader,) if self._eventfd else (self._reader, self._writer)

    def _take_from_pipe(self) -> int:
        posts = len(os.read(self._reader, 4096))
        if posts == 0:
            raise Gone(self._reader)
        return posts

    def wait(
        self,
        timeout: float | None = None,
        watch: Sequence[int] = (),
        spin: IdleSpin | None = None,
    ) -> int:
        """Every post since the last take, once there is one: 0 if ``timeout`` seconds
        pass first (None: no deadline). :class:`Gone` if one of the ``watch`` descriptors
        becomes readable first (a post that came in the meantime is taken instead). With
        ``spin``, spins first where its rule says spinning pays."""
        if spin is not None and spin.seconds > 0 and spin.clock() >= spin.spin_after:
            posts = spin.spin(self.take)
            if posts is not None:
                return posts
        deadline = None if timeout is None else time.monotonic() + timeout
        watch = tuple(watch)
        if watch != self._watched:  # (registered until the next wait watches others)
            for fd in self._watched:
                self._poll.unregister(fd)
            for fd in watch:
                self._poll.register(fd, _READABLE)
            self._watched = watch
        while True:
            try:
                return self.take()
            except BlockingIOError:
                pass
            wait_ms = -1 if deadline is None else math.ceil((deadline - time.monotonic()) * 1e3)
            ready = self._poll.poll(max(wait_ms, 0) if deadline is not None else -1)
            if not ready:
                if deadline is not None and time.monotonic() >= deadline:
                    return 0
                continue
            for fd, _ in ready:
                if fd != self._reader:
                    try:  # the answer may have come just before its sender left
                        return self.take()
                    except BlockingIOError:
                        raise Gone(fd) from None

    def close(self) -> None:
        """Close the descriptors (the other processes' copies stay open), once: their
        numbers may be another's by a second call."""
        reader, self._reader = self._reader, -1
        if reader >= 0:
            os.close(reader)
            if not self._eventfd:
                os.close(self._writer)

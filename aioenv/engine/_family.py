"""The engine's children, one by one, on the parent's side: how each starts (its process,
the descriptors of the buffer and the wakes it is sent), how it is woken with a message
and read from, what its death is reported as, and how it ends.

What all of them do together (a step, a reset, a call) is
:class:`~aioenv.engine._children.EngineChildren`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import socket
import time
from collections.abc import Iterable
from typing import Any

from ..core._errors import (
    EnvError,
    WorkerDied,
    WorkerError,
    WorkerRemoved,
    WorkerTimeout,
    env_given_up,
)
from ..core._supervision import Phase, Supervision, timeout_error
from ..env_side._process_group import TERMINATE_GRACE, signal_group
from ..wire._frames import encode_reply
from ._child import ChildPlan, post_with
from ._start import PROCESS_TABLE, ChildStart, Context
from ._wake import Wake

__all__ = ["CHILD_PROGRAM", "Child", "late", "together", "until_due"]

#: The program of an engine child, imported in the child only.
CHILD_PROGRAM = "aioenv.engine._child:serve"


@dataclasses.dataclass
class Child:
    """One child: its name, its process and the parent's ends of its sockets (``start``),
    its request wake and its rows of the buffer; the number of its last request, and when
    that one must be answered (:meth:`handed`)."""

    name: str
    start: ChildStart
    request: Wake
    rows: slice
    seq: int = 0
    phase: Phase = "start-up"
    #: Seconds the last request may take, and by when (``time.monotonic``): None, no deadline.
    timeout: float | None = None
    due: float = math.inf
    #: A new child replaces this one if it dies or hangs (``restart="on_failure"``).
    replaced: bool = False
    #: Its deadline is its env's episode budget's end (``episode_timeout``), not a step's.
    ends_episode: bool = False
    #: No request with a deadline was handed since its start-up's: the next one is
    #: part of its start-up (its envs' first reset, or the request a new child answers).
    starting: bool = True
    #: Readable once the child's process has exited (its process sentinel, once
    #: :meth:`launch` has started it).
    sentinel: int = -1

    def handed(self, options: Supervision, phase: Phase | None) -> None:
        """The child was handed a request of ``phase`` now (None: a control, which has no
        deadline): its deadline by ``options``."""
        self.seq += 1
        if self.starting and phase is not None:
            phase, self.starting = "start-up", phase == "start-up"
        self.phase = phase or self.phase
        self.timeout = None if phase is None else options.deadline(phase)
        self.due = math.inf if self.timeout is None else time.monotonic() + self.timeout
        self.ends_episode = False

    def kill(self, sig: int = signal.SIGKILL, grace: float = TERMINATE_GRACE) -> None:
        """Kill the child now, with whatever its envs started (or send them ``sig``), and
        give it ``grace`` seconds to exit. ``sig`` goes to the child's process group,
        and to the child itself: it leads its group only once its program runs, and it may
        hang before that (loading its plan)."""
        start = self.start
        if start.pid is not None:
            with PROCESS_TABLE:
                if start.process.exitcode is None:
                    start.signal(sig)
                else:  # what its envs started, the child gone
                    signal_group(start.pid, sig)
            start.join(grace)

    def timed_out(self, w: int) -> WorkerTimeout:
        """Kill the child, whose request ran past its deadline, with whatever its envs
        started; the error that says so."""
        self.kill()
        timeout = self.timeout or 0.0
        return timeout_error(
            self.name,
            w,
            self.seq,
            self.phase,
            time.monotonic() - self.due + timeout,
            timeout,
            "its process was killed and its envs are lost"
            + self._unless_replaced(" (restart='on_failure' rebuilds a failed env instead)"),
        )

    @classmethod
    def of(cls, w: int, context: Context, plan: ChildPlan) -> Child:
        """Child ``w``, to serve ``plan``, not started yet (:meth:`launch`)."""
        rows = plan.rows
        name = f"process worker {w} ({_envs(rows)})"
        start = ChildStart(context, name, [plan], CHILD_PROGRAM)
        replaced = plan.restarts is not None and plan.restarts.restart == "on_failure"
        return cls(name, start, Wake.new(), rows, replaced=replaced)

    def launch(self, buffer_fd: int, answer: Wake, options: Supervision) -> None:
        """Start the child and send it the buffer's descriptor, its request wake's and the
        answer wake's. Its envs are being built when this returns: its first message
        says how that went (a child that died before it was sent them: end-of-file, its
        death). Where the start fails, :meth:`end` closes what was made. It is then
        :meth:`handed` its start-up, by ``options``' start-up deadline (where they set
        none, its timeout is None and it is never due: its requests are not timed)."""
        self.start.start()
        self.sentinel = int(self.start.process.sentinel)
        fds = [buffer_fd, *self.request.descriptors(), *answer.descriptors()]
        with contextlib.suppress(ConnectionError):
            socket.send_fds(self.start.socket, [b"\0"], fds)
        self.handed(options, "start-up")

    def exit_error(self, w: int, when: str) -> WorkerDied:
        """What the child's death is reported as: it exited ``when``."""
        exitcode = self.start.join(TERMINATE_GRACE)
        return WorkerDied(
            f"{self.name}: the child process exited with code {exitcode} {when}; "
            "its envs are lost (a segfault, os._exit, or a kill from outside)"
            + self._unless_replaced(),
            worker_id=w,
            exitcode=exitcode,
        )

    def _unless_replaced(self, hint: str = "") -> str:
        """What an error of the child adds once its envs are lost, where no new child
        replaces it: that the vector env cannot go on (and ``hint``)."""
        if self.replaced:
            return ""
        return ". The vector env cannot go on without them: close it and make a new one" + hint

    def removed(self, w: int, died: WorkerError) -> WorkerRemoved:
        """What every call raises once the child died or hung (``died``), as for a pool's
        worker given up on, or gave up on an env (``died.env``, its place in the batch)."""
        env = getattr(died, "env", None)
        envs = _envs(self.rows) if env is None else f"env {self.rows.start + env}"
        return env_given_up(envs, self.name, died, w)

    def post(self, data: bytes) -> None:
        """Wake the child with a message (``data``): one gone already is found so by the
        wait for its answer (its sentinel), not by this send."""
        with contextlib.suppress(ConnectionError):
            post_with(self.start.socket, self.request, data)

    def ask_to_close(self, notes: Any) -> None:
        """Ask the child to close its envs and exit (a message of nothing); a child
        already gone is not asked. ``notes``: the buffer's."""
        with contextlib.suppress(OSError):
            notes[self.rows.start] = 1
            post_with(self.start.socket, self.request, encode_reply(0, None))

    def end(self, grace: float, term_grace: float = TERMINATE_GRACE) -> None:
        """Wait ``grace`` seconds for the child to exit (it was asked to), then terminate
        it (``term_grace`` seconds more; 0: it was sent SIGTERM already) and kill it, and
        whatever its envs started; close what the parent holds of it. Once: a second call
        (the first interrupted by a Ctrl-C) does what is left."""
        if self.start.closed:
            return
        self.start.join(grace)
        for sig, wait in ((signal.SIGTERM, term_grace), (signal.SIGKILL, TERMINATE_GRACE)):
            if self.start.pid is not None and self.start.join(0.0) is None:
                self.kill(sig, wait)
        self.request.close()
        with PROCESS_TABLE:
            self.start.close()  # what the envs left behind too


def _envs(rows: slice) -> str:
    """A child's envs, for messages: ``env 3``, or ``envs 4-7``."""
    last = rows.stop - 1
    return f"env {last}" if rows.start == last else f"envs {rows.start}-{last}"


def until_due(children: Iterable[Child]) -> float | None:
    """Seconds until the first of these children's deadlines (None: they have none)."""
    due = min(child.due for child in children)
    return None if due == math.inf else max(0.0, due - time.monotonic())


def late(children: dict[int, Child], marks: Any) -> list[int]:
    """The ids of these children past their deadlines that have not answered (``marks``:
    the buffer's; one that has is about to post)."""
    now = time.monotonic()
    return [w for w, child in children.items() if child.due <= now and not marks[child.rows.start]]


def together(errors: list[WorkerError]) -> WorkerError:
    """One error for the failures of several children in one step: a child's death or
    another error of aioenv's as it is; else the first env's error, carrying the others
    (as a child's error carries those of its other envs)."""
    for error in errors:
        if not isinstance(error, EnvError):
            return error
    first = errors[0]
    assert isinstance(first, EnvError)
    for other in errors[1:]:
        assert isinstance(other, EnvError)
        first.more.extend([other, *other.more])
        other.more = []
    return first

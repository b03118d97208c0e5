"""The parent's side of a child process: start it, write its requests, read its replies,
watch it exit, and force it out.

A :class:`Host` knows nothing of workers. It is given plain data (the pickled env sources,
seeds, episode options) and, per slot, two callbacks: ``deliver`` for each message the
child writes for that slot, and ``on_exit`` once the child has exited and been reaped. The
parent keeps no thread per child: a ``loop.add_reader`` callback reads replies from a
non-blocking socket, and another watches the process sentinel, so a dead child is seen at
once. How the child is started, signalled, reaped and closed is
:class:`aioenv.engine._start.ChildStart`'s, as for the engine's children.

The child leads a process group of its own, which holds every process its envs start
(:mod:`aioenv.env_side._process_group`): forcing the child out signals the whole group, and
once the child has exited, whatever is left of the group is killed.

Like the workers, this module uses asyncio's own primitives (readers, timers, events):
they are what the hot path needs, and what uvloop speeds up.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import dataclasses
import functools
import signal
import threading
from collections.abc import Callable, Sequence

from ...engine._start import PROCESS_TABLE, ChildStart, Context
from ...env_side._process_group import TERMINATE_GRACE, signal_group
from ...wire._frames import encode
from ...wire._requests import Request
from .._off_loop import OffLoopCalls, call_soon_threadsafe
from .._replaceable import Replaceable, SlotRecipe
from ._host_socket import HostSocket

__all__ = ["CHILD_STARTS", "ChildRecipe", "Deliver", "Host", "OnExit", "describe_exit"]

#: The program of a process worker's child, imported in the child only.
CHILD_PROGRAM = "aioenv.workers.process._child:serve"

#: ``deliver(host, kind, seq, payload)``: a message the child wrote for one slot.
Deliver = Callable[["Host", int, int, "bytes | memoryview"], None]
#: ``on_exit(host)``: the child exited and was reaped.
OnExit = Callable[["Host"], None]

#: The children started and not yet seen to exit: at interpreter exit, before
#: multiprocessing terminates the ones still running (only them: its SIGTERM reaches no
#: process their envs started), each one's process group is killed.
_running: set[int] = set()


#: The process's starts made on an event loop, one at a time, off the loop; the thread
#: waits for the next while a process worker is open (it may be restarted).
CHILD_STARTS = OffLoopCalls("aioenv-process-start")


@atexit.register
def _kill_running_groups() -> None:
    for pid in list(_running):
        signal_group(pid, signal.SIGKILL)


@dataclasses.dataclass(frozen=True)
class ChildRecipe(SlotRecipe):
    """What starts a child (see :class:`SlotRecipe`), kept so that a replacement can be
    started after a death: its multiprocessing ``context``, the env's ``name`` (the
    process is named after it), per slot the ``deliver`` and ``on_exit`` callbacks, and the
    child's ``idle_spin``."""

    context: Context
    name: str
    deliver: Sequence[Deliver]
    on_exit: Sequence[OnExit]
    idle_spin: float


class Host(HostSocket, Replaceable["Host", ChildRecipe]):
    """One child process serving the env slots of ``recipe``; slot ``i``'s messages go to
    ``recipe.deliver[i]``. ``build``: the child builds every env at once (a replacement
    after a death builds each slot only when asked to, see :meth:`replacement`)."""

    def __init__(self, recipe: ChildRecipe, build: bool = True) -> None:
        Replaceable.__init__(self, recipe, build)
        # The child's start: its program and what it is handed (``build``: it builds every
        # env at once).
        handed = [*recipe.slots(), build, recipe.idle_spin]
        child = ChildStart(recipe.context, recipe.name, handed, CHILD_PROGRAM)
        HostSocket.__init__(self, child.socket, child.alive, recipe.deliver)
        #: A signal asked for before the child's process id is known (``child.pid``, once
        #: it has started): under the lock, which the start's thread takes too.
        self._lock = threading.Lock()
        self._doomed = False
        #: Why the child could not be started (set once the start failed).
        self.start_error: BaseException | None = None
        self._sentinel_watched = False
        self._child = child
        #: Set on the event loop once the child has exited and been reaped.
        self.exited: asyncio.Event | None = None
        #: The key of the last policy package sent to this child with its bytes: the
        #: child's own policy cache has it, so later requests carry the key alone.
        self.shipped_policy: str | None = None
        self._force_timer: asyncio.TimerHandle | None = None
        # Last, once every attribute is set: start ``child``, whose start's callback may run
        # at once (so the host is ready). A forkserver start is a round trip to the server
        # (tens of milliseconds, far more under load): made on a running event loop, it
        # runs in a thread, and what is written to the child meanwhile waits in its socket.
        # Other start methods run here, where SIGINT can be ignored while they start (see
        # _start).
        try:
            launch = functools.partial(self._launch, child)
            self._started = CHILD_STARTS.run(launch, child.forkserver)
        except BaseException:
            child.close()
            raise
        self._started.add_done_callback(self._start_done)  # (a start made here: no loop yet)

    def _launch(self, child: ChildStart) -> None:
        """Start the child (in the start's thread, or here); one that was to be killed
        before it started is killed now, whether or not an event loop still runs."""
        child.start()
        assert child.pid is not None  # it has started
        _running.add(child.pid)
        with self._lock:
            doomed = self._doomed
        if doomed:
            self._signal(signal.SIGKILL)

    @property
    def pid(self) -> int:
        """The child's process id (waits for its start if that is under way)."""
        concurrent.futures.wait([self._started])
        if self._child.pid is None:
            raise RuntimeError(f"the process could not be started ({self._started.exception()!r})")
        return self._child.pid

    @property
    def label(self) -> str:
        """The child, for messages, without waiting for its start: ``pid 123``."""
        if self._child.pid is not None:
            return f"pid {self._child.pid}"
        return "process starting" if self.start_error is None else "process not started"

    def _start_done(self, _: object) -> None:
        """In the start's thread, once it is done: tell the loop that watches this host.
        Not the loop the host was made on: a vector env made in a running loop builds its
        workers there and drives them from a loop of its own, in another thread, and the
        loop it was made on may not run again before the child is closed. None watches
        yet: :meth:`watch` finds the start done."""
        loop = self._loop
        if loop is not None:
            call_soon_threadsafe(loop, self._on_started)

    def _on_started(self) -> None:
        """On the loop that watches this host, once the start is done: watch the child's
        exit, or report that it could not be started as its exit. Called once or twice
        (the start's callback and :meth:`watch` may both see it done)."""
        if self.exitcode is not None:
            return  # reaped without a loop meanwhile (kill_now), or reported already
        error = self._started.exception()
        if error is not None:
            self.start_error = error
            self._exited(-1)  # its reading stops there
        elif self._loop is not None and not self._loop.is_closed() and not self._sentinel_watched:
            self._sentinel_watched = True
            self._loop.add_reader(self._child.process.sentinel, self._on_sentinel)

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start reading replies (the socket's, and the lanes' in use) and watching for the
        exit from ``loop`` (once; again from a later loop once the first is closed)."""
        previous = self._loop
        if previous is not None and previous is not loop and previous.is_closed():
            # A later event loop takes over; the closed one took its readers and timers.
            self._loop, self._reading, self._force_timer = None, False, None
        if self._loop is not None or self.exitcode is not None:
            return
        self._loop = loop
        self.exited = asyncio.Event()
        loop.add_reader(self._socket.fileno(), self._on_readable)
        self._reading = True
        self.watch_lanes(loop)  # (the first loop has none yet)
        self._sentinel_watched = False
        if self._started.done():
            loop.call_soon(self._on_started)  # a failed start is reported as a death is

    # Ending ----------------------------------------------------------------------------
    def release(self, slot: int, cleanup_time: float) -> None:
        """The env in ``slot`` is done: close it; the last one closes the process, which is
        forced out if it does not exit within ``cleanup_time`` seconds."""
        self._open_slots.discard(slot)
        self._close_lanes(slot)
        if self._open_slots:
            self.send(encode(Request.CLOSE_SLOT, 0, b"", slot))
            return
        self.send(encode(Request.CLOSE, 0))  # after what this loop iteration queued, if any
        self._flush()  # now, not at the iteration's end
        if self.exitcode is None and self._loop is not None:
            self._force_timer = self._loop.call_later(cleanup_time, self.force, "terminate")

    def force(self, how: str) -> None:
        """``"terminate"`` (SIGTERM, then SIGKILL after a grace period) or ``"kill"``, to
        the child and every process its envs started."""
        if self.exitcode is not None:
            return
        if how == "terminate":
            self._signal(signal.SIGTERM)
            assert self._loop is not None
            self._force_timer = self._loop.call_later(TERMINATE_GRACE, self.force, "kill")
        elif how == "kill":
            self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        """``sig`` to the child's process group, and to the child itself (which may not
        lead its group yet, or ever)."""
        with self._lock:
            if self._child.pid is None:
                self._doomed = True  # killed as soon as it has started
                return
        self._child.signal(sig)

    def kill(self, slot: int, reason: str) -> None:
        """Kill the child at once because the env in ``slot`` failed (``reason`` says
        how, for the other slots' messages, unless it had exited already); it is reaped in
        the background."""
        if self.killed_for is None and self.exitcode is None:
            self.killed_for = (slot, reason)
        self._stop_reading()
        self._close_lanes()
        self.force("kill")

    def kill_now(self) -> None:
        """Kill and reap without a loop (a pool that failed to be built)."""
        if self.exitcode is None and self._loop is None:
            self._signal(signal.SIGKILL)  # or, while it starts, once it has started
            concurrent.futures.wait([self._started])
            with PROCESS_TABLE:
                exitcode = self._child.join(None)
                self.exitcode = exitcode if exitcode is not None else -1  # -1: never started
                self._close_resources()

    def _on_sentinel(self) -> None:
        assert self._loop is not None
        self._loop.remove_reader(self._child.process.sentinel)
        if self._reading:
            self._on_readable()  # replies the child wrote before it exited come first
        self._reap(attempt=0)

    def _reap(self, attempt: int) -> None:
        assert self._loop is not None
        if not PROCESS_TABLE.acquire(blocking=False):  # a start in another thread holds it
            self._loop.call_later(0.001, self._reap, attempt)
            return
        try:
            exitcode = self._child.process.exitcode
            if exitcode is None and attempt < 100:
                # The sentinel fires as the child exits; under fork/spawn the exit status
                # may lag by a moment. (Under forkserver it is already known.)
                self._loop.call_later(0.001 * (attempt + 1), self._reap, attempt + 1)
                return
            self._exited(exitcode if exitcode is not None else -1)  # closes the process
        finally:
            PROCESS_TABLE.release()

    def _exited(self, exitcode: int) -> None:
        self.exitcode = exitcode
        self._close_resources()
        if self.exited is not None:
            self.exited.set()
        for on_exit in self._recipe.on_exit:
            on_exit(self)

    def _close_resources(self) -> None:
        if self._child.pid is not None:
            _running.discard(self._child.pid)
        self._stop_reading()
        self._close_lanes()
        if self._force_timer is not None:
            self._force_timer.cancel()
        self.writes.drop()
        self.queued.clear()
        self._posts.clear()
        # What the envs started and the child did not end (it was killed, or crashed),
        # and the socket, the alarm and the process object (a start that failed half-way).
        self._child.close()


def describe_exit(exitcode: int | None) -> str:
    """An exit code for messages: ``-9 (killed by SIGKILL)``."""
    if exitcode is None:
        return "unknown"
    if exitcode < 0:
        try:
            return f"{exitcode} (killed by {signal.Signals(-exitcode).name})"
        except ValueError:
            pass
    return str(exitcode)

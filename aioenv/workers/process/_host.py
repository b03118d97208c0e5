"""The parent's side of a child process: start it, write its requests, read its replies,
watch it exit, and force it out.

A :class:`Host` knows nothing of workers. It is given plain data (the pickled env sources,
seeds, episode options) and, per slot, two callbacks: ``deliver`` for each message the
child writes for that slot, and ``on_exit`` once the child has exited and been reaped. The
parent keeps no thread per child: a ``loop.add_reader`` callback reads replies from a
non-blocking socket, and another watches the process sentinel, so a dead child is seen at
once. Frames are written as they are sent (several envs' frames of one loop iteration
together, and what the socket does not take now when it is writable:
:class:`~aioenv.workers.process._host_socket.SocketWrites`) and read as they come, each
handed to its slot's ``deliver``. How the child is started, signalled, reaped and closed is
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
import signal
import socket
from collections.abc import Callable, Sequence

from ...engine._lane import Lane
from ...engine._start import PROCESS_TABLE, ChildStart, Context
from ...env_side._process_group import TERMINATE_GRACE, signal_group
from ...wire._frames import RECEIVE_SIZE, FrameDecoder, encode
from ...wire._pickles import dumps
from ...wire._requests import Request
from .._off_loop import OffLoopCalls
from .._replaceable import Replaceable, SlotRecipe
from ._host_socket import SocketWrites

__all__ = ["CHILD_STARTS", "ChildRecipe", "Deliver", "Host", "OnExit"]

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


class Host(Replaceable["Host", ChildRecipe]):
    """One child process serving the env slots of ``recipe``; slot ``i``'s messages go to
    ``recipe.deliver[i]`` (``size``: how many slots). ``build``: the child builds every env
    at once (a replacement after a death builds each slot only when asked to, see
    :meth:`replacement`).

    The host writes and reads the parent's end of its child's socket of requests and
    replies (made non-blocking), and holds the child's alive socket
    (:attr:`ChildStart.alive <aioenv.engine._start.ChildStart.alive>`) open, never
    written, over which lanes' descriptors travel."""

    def __init__(self, recipe: ChildRecipe, build: bool = True) -> None:
        Replaceable.__init__(self, recipe, build)
        # The child's start: its program and what it is handed (``build``: it builds every
        # env at once).
        handed = [*recipe.slots(), build, recipe.idle_spin]
        child = ChildStart(recipe.context, recipe.name, handed, CHILD_PROGRAM)
        child.socket.setblocking(False)
        self.exitcode: int | None = None
        #: The slot whose failure killed the child, and why, for the others' messages.
        self.killed_for: tuple[int, str] | None = None
        self.writes = SocketWrites(child.socket)
        #: Frames sent in this loop iteration, written together at its end (several envs).
        self.queued: list[bytes] = []
        #: The lanes whose steps were written in this loop iteration, posted at its end.
        self._posts: list[Lane] = []
        #: The lane each slot's steps take (:mod:`aioenv.engine._lane`), once the child has
        #: mapped it; those offered and not answered yet.
        self.lanes: dict[int, Lane] = {}
        self._offered: dict[int, Lane] = {}
        #: What each slot's lane in use calls when its answer wake may have a post (see
        #: :meth:`lane_answered`), for a later event loop to watch it too (:meth:`watch`).
        self._on_answer: dict[int, Callable[[Lane], None]] = {}
        self._reading = False
        self._receive_buffer, self._decoder = bytearray(RECEIVE_SIZE), FrameDecoder()
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
            self._started = CHILD_STARTS.run(self._launch, child.forkserver)
        except BaseException:
            child.close()
            raise
        self._started.add_done_callback(self._start_done)  # (a start made here: no loop yet)

    def _launch(self) -> None:
        """Start the child (in the start's thread, or here); one that was to be killed
        before it started is killed now, whether or not an event loop still runs (see
        :meth:`ChildStart.signal <aioenv.engine._start.ChildStart.signal>`)."""
        self._child.start()
        assert self._child.pid is not None  # it has started
        _running.add(self._child.pid)

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

    def _on_started(self) -> None:
        """On the loop that watches this host, once the start is done: watch the child's
        exit, or report that it could not be started as its exit. Called once or twice
        (the start's callback, :meth:`~aioenv.workers._replaceable.Replaceable._start_done`,
        and :meth:`watch` may both see it done)."""
        if self.exitcode is not None:
            return  # reaped without a loop meanwhile (kill), or reported already
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
        loop.add_reader(self._child.socket.fileno(), self._on_readable)
        self._reading = True
        # The answer wakes of the lanes in use, where a later event loop takes over once the
        # one that watched them is closed (it took their readers; the first loop has none).
        for slot, lane in self.lanes.items():
            loop.add_reader(lane.answer_fd, self._on_answer[slot], lane)
        self._sentinel_watched = False
        if self._started.done():
            loop.call_soon(self._on_started)  # a failed start is reported as a death is

    @property
    def alive(self) -> bool:
        """Running and not being killed."""
        return self.exitcode is None and self.killed_for is None

    # Writing -------------------------------------------------------------------------
    def send(self, frame: bytes) -> None:
        """Send now, or (several envs here) at the end of this loop iteration, together
        with every other frame for this host sent meanwhile."""
        if self.exitcode is not None or self.killed_for is not None:  # not self.alive, inlined
            return  # gone, or going: its death is (or was) handled elsewhere
        if self.size == 1 or self._loop is None:
            self.writes.write(frame, self._loop)
            return
        if not self.queued:
            self._loop.call_soon(self._flush)
        self.queued.append(frame)

    def post_soon(self, lane: Lane) -> None:
        """Post ``lane``'s step (written, not posted) at the end of this loop iteration,
        before the frames sent meanwhile: a child of several envs is woken once for the
        steps its envs are sent together, as it is for their frames, not once for each
        (with more children than cores, each wake may preempt the parent mid-batch)."""
        if not self.queued and not self._posts:
            assert self._loop is not None
            self._loop.call_soon(self._flush)
        self._posts.append(lane)

    # The lanes --------------------------------------------------------------------------
    def has_lane(self, slot: int) -> bool:
        """A lane is in use for ``slot``, or offered."""
        return slot in self.lanes or slot in self._offered

    def offer_lane(self, lane: Lane, slot: int) -> None:
        """Send ``lane`` for ``slot`` to the child (its descriptors, then its offer); the
        child's answer comes as a LANE_ANSWER frame (:meth:`lane_answered`)."""
        if self.has_lane(slot) or not self.alive:
            lane.close()
            return
        try:
            # A copy of each, one byte with it: it arrives before any message sent on the
            # message socket after this (OSError: the child is gone).
            for fd in lane.descriptors():
                socket.send_fds(self._child.alive, [b"\0"], [fd])
        except OSError:
            lane.close()
            return
        self._offered[slot] = lane
        self.send(encode(Request.LANE, 0, dumps(lane.offer()), slot))

    def lane_answered(self, slot: int, in_use: bool, on_answer: Callable[[Lane], None]) -> None:
        """The child's answer to the lane offered for ``slot``: in use (``on_answer(lane)``
        is called from the loop whenever the lane's answer wake may have a post, until the
        lane is closed: when the slot is released, or the child is killed or has exited),
        or closed."""
        lane = self._offered.pop(slot, None)
        if lane is None or not in_use or self._loop is None or not self.alive:
            if lane is not None:
                lane.close()
            return
        self.lanes[slot], self._on_answer[slot] = lane, on_answer
        self._loop.add_reader(lane.answer_fd, on_answer, lane)

    def _close_lanes(self, *slots: int) -> None:
        """Close the lanes of ``slots`` (all: every slot's), in use or offered."""
        for slot in slots or [*self.lanes, *self._offered]:
            lane = self.lanes.pop(slot, None)
            if lane in self._posts:
                self._posts.remove(lane)  # (its step goes with it)
            if lane is not None and self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(lane.answer_fd)
            offered = self._offered.pop(slot, None)
            for each in (lane, offered):
                if each is not None:
                    each.close()

    def _flush(self) -> None:
        # The posts first: a frame queued after a step was written is a later request.
        posts, self._posts = self._posts, []
        for lane in posts:
            lane.request.post()
        frames, self.queued = self.queued, []
        if frames and self.alive:
            self.writes.write(b"".join(frames), self._loop)

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
            self._child.signal(signal.SIGTERM)
            assert self._loop is not None
            self._force_timer = self._loop.call_later(TERMINATE_GRACE, self.force, "kill")
        elif how == "kill":
            self._child.signal(signal.SIGKILL)

    def kill(self, slot: int, reason: str) -> None:
        """Kill the child at once because the env in ``slot`` failed, or its worker was
        abandoned (``reason`` says how, for the other slots' messages, unless it had exited
        already); it is reaped in the background, or here where no loop watches it (a pool
        that failed to be built: its workers were never bound to a loop)."""
        if self.killed_for is None and self.exitcode is None:
            self.killed_for = (slot, reason)
        self._stop_reading()
        self._close_lanes()
        self.force("kill")  # or, while it starts, once it has started
        if self.exitcode is None and self._loop is None:
            concurrent.futures.wait([self._started])
            with PROCESS_TABLE:
                exitcode = self._child.join(None)
                self.exitcode = exitcode if exitcode is not None else -1  # -1: never started
                self._close_resources()

    # Reading -------------------------------------------------------------------------
    def _on_readable(self) -> None:
        buffer = self._receive_buffer
        view = memoryview(buffer)
        deliver = self._recipe.deliver
        while self._reading:
            try:
                count = self._child.socket.recv_into(buffer)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                count = 0
            if count == 0:
                self._stop_reading()  # end of file: the sentinel reports the exit
                return
            for kind, seq, slot, payload in self._decoder.feed(view[:count]):
                deliver[slot](self, kind, seq, payload)
            if count < len(buffer):
                return

    def _stop_reading(self) -> None:
        if self._reading and self._loop is not None:
            self._reading = False
            self._loop.remove_reader(self._child.socket.fileno())

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

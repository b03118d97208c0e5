"""Every process an env starts ends with the child process that serves the env.

A child process that serves envs leads a process group of its own (:func:`lead_own_group`,
first thing it does), and every process its envs start joins that group and stays in it,
grandchildren included, unless it leaves on purpose (``setsid``, ``setpgid``,
``subprocess.Popen(start_new_session=True)`` or ``process_group=``, a container started
through a daemon). So the group is what the env started:

- the child ends what is left of it once its envs are closed (:func:`end_own_group`:
  SIGTERM, SIGKILL after a grace period), and when it notices that the parent is gone
  (:func:`exit_with_own_group`: the same, then the whole group with the child in it, so
  that an env that starts a process meanwhile cannot leave it behind);
- the parent signals the whole group when it kills or terminates the child, and kills
  what is left of it once the child has exited (:func:`signal_group`), which covers a
  child that was killed or crashed before it could end the group itself;
- the group's keeper (:func:`keep_own_group`), a process outside the group that the child
  starts first, ends what is left once the child is gone without ending it, which covers
  a child that crashed just before its parent was killed too.

Why a group and not a child subreaper (``PR_SET_CHILD_SUBREAPER``): a subreaper would also
adopt the orphans of helpers that daemonize, but it must then reap them, and it cannot tell
them from the env's own children, whose exit statuses belong to the env's ``Popen``
objects; unreaped, they pile up as zombies over a long run. The group needs neither, and
it holds when the child is killed with SIGKILL, where a subreaper's orphans go to init.

A group is never signalled unless it is a child's own: a child that could not lead one
(``setpgid`` failed) ends nothing but itself, and the parent never signals its own group.

Both sides use this module; it imports nothing of aioenv.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

__all__ = [
    "TERMINATE_GRACE",
    "begin_serving",
    "end_own_group",
    "exit_with_own_group",
    "exit_with_own_group_when_gone",
    "keep_own_group",
    "lead_own_group",
    "signal_group",
    "signal_ignored",
]

#: Seconds between SIGTERM and SIGKILL, for a child and for what its envs started.
TERMINATE_GRACE = 1.0
_POLL = 0.01  # seconds between two looks at the group while it ends


def lead_own_group() -> bool:
    """Make this process the leader of a new process group (in a child, before it builds
    any env). False if it could not: it then stays in its parent's group, and
    :func:`end_own_group` does nothing."""
    try:
        os.setpgid(0, 0)
    except OSError:
        return False
    return os.getpgrp() == os.getpid()


def end_own_group(grace: float = TERMINATE_GRACE) -> None:
    """End every other process in this process's group: SIGTERM, then SIGKILL to those
    still running after ``grace`` seconds (on a system without ``/proc``, SIGTERM only:
    the parent kills what is left once this process has exited). Only a group this process
    leads: never its parent's. This process leaves the group first (it is on its way out),
    so that a group with nobody left, the common case, costs a few system calls; threads
    that call this together end the group once."""
    with _ending:
        group = os.getpgrp()
        if group != os.getpid():
            return
        try:
            if not _leave(group) or _exists(group):
                _end(group, grace)
        finally:
            # Only now: should this process die meanwhile (an env's thread crashes it),
            # the keeper ends what it had not.
            _dismiss_keeper()


def exit_with_own_group(status: int, grace: float = TERMINATE_GRACE) -> NoReturn:
    """End this process and every other process in its group, from a thread that found
    the parent gone while another thread may still be starting processes (an env being
    built or stepped). :func:`end_own_group` leaves the group first, and whatever another
    thread started after that would be outside it, and outlive everything. Here this
    process stays in the group: SIGTERM, SIGKILL after ``grace`` seconds to those still
    running, then SIGKILL to the whole group, this process with it. A group signal reaches
    a process forked meanwhile as well (the kernel restarts a fork that one crosses), so
    nothing started by then is left. A process that leads no group exits with ``status``."""
    with _ending:
        group = os.getpgrp()
        if group == os.getpid():
            _end(group, grace)
            _dismiss_keeper()  # only now (see end_own_group): the group goes whole next
            os.killpg(group, signal.SIGKILL)
    os._exit(status)


def begin_serving(alive: socket.socket, keep: Callable[[int], None] = os.close) -> None:
    """What a child process that serves envs does first, before it builds any: lead a
    group of its own (:func:`lead_own_group`) with its keeper (:func:`keep_own_group`),
    leave Ctrl-C to the parent (which decides when this child stops), and start the
    thread that notices the parent's end (:func:`exit_with_own_group_when_gone`: the
    child's loop notices it between requests, but an env that holds the main thread, a
    step that hangs, would keep this process and its group alive without it).
    ``keep``: what takes each descriptor the parent sends on ``alive``."""
    lead_own_group()
    keep_own_group()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=exit_with_own_group_when_gone, args=(alive, keep), daemon=True).start()


def exit_with_own_group_when_gone(
    alive: socket.socket, keep: Callable[[int], None] = os.close
) -> NoReturn:
    """Wait until the parent's end of ``alive`` closes (the parent is gone: nothing is
    ever sent on it but descriptors, one byte with each, which go to ``keep`` in order,
    and are closed by default), then :func:`exit_with_own_group`. The target of a thread
    of its own, in a child whose main thread may be held by an env for any time (a step
    that hangs)."""
    with contextlib.suppress(OSError):
        while True:
            data, fds, _, _ = socket.recv_fds(alive, 1, 1)
            if not data:
                break
            for fd in fds:
                keep(fd)
    exit_with_own_group(1)


def _end(group: int, grace: float) -> None:
    """SIGTERM the processes of ``group`` (this one aside), SIGKILL those still running
    after ``grace`` seconds; where ``/proc`` cannot tell who they are, SIGTERM the group."""
    others = _members(group)
    if others is None:  # the whole group: this process ignores it meanwhile if it can
        with signal_ignored(signal.SIGTERM), contextlib.suppress(OSError):
            os.killpg(group, signal.SIGTERM)
        return
    for pid in others:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while others and time.monotonic() < deadline:
        time.sleep(_POLL)
        others = _members(group) or []
    for pid in others:
        _signal(pid, signal.SIGKILL)


def keep_own_group() -> None:
    """Start the keeper of the group this process leads: a process outside the group that
    waits for this process to be gone without ending its group, then kills what is left
    of it (SIGKILL, as the parent does with what a dead child left: the keeper acts when
    this process died without ending its group, so there is nobody left to be graceful
    to, and it is gone at once).

    It covers the one case the others miss: this process dies without ending its group
    (SIGKILL, a crash) and its parent, which ends a dead child's group when it sees the
    exit, is killed before it could. The keeper waits on a pipe whose only writer is this
    process (the write end is not inherited by what the envs start: Python's descriptors
    are not inheritable, and ``subprocess`` closes the others; a process the env forks
    without exec holds it too, and is waited for), so the end of the pipe is the end of
    this process. It is dismissed once this process has ended its group itself
    (:func:`end_own_group`, :func:`exit_with_own_group`), so it leaves no keeper behind.
    Nothing is started where this process leads no group.

    The keeper is a shell (:data:`_KEEPER`), spawned, not a fork of this process: a fork
    would share this process's memory copy-on-write for as long as it lived, so every page
    this process wrote afterwards (Python writes a reference count on each object it
    touches) would be copied, about a third of a process worker's start in CPU time. It holds
    nothing of this process open but the pipe. Where no shell can be spawned, there is no
    keeper."""
    if os.getpgrp() != os.getpid() or _keepers:
        return
    read_end, write_end = os.pipe()  # neither inheritable: the keeper gets its stdin only
    actions: list[tuple[Any, ...]] = [
        (os.POSIX_SPAWN_DUP2, read_end, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_descriptors() if fd > 2]
    try:
        keeper = os.posix_spawn(
            "/bin/sh",
            ["/bin/sh", "-c", _KEEPER, "aioenv-keeper", str(os.getpid())],
            os.environ,  # as any process of this one: visible to whoever looks for it there
            file_actions=actions,
            setpgroup=0,  # outside the group it will end
        )
    except OSError:
        os.close(write_end)
        return
    finally:
        os.close(read_end)
    _keepers.append((keeper, write_end))  # the pipe stays open while this process lives


#: The keeper's program (``sh -c``, ``$1`` the group): it reads its stdin (the pipe) to
#: its end, then kills what is left of the group, if anything is. ``kill -s SIG -- -GROUP``
#: is the form dash, bash and busybox all take.
_KEEPER = 'while read -r _; do :; done; kill -s KILL -- "-$1" 2>/dev/null; exit 0'


def _inheritable_descriptors() -> list[int]:
    """This process's descriptors that a spawned program would inherit (Linux: ``/proc``;
    elsewhere none are known, and those are left to the program)."""
    try:
        entries = os.listdir("/proc/self/fd")
    except OSError:
        return []
    found = []
    for entry in entries:
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            if os.get_inheritable(int(entry)):
                found.append(int(entry))
    return found


def _dismiss_keeper() -> None:
    """This process ends its group itself: its keeper is not needed (killed and reaped,
    so it is gone before this process is)."""
    while _keepers:
        keeper, write_end = _keepers.pop()
        with contextlib.suppress(OSError):
            os.kill(keeper, signal.SIGKILL)
            os.waitpid(keeper, 0)
        with contextlib.suppress(OSError):
            os.close(write_end)


#: This process's keeper and the write end of its pipe (see :func:`keep_own_group`).
_keepers: list[tuple[int, int]] = []


_ending = threading.Lock()


def _leave(group: int) -> bool:
    """Move this process from ``group`` to its parent's group (in the same session);
    False if it could not."""
    try:
        target = os.getpgid(os.getppid())
        if target == group:
            return False
        os.setpgid(0, target)
    except OSError:
        return False
    return True


def _exists(group: int) -> bool:
    """Some process (a zombie too) is still in ``group``."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # there is one, not ours to signal: let the slow path look
    return True


def signal_group(pid: int, sig: int) -> bool:
    """Send ``sig`` to the process group that child ``pid`` leads (the child itself
    included); False if there is none (the child never led one, or the group is empty).
    Never the caller's own group. After the child has exited and been reaped, its group
    lives on as long as one of its processes does, and its number is not reused meanwhile,
    so what is left of it can still be signalled."""
    if pid <= 1 or pid == os.getpgrp():
        return False
    try:
        os.killpg(pid, sig)
    except OSError:  # ProcessLookupError: no such group; PermissionError: not ours
        return False
    return True


def _members(group: int) -> list[int] | None:
    """The running processes of ``group`` other than this one (zombies left out: they
    have ended); None where ``/proc`` cannot tell. Reads every process's ``stat``: a few
    milliseconds for a few hundred processes."""
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    found = []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:  # os.open and os.read: a third faster than a file object, for each process
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY)
            try:
                stat = os.read(fd, 512)  # the fields up to the group come first
            finally:
                os.close(fd)
            fields = stat.rsplit(b")", 1)[1].split(None, 3)  # after the command's name
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == group and fields[0] not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, sig)


@contextlib.contextmanager
def signal_ignored(sig: int) -> Iterator[None]:
    """``sig`` ignored by this process meanwhile, where it can be: only the main thread
    may change a disposition (another thread ends a group on the way out, or starts a
    child), and it is left as it was. Ignored, it is ignored in a child started meanwhile
    too (the disposition survives fork and exec)."""
    try:
        previous = signal.signal(sig, signal.SIG_IGN)
    except ValueError:
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(sig, previous)

"""Every process an env starts ends with the child process that serves the env.

A child process that serves envs leads a process group of its own (:func:`lead_own_group`,
first thing it does), and every process its envs start joins that group and stays in it,
grandchildren included, unless it leaves on purpose (``setsid``, ``setpgid``,
``subprocess.Popen(start_new_session=True)`` or ``process_group=``, a container started
through a daemon). So the group is what the env started:

- the child ends what is left of it once its envs are closed, and when it notices that
  the parent is gone (:func:`end_own_group`: SIGTERM, SIGKILL after a grace period);
- the parent signals the whole group when it kills or terminates the child, and kills
  what is left of it once the child has exited (:func:`signal_group`), which covers a
  child that was killed or crashed before it could end the group itself.

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
import threading
import time

__all__ = ["TERMINATE_GRACE", "end_own_group", "lead_own_group", "signal_group"]

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
        left = _leave(group)
        if left and not _exists(group):
            return
        others = _members(group)
        if others is None:
            _signal_others(group, signal.SIGTERM)
            return
        for pid in others:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while others and time.monotonic() < deadline:
            time.sleep(_POLL)
            others = _members(group) or []
        for pid in others:
            _signal(pid, signal.SIGKILL)


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


def _signal_others(group: int, sig: int) -> None:
    """``sig`` to the whole group: this process ignores it meanwhile if it can (only the
    main thread may change a disposition; another thread calls this on the way out)."""
    try:
        previous = signal.signal(sig, signal.SIG_IGN)
    except ValueError:
        previous = None
    try:
        with contextlib.suppress(OSError):
            os.killpg(group, sig)
    finally:
        if previous is not None:
            signal.signal(sig, previous)

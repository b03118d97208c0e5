"""How aioenv starts a child process: the multiprocessing context (forkserver with preloads
where available), and the start itself, which leaves the user's main module out of the
child's start-up, gives the forkserver the parent's module path, and keeps a Ctrl-C
during it from reaching the child; and how the parent ends it (:class:`ChildStart`: its
signals, its exit status, what the parent holds of it closed), for a process worker's
host, an engine child and the probe alike.

A child's program (a process worker's :mod:`aioenv.workers.process._child`, the engine's
:mod:`aioenv.engine._child`) is named, not imported: the entry point here imports it in
the child (or the forkserver preloads it), so the parent's side never imports it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.process
import multiprocessing.spawn
import multiprocessing.util
import os
import signal
import socket
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..env_side._process_group import signal_group, signal_ignored
from ..env_side._thread_caps import forkserver_load_code

__all__ = [
    "PROCESS_TABLE",
    "ChildStart",
    "Context",
    "default_context",
    "resolve_context",
]

Context = multiprocessing.context.BaseContext

#: Held while aioenv starts a child process, asks one for its exit status (``exitcode``,
#: ``join``) or closes one, from whatever thread. multiprocessing's table of a process's
#: children has no lock, and every start first asks each child in it for its exit status
#: (to drop the finished ones). Without this lock, a start off the event loop and the
#: loop reaping a child at the same moment could both read that child's status, and a
#: child closed meanwhile could have its descriptor's number reused by a socket of a new
#: child, which the start would then read from, waiting forever. Re-entrant: a reaped
#: child's restart may start its replacement at once. The event loop never waits for it
#: (see :meth:`aioenv.workers.process._host.Host._reap`).
PROCESS_TABLE = threading.RLock()

#: The forkserver's preload list, as aioenv sets it: multiprocessing's own (the main
#: module), then what every child imports.
_PRELOAD = [
    "__main__",
    "aioenv.workers.process._quiet_start",
    "aioenv.workers.process._child",
    "aioenv.engine._child",
    "numpy",
    "gymnasium",
    "aioenv.workers.process._thread_caps_preload",
]


#: The parent's ends of its children's sockets: a process forked from this one (start
#: method ``"fork"``) closes its copies, so that the parent's death is each child's
#: end-of-file (see :class:`ChildStart`).
_PARENT_ENDS: weakref.WeakSet[socket.socket] = weakref.WeakSet()


def _close_parent_ends() -> None:
    for end in list(_PARENT_ENDS):
        end.close()


os.register_at_fork(after_in_child=_close_parent_ends)


def default_context() -> Context:
    """``forkserver`` (with numpy, gymnasium and aioenv preloaded in the server, so a worker
    starts in tens of milliseconds) where available, else ``spawn``. The first call sets
    the forkserver's preload list (multiprocessing offers no way to read it, so it is set
    whole, once: a list set later is the one a server started later takes)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    _set_preload(context)
    return context


@functools.cache
def _set_preload(context: Context) -> None:
    context.set_forkserver_preload(_PRELOAD)


def resolve_context(context: Context | str | None) -> Context:
    """A process worker's ``context`` option: a context, a start method's name, or None
    (:func:`default_context`, as is ``"forkserver"``)."""
    if context is None or context == "forkserver":
        return default_context()
    methods = multiprocessing.get_all_start_methods()
    if isinstance(context, str) and context in methods:
        return multiprocessing.get_context(context)
    if isinstance(context, str) or not hasattr(context, "Process"):
        raise ValueError(
            "context must be None, a multiprocessing context or a start method "
            f"({', '.join(map(repr, methods))}), got {context!r}"
        )
    return context


class ChildStart:
    """A child process serving envs, made ready to start: ``program`` (``"module:function"``,
    imported in the child only) called with the child's ends of two socket pairs, then
    ``arguments``. The parent's ends exist at once, before the start (:meth:`start`, which
    blocks on the start method's round trip and may run in another thread): ``socket``, of
    requests and replies (what is written before the start waits in it for the child), and
    ``alive``, the child's parent-death alarm (to be held open, never written; descriptors
    for shared memory travel over it). Once the start is done, the parent's copies of the
    child's ends are closed, so a child that dies shows up as end-of-file, never as a hang.

    Its end is written here once for every user (a process worker's host, an engine child,
    the probe): :meth:`signal` reaches the child and whatever its envs started, :meth:`join`
    reads its exit, and :meth:`close` kills what the envs left behind and closes what the
    parent holds of it."""

    def __init__(
        self,
        context: Context,
        name: str,
        arguments: Sequence[Any],
        program: str,
    ) -> None:
        #: It starts through the forkserver: a round trip to the server, whose children
        #: start with SIGINT ignored.
        self.forkserver = context.get_start_method() == "forkserver"
        self.socket, self._child_end = socket.socketpair()
        self.alive, self._alive_child = socket.socketpair()
        _PARENT_ENDS.update((self.socket, self.alive))
        self.process: multiprocessing.process.BaseProcess = context.Process(  # type: ignore[attr-defined]
            target=_run_program,
            args=(program, self._child_end, self._alive_child, *arguments),
            name=f"aioenv-process-worker ({name})",
            daemon=True,
        )
        #: The child's process id once it has started (the process object may be closed
        #: by then); None before that, or where its start failed.
        self.pid: int | None = None
        #: Closed (:meth:`close`): the group killed and the parent's ends closed.
        self.closed = False
        #: A signal asked for before the child's process id is known (:attr:`pid`, once it
        #: has started): under the lock, which the start's thread takes too.
        self._lock = threading.Lock()
        self._doomed = False

    def start(self) -> None:
        """Start the child (once); the parent's copies of its ends are closed either way."""
        # Children start with SIGINT ignored, so a Ctrl-C during their start-up cannot
        # reach them (only the main thread may ignore it). Under forkserver, the server's
        # children start so anyway.
        try:
            ignored = contextlib.nullcontext() if self.forkserver else signal_ignored(signal.SIGINT)
            with _child_start(), ignored:
                _start_process(self.process)
            with self._lock:
                self.pid = self.process.pid
                doomed = self._doomed
            if doomed:
                self.signal(signal.SIGKILL)
        finally:
            self._child_end.close()
            self._alive_child.close()

    def signal(self, sig: int) -> None:
        """``sig`` to the started child's process group, and to the child itself (which
        may not lead its group yet, or ever); a child gone already is no error. Never to a
        child known to have exited: its process id may be another's by then. A child not
        started yet (its start under way in another thread) is killed as soon as it has
        started, whatever ``sig``."""
        with self._lock:
            if self.pid is None:
                self._doomed = True
                return
        signal_group(self.pid, sig)
        # Gone already (no such process) when the group's signal killed it and the
        # forkserver, its parent, reaped it before its exit status reached us.
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def join(self, seconds: float | None) -> int | None:
        """Wait up to ``seconds`` (None: for good) for the child to exit: its exit code,
        None while it runs, or where it never started. The wait reads nothing and takes no
        lock (other threads' starts go on meanwhile); the exit status is read under
        :data:`PROCESS_TABLE`, where no other thread reads it at the same moment (two
        readers of a forkserver child's status: one of them blocks for good)."""
        exited = self.pid is not None and bool(
            multiprocessing.connection.wait([self.process.sentinel], seconds)
        )
        with PROCESS_TABLE:
            if exited:
                self.process.join()  # it has exited: at once (its status may lag a moment)
            return self.process.exitcode

    def close(self) -> None:
        """Kill what is left of the child's process group (what its envs started and left
        behind: it was killed, or crashed), and close the parent's ends and the process
        object (a child still running keeps it open). A started child's is closed under
        :data:`PROCESS_TABLE` where another thread may start a child meanwhile; called
        again, it does nothing more."""
        if self.pid is not None:
            signal_group(self.pid, signal.SIGKILL)
        for end in (self._child_end, self._alive_child, self.socket, self.alive):
            end.close()
        self.closed = True  # (before the process object's close: a second call skips it)
        # ValueError: still running, or a start failed half-way.
        with PROCESS_TABLE, contextlib.suppress(ValueError):
            self.process.close()


#: How many times a start is made again after Python 3.10's race (see _start_process).
_START_ATTEMPTS = 5


def _start_process(process: multiprocessing.process.BaseProcess) -> None:
    """``process.start()``, made again where Python 3.10's multiprocessing raced.

    Before it starts anything, ``start()`` drops the finished processes from
    multiprocessing's table of children, asking each for its exit status. In 3.10, a
    process being closed in another thread meanwhile (the event loop closes a reaped child
    while a start runs off the loop) is still in the table without its handle, and that
    raises AttributeError (3.11 skips it). Nothing was started then (no pid): the start
    is made again."""
    for attempt in range(1, _START_ATTEMPTS + 1):
        try:
            with PROCESS_TABLE:
                process.start()
            return
        except AttributeError:
            if process.pid is not None or attempt == _START_ATTEMPTS:
                raise


def _run_program(program: str, *args: Any) -> None:
    """A child process's entry point: its program (``"module:function"``) is imported here,
    in the child (or preloaded by the forkserver): the parent's side never imports it."""
    module, _, function = program.partition(":")
    getattr(importlib.import_module(module), function)(*args)


class _ChildStart:
    """What multiprocessing does differently for the children aioenv starts, and only for
    those: two of its functions are replaced while some thread starts an aioenv child
    (:meth:`starting`), and put back when the last such start is done. Each replacement
    changes what it returns only for the threads starting an aioenv child, and hands
    other threads' starts the stdlib's unchanged. Outside those moments every
    ``multiprocessing`` user sees the stdlib's. multiprocessing offers no hook for either:
    its start code looks both up when it runs.

    - The user's main module is left out of the children's preparation data
      (``multiprocessing.spawn.get_preparation_data``). multiprocessing's spawn and
      forkserver children import the parent's ``__main__`` (as ``__mp_main__``) before
      running their target, so that targets defined there resolve: a training script's
      top-level imports (a deep learning framework: seconds and hundreds of MB per child)
      run again in every child. An aioenv child needs none of it: its target lives in
      aioenv, and envs travel by value (cloudpickle).
    - The forkserver's server, when an aioenv start launches it, gets the parent's module
      path before it preloads anything (``multiprocessing.util.spawnv_passfds``). It runs
      as ``python -c``, which puts the current directory first on its path, and it
      ignores the path the parent passes it; a directory holding another ``aioenv/`` (a
      checkout, when the script runs from its root) would then have every child run that
      aioenv, and that numpy or gymnasium, instead of the parent's. Children also get the
      parent's path before they unpickle anything, as the stdlib does, so they import
      what the parent imported. The server also loads OpenBLAS with one thread, so that a
      child does not start a thread per core that its cap then leaves idle
      (:func:`~aioenv.env_side._thread_caps.forkserver_load_code`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread = threading.local()  # this thread is starting an aioenv child now
        self._starts = 0  # the threads starting one now
        self._patches = [
            _Patch(multiprocessing.spawn, "get_preparation_data", self._preparation_data),
            _Patch(multiprocessing.util, "spawnv_passfds", self._spawnv_passfds),
        ]

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """While this thread starts an aioenv child."""
        with self._lock:
            if self._starts == 0:
                for patch in self._patches:
                    patch.install()
            self._starts += 1
        self._thread.active = True
        try:
            yield
        finally:
            self._thread.active = False
            with self._lock:
                self._starts -= 1
                if self._starts == 0:
                    for patch in self._patches:
                        patch.put_back()

    def _mine(self) -> bool:
        return bool(getattr(self._thread, "active", False))

    def _preparation_data(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = self._patches[0].original(name)
        if self._mine():
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    def _spawnv_passfds(self, path: str, args: Sequence[str], passfds: Sequence[int]) -> int:
        if self._mine() and args and str(args[-1]).startswith(_FORKSERVER_MAIN):
            first = f"import sys; sys.path[:] = {sys.path!r}"
            # OpenBLAS with one thread only where aioenv's preload list is the server's: its
            # last module takes the variable out again (a list of the user's would not).
            if _PRELOAD[-1] in str(args[-1]):
                first += f"; {forkserver_load_code()}"
            args = [*args[:-1], f"{first}; {args[-1]}"]
        return self._patches[1].original(path, args, passfds)  # type: ignore[no-any-return]


#: How multiprocessing's command for the forkserver's server starts.
_FORKSERVER_MAIN = "from multiprocessing.forkserver import main"


class _Patch:
    """``module.name`` replaced by ``replacement`` while installed. Someone who replaced
    ours while it was in keeps theirs, and ours is never installed over theirs again
    (theirs may call ours, which would call itself through theirs)."""

    def __init__(self, module: Any, name: str, replacement: Callable[..., Any]) -> None:
        self._module, self._name = module, name
        self._replacement = replacement  # one bound method: ``is`` finds it
        self.original: Callable[..., Any] = getattr(module, name)
        self._displaced = False

    def install(self) -> None:
        if not self._displaced:
            self.original = getattr(self._module, self._name)
            setattr(self._module, self._name, self._replacement)

    def put_back(self) -> None:
        """The stdlib's function in again, unless someone replaced ours meanwhile (theirs
        stays)."""
        if self._displaced:
            return
        if getattr(self._module, self._name) is self._replacement:
            setattr(self._module, self._name, self.original)
        else:
            self._displaced = True


_child_start = _ChildStart().starting

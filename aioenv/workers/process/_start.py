"""How aioenv starts a child process: the multiprocessing context (forkserver with preloads
where available), and the start itself, which leaves the user's main module out of the
child's start-up and keeps a Ctrl-C during it from reaching the child.

The child's program (:mod:`aioenv.workers.process._child`) is imported only in the child,
by its entry point here (or preloaded by the forkserver): the parent's side never imports
it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.process
import multiprocessing.spawn
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["Context", "default_context", "resolve_context", "start_child"]

Context = multiprocessing.context.BaseContext

_PRELOAD = [
    "aioenv.workers.process._quiet_start",
    "aioenv.workers.process._child",
    "numpy",
    "gymnasium",
    "aioenv.workers.process._thread_caps_preload",
]


def default_context() -> Context:
    """``forkserver`` (with numpy, gymnasium and aioenv preloaded in the server, so a worker
    starts in tens of milliseconds) where available, else ``spawn``."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    preload = list(getattr(server, "_preload_modules", ["__main__"]))
    missing = [name for name in _PRELOAD if name not in preload]
    if missing and getattr(server, "_forkserver_pid", None) is None:
        context.set_forkserver_preload(preload + missing)
    return context


def resolve_context(context: Context | str | None) -> Context:
    """A process worker's ``context`` option: a context, a start method's name, or None
    (:func:`default_context`, as is ``"forkserver"``)."""
    if context is None or context == "forkserver":
        return default_context()
    if isinstance(context, str):
        return multiprocessing.get_context(context)
    return context


def start_child(
    context: Context, name: str, arguments: Sequence[Any]
) -> tuple[multiprocessing.process.BaseProcess, socket.socket, socket.socket]:
    """Start a child process serving envs: :func:`aioenv.workers.process._child.serve`
    with its ends of two socket pairs, then ``arguments``. Returns the process and the
    parent's ends: the socket of requests and replies, and the child's parent-death alarm
    (to be held open, never written; descriptors for shared memory travel over it). The
    parent's copies of the child's ends are closed, so a child that dies shows up as
    end-of-file, never as a hang."""
    parent_end, child_end = socket.socketpair()
    alive_parent, alive_child = socket.socketpair()
    process = context.Process(  # type: ignore[attr-defined]
        target=_child_main,
        args=(child_end, alive_child, *arguments),
        name=f"aioenv-process-worker ({name})",
        daemon=True,
    )
    try:
        with _main_module_skipped():
            if context.get_start_method() == "forkserver":
                process.start()  # the server's children start with SIGINT ignored
            else:
                with _sigint_ignored():
                    process.start()
    except BaseException:
        parent_end.close()
        alive_parent.close()
        raise
    finally:
        child_end.close()
        alive_child.close()
    return process, parent_end, alive_parent


def _child_main(*args: Any) -> None:
    """A child process's entry point. The child's loop is imported here, in the child (or
    preloaded by the forkserver): the parent's side never imports the child's."""
    from ._child import serve

    serve(*args)


class _MainModuleLeftOut:
    """Leaves the user's main module out of the preparation data of the children aioenv
    starts, and only of those.

    multiprocessing's spawn and forkserver children import the parent's ``__main__`` (as
    ``__mp_main__``) before running their target, so that targets defined there resolve:
    a training script's top-level imports (a deep learning framework: seconds and hundreds
    of MB per child) run again in every child. An aioenv child needs none of it: its
    target lives in aioenv, and envs travel by value (cloudpickle).

    multiprocessing offers no hook for it: its start code looks up
    ``multiprocessing.spawn.get_preparation_data`` when it runs. So the function is
    replaced only while some thread starts an aioenv child (:meth:`starting`), and put
    back when the last such start is done; the replacement changes the data only for the
    threads starting an aioenv child, and hands other threads' starts the stdlib's
    unchanged. Outside those moments every ``multiprocessing`` user sees the stdlib's.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread = threading.local()  # this thread is starting an aioenv child now
        self._starts = 0  # the threads starting one now
        self._original: Callable[[str], dict[str, Any]] | None = None
        self._replacement = self._preparation_data  # one bound method: ``is`` finds it
        #: Someone replaced ours while it was in: theirs may call ours, so ours is never
        #: installed over theirs (it would call itself through theirs).
        self._displaced = False

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """While this thread starts an aioenv child."""
        with self._lock:
            if self._starts == 0 and not self._displaced:
                self._original = multiprocessing.spawn.get_preparation_data
                multiprocessing.spawn.get_preparation_data = self._replacement
            self._starts += 1
        self._thread.active = True
        try:
            yield
        finally:
            self._thread.active = False
            with self._lock:
                self._starts -= 1
                if self._starts == 0 and not self._displaced:
                    self._put_back()

    def _put_back(self) -> None:
        """The stdlib's function in again, unless someone replaced ours meanwhile (theirs
        stays)."""
        if multiprocessing.spawn.get_preparation_data is self._replacement:
            assert self._original is not None
            multiprocessing.spawn.get_preparation_data = self._original  # type: ignore[assignment]
        else:
            self._displaced = True

    def _preparation_data(self, name: str) -> dict[str, Any]:
        assert self._original is not None  # set before this was installed
        data = self._original(name)
        if getattr(self._thread, "active", False):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data


_main_module_skipped = _MainModuleLeftOut().starting


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Start children with SIGINT ignored (the disposition survives fork and exec), so a
    Ctrl-C during their start-up cannot reach them. Only the main thread may do this."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

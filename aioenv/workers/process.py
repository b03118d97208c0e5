"""A worker whose env runs in a child process, watched from the event loop.

The parent keeps no thread per worker: a persistent ``loop.add_reader`` callback reads
replies from a non-blocking socket, and another watches the process sentinel, so a dead
child is seen at once. The parent closes its copy of the child's socket end, so a child
that dies shows up as end-of-file, never as a hang. The child watches a second socket
that only the parent holds open: if the parent dies, the child exits by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import signal
import socket
import threading
import warnings
from collections.abc import Iterator
from typing import Any, TypeVar

import anyio
import cloudpickle

from .._environment import EnvSource, Step
from .._errors import WorkerDied
from .._protocol import (
    FrameDecoder,
    Kind,
    decode_step,
    dumps,
    encode,
    encode_step,
    loads,
    read_frame,
)
from .._runner import ControlRequest, EnvRunner, EpisodeOptions, Failure
from .._sentinels import RESET, Command, Reset
from ._base import Worker

__all__ = ["ProcessWorker", "default_context"]

S = TypeVar("S")

_RECEIVE_SIZE = 1 << 16
_TERMINATE_GRACE = 1.0  # seconds between SIGTERM and SIGKILL
_KILL_GRACE = 5.0  # seconds to wait for the exit after SIGKILL before warning
_PRELOAD = ["aioenv.workers._quiet_start", "aioenv.workers.process", "numpy", "gymnasium"]

Context = multiprocessing.context.BaseContext


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


def _resolve_context(context: Context | str | None) -> Context:
    if context is None or context == "forkserver":
        return default_context()
    if isinstance(context, str):
        return multiprocessing.get_context(context)
    return context


class ProcessWorker(Worker[S]):
    """Runs the env in a child process (crash isolation, true parallelism).

    The env is sent with cloudpickle, so lambdas and classes defined in ``__main__`` work.
    The child ignores SIGINT: the parent decides when it stops. ``aclose`` sends CLOSE,
    waits ``cleanup_time``, then sends SIGTERM, then SIGKILL. A step past its deadline
    kills the child at once.
    """

    kind = "process"
    _discard_verb = "killed"

    def __init__(
        self,
        env: EnvSource,
        *,
        seed: int | None = None,
        cleanup_time: float = 5.0,
        context: Context | str | None = None,
        step_timeout: float | None = None,
        start_timeout: float | None = None,
    ) -> None:
        super().__init__(
            env,
            seed=seed,
            cleanup_time=cleanup_time,
            step_timeout=step_timeout,
            start_timeout=start_timeout,
        )
        try:
            self._payload = cloudpickle.dumps(env)
        except Exception as exc:
            raise TypeError(
                f"{self.name}: the env could not be pickled to send it to a worker process "
                f"({type(exc).__name__}: {exc}); pass a factory or a gymnasium id instead, "
                "or use a thread worker"
            ) from exc
        self._context = _resolve_context(context)
        self._children: list[_Child] = []  # every child not yet reaped
        self._force_timer: asyncio.TimerHandle | None = None
        self._spawn(seed)

    @property
    def pid(self) -> int:
        """The current child's process id."""
        return self._child.pid

    @property
    def exitcode(self) -> int | None:
        """The current child's exit code; None while it runs."""
        return self._child.exitcode

    @property
    def name(self) -> str:
        where = "" if self.worker_id is None else f" {self.worker_id}"
        child = getattr(self, "_child", None)
        pid = f", pid {child.pid}" if child is not None else ""
        return f"process worker{where} ({self.env_name}{pid})"

    # Hooks -----------------------------------------------------------------------------
    def _spawn(self, seed: int | None) -> None:
        child = _Child(self, self._context, self._payload, seed, self._episode)
        self._child = child
        self._children.append(child)
        if self._loop is not None:
            child.watch(self._loop)

    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        for child in self._children:
            child.watch(loop)

    def _submit(self, seq: int, action: Any) -> None:
        if isinstance(action, Command) and action is RESET:
            self._child.send(encode(Kind.RESET, seq))
        elif isinstance(action, Reset):
            self._child.send(encode(Kind.RESET, seq, self._pickle(action, "reset arguments")))
        else:
            self._child.send(encode(Kind.STEP, seq, self._pickle(action, "action")))

    def _submit_control(self, seq: int, request: ControlRequest) -> None:
        self._child.send(encode(Kind.CONTROL, seq, self._pickle(request, "request")))

    def _pickle(self, obj: Any, what: str) -> bytes:
        try:
            return dumps(obj)
        except Exception as exc:
            raise TypeError(
                f"{self.name}: the {what} could not be pickled to send it to the worker "
                f"process ({type(exc).__name__}: {exc})"
            ) from exc

    def _discard_env(self) -> None:
        self._child.discard()

    def _abandon(self) -> None:
        super()._abandon()
        for child in self._children:
            child.kill_now()
        self._children.clear()

    # Messages from children ------------------------------------------------------------
    def _on_child_message(self, child: _Child, kind: int, seq: int, payload: Any) -> None:
        if child is not self._child:
            return  # a discarded child's words are never delivered
        if kind == Kind.READY:
            # Spaces are informative only: one that does not unpickle here is skipped.
            with contextlib.suppress(Exception):
                self.observation_space, self.action_space = loads(payload)
            return
        if not seq or (seq != self._awaited_seq and seq not in self._controls):
            return  # stale: no need to unpickle it
        try:
            result = decode_step(payload) if kind == Kind.STEP_STATE else loads(payload)
        except Exception as exc:
            result = Failure.from_exception(exc, "unpickling its reply in the parent")
        self._on_reply(seq, result)

    def _on_child_exit(self, child: _Child) -> None:
        self._children.remove(child)
        if child is self._child and not child.discarded:
            exitcode = child.exitcode
            self._on_death(
                WorkerDied(
                    f"{self.name} died unexpectedly with exit code {_describe_exit(exitcode)}",
                    worker_id=self.worker_id,
                    exitcode=exitcode,
                )
            )

    # Closing ---------------------------------------------------------------------------
    def _start_close(self) -> None:
        loop = self._ensure_loop()
        self._child.send(encode(Kind.CLOSE, 0))
        # If nobody awaits aclose(), still make sure the children go within bounds.
        self._force_timer = loop.call_later(self.cleanup_time, self._force, "terminate")

    def _force(self, how: str) -> None:
        for child in self._children:
            child.terminate() if how == "terminate" else child.kill()
        if how == "terminate" and self._children:
            assert self._loop is not None
            self._force_timer = self._loop.call_later(_TERMINATE_GRACE, self._force, "kill")

    async def _wait_closed(self, cleanup_time: float) -> None:
        self._ensure_loop()
        for wait, how in (
            (cleanup_time, "terminate"),
            (_TERMINATE_GRACE, "kill"),
            (_KILL_GRACE, ""),
        ):
            with anyio.move_on_after(wait):
                for child in list(self._children):
                    assert child.exited is not None
                    await asyncio.shield(child.exited)
            if not self._children:
                if self._force_timer is not None:
                    self._force_timer.cancel()
                return
            if how:
                if self._force_timer is not None:
                    self._force_timer.cancel()
                for child in self._children:
                    child.terminate() if how == "terminate" else child.kill()
        warnings.warn(
            f"{self.name}: pids {[c.pid for c in self._children]} did not exit even after "
            "SIGKILL; they are left behind",
            RuntimeWarning,
            stacklevel=3,
        )


class _Child:
    """One child process and the parent's ends of its two sockets."""

    def __init__(
        self,
        worker: ProcessWorker[Any],
        context: Context,
        payload: bytes,
        seed: int | None,
        episode: EpisodeOptions,
    ) -> None:
        parent_end, child_end = socket.socketpair()
        alive_parent, alive_child = socket.socketpair()
        process = context.Process(  # type: ignore[attr-defined]
            target=_child_main,
            args=(child_end, alive_child, payload, seed, episode),
            name=f"aioenv-process-worker ({worker.env_name})",
            daemon=True,
        )
        try:
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
        self.pid: int = process.pid
        self.exitcode: int | None = None
        self.discarded = False
        self.exited: asyncio.Future[None] | None = None
        self._worker = worker
        self._process = process
        self._sentinel: int = process.sentinel
        self._socket = parent_end
        self._socket.setblocking(False)
        self._alive = alive_parent  # held open, never written: the child's parent-death alarm
        self._receive_buffer = bytearray(_RECEIVE_SIZE)
        self._decoder = FrameDecoder()
        self._outgoing = bytearray()
        self._reading = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.exited = loop.create_future()
        loop.add_reader(self._socket.fileno(), self._on_readable)
        loop.add_reader(self._sentinel, self._on_sentinel)
        self._reading = True

    def send(self, data: bytes) -> None:
        if self.exitcode is not None or self.discarded:
            return  # gone, or going: its death is (or was) handled elsewhere
        if self._outgoing:
            self._outgoing += data
            return
        try:
            sent = self._socket.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return  # the child is gone; the sentinel reports its death
        if sent < len(data):
            assert self._loop is not None
            self._outgoing += memoryview(data)[sent:]
            self._loop.add_writer(self._socket.fileno(), self._on_writable)

    def discard(self) -> None:
        """Stop listening and kill it; it is reaped in the background."""
        self.discarded = True
        self._stop_reading()
        self.kill()

    def terminate(self) -> None:
        if self.exitcode is None:
            self._process.terminate()

    def kill(self) -> None:
        if self.exitcode is None:
            self._process.kill()

    def kill_now(self) -> None:
        """Kill and reap without a loop (a pool that failed to be built)."""
        if self.exitcode is None and self._loop is None:
            self._process.kill()
            self._process.join()
            self.exitcode = self._process.exitcode
            self._close_resources()

    def _on_writable(self) -> None:
        try:
            sent = self._socket.send(self._outgoing)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            sent = len(self._outgoing)
        del self._outgoing[:sent]
        if not self._outgoing and self._loop is not None:
            self._loop.remove_writer(self._socket.fileno())

    def _on_readable(self) -> None:
        buffer = self._receive_buffer
        view = memoryview(buffer)
        while self._reading:
            try:
                count = self._socket.recv_into(buffer)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                count = 0
            if count == 0:
                self._stop_reading()  # end of file: the sentinel reports the exit
                return
            for kind, seq, payload in self._decoder.feed(view[:count]):
                self._worker._on_child_message(self, kind, seq, payload)
            if count < len(buffer):
                return

    def _on_sentinel(self) -> None:
        assert self._loop is not None
        self._loop.remove_reader(self._sentinel)
        if self._reading:
            self._on_readable()  # replies the child wrote before it exited come first
        self._reap(attempt=0)

    def _reap(self, attempt: int) -> None:
        exitcode = self._process.exitcode
        if exitcode is None and attempt < 100:
            # The sentinel fires as the child exits; under fork/spawn the exit status may
            # lag by a moment. (Under forkserver it is already known.)
            assert self._loop is not None
            self._loop.call_later(0.001 * (attempt + 1), self._reap, attempt + 1)
            return
        self.exitcode = exitcode if exitcode is not None else -1
        self._close_resources()
        if self.exited is not None and not self.exited.done():
            self.exited.set_result(None)
        self._worker._on_child_exit(self)

    def _stop_reading(self) -> None:
        if self._reading and self._loop is not None:
            self._reading = False
            self._loop.remove_reader(self._socket.fileno())

    def _close_resources(self) -> None:
        self._stop_reading()
        if self._loop is not None and self._outgoing:
            self._loop.remove_writer(self._socket.fileno())
        self._outgoing.clear()
        self._socket.close()
        self._alive.close()
        self._process.close()


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


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "unknown"
    if exitcode < 0:
        try:
            return f"{exitcode} (killed by {signal.Signals(-exitcode).name})"
        except ValueError:
            pass
    return str(exitcode)


# Child side ------------------------------------------------------------------------------
def _child_main(
    sock: socket.socket,
    alive: socket.socket,
    payload: bytes,
    seed: int | None,
    episode: EpisodeOptions,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_parent_dies, args=(alive,), daemon=True).start()
    sock.setblocking(True)
    stream = sock.makefile("rb")
    try:
        source = cloudpickle.loads(payload)
        runner = EnvRunner(source, seed, episode)
        runner.build()
    except Exception as exc:
        runner = EnvRunner(None, seed, episode)
        runner.build_failure = Failure.from_exception(exc, "construction (unpickling the env)")
    try:
        try:
            spaces = dumps(runner.spaces)
        except Exception:
            spaces = dumps((None, None))
        sock.sendall(encode(Kind.READY, 0, spaces))
        while True:
            frame = read_frame(stream)
            if frame is None or frame[0] == Kind.CLOSE:
                return  # the parent asked us to close, or is gone
            kind, seq, data = frame
            if kind == Kind.RESET and not data:
                result = runner.reset()
            else:
                try:
                    request = loads(data)
                except Exception as exc:
                    result = Failure.from_exception(exc, "unpickling the request")
                else:
                    if kind == Kind.CONTROL:
                        result = runner.control(request)
                    else:
                        result = runner.handle(request)
            sock.sendall(_encode_reply(seq, result))
    except (BrokenPipeError, ConnectionResetError):
        return  # the parent is gone
    finally:
        runner.close()
        stream.close()
        sock.close()


def _exit_when_parent_dies(alive: socket.socket) -> None:
    """Only the parent holds the other end open: end-of-file means it died."""
    with contextlib.suppress(OSError):
        alive.recv(1)
    os._exit(1)


def _encode_reply(seq: int, result: Any) -> bytes:
    if isinstance(result, Failure):
        try:
            return encode(Kind.FAILURE, seq, dumps(result))
        except Exception:
            return encode(Kind.FAILURE, seq, dumps(result.without_exception()))
    try:
        if type(result) is Step:
            return encode_step(seq, result)
        return encode(Kind.STATE, seq, dumps(result))
    except Exception as exc:
        failure = Failure.from_exception(exc, "pickling the state to send it to the parent")
        return encode(Kind.FAILURE, seq, dumps(failure.without_exception()))

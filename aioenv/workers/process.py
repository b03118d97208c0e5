"""A worker whose env runs in a child process, watched from the event loop.

The parent keeps no thread per worker: a persistent ``loop.add_reader`` callback reads
replies from a non-blocking socket, and another watches the process sentinel, so a dead
child is seen at once. The parent closes its copy of the child's socket end, so a child
that dies shows up as end-of-file, never as a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import signal
import socket
import warnings
from typing import Any, TypeVar

import anyio
import cloudpickle

from .._environment import EnvSource
from .._errors import WorkerDied
from .._protocol import FrameDecoder, Kind, dumps, encode, loads, read_frame
from .._runner import EnvRunner, Failure
from ._base import Worker

__all__ = ["ProcessWorker", "default_context"]

S = TypeVar("S")

_RECEIVE_SIZE = 1 << 16
_TERMINATE_GRACE = 1.0  # seconds between SIGTERM and SIGKILL
_KILL_GRACE = 5.0  # seconds to wait for the exit after SIGKILL before warning
_PRELOAD = ["aioenv.workers.process", "numpy", "gymnasium"]

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
    if context is None:
        return default_context()
    if isinstance(context, str):
        return (
            default_context() if context == "forkserver" else multiprocessing.get_context(context)
        )
    return context


class ProcessWorker(Worker[S]):
    """Runs the env in a child process (crash isolation, true parallelism).

    The env is sent with cloudpickle, so lambdas and classes defined in ``__main__`` work.
    The child ignores SIGINT: the parent decides when it stops. ``aclose`` sends CLOSE,
    waits ``cleanup_time``, then sends SIGTERM, then SIGKILL.
    """

    kind = "process"

    def __init__(
        self,
        env: EnvSource,
        *,
        seed: int | None = None,
        cleanup_time: float = 5.0,
        context: Context | str | None = None,
    ) -> None:
        super().__init__(env, seed=seed, cleanup_time=cleanup_time)
        try:
            payload = cloudpickle.dumps(env)
        except Exception as exc:
            raise TypeError(
                f"{self.name}: the env could not be pickled to send it to a worker process "
                f"({type(exc).__name__}: {exc}); pass a factory or a gymnasium id instead, "
                "or use a thread worker"
            ) from exc
        ctx = _resolve_context(context)
        parent_end, child_end = socket.socketpair()
        self._process = ctx.Process(  # type: ignore[attr-defined]
            target=_child_main,
            args=(child_end, payload, seed),
            name=f"aioenv-process-worker ({self.env_name})",
            daemon=True,
        )
        try:
            self._process.start()
        finally:
            child_end.close()
        self.pid: int = self._process.pid
        self.exitcode: int | None = None
        self._sentinel: int = self._process.sentinel
        self._socket = parent_end
        self._socket.setblocking(False)
        self._receive_buffer = bytearray(_RECEIVE_SIZE)
        self._decoder = FrameDecoder()
        self._outgoing = bytearray()
        self._reading = False
        self._exited: asyncio.Future[None] | None = None
        self._force_timer: asyncio.TimerHandle | None = None

    @property
    def name(self) -> str:
        where = "" if self.worker_id is None else f" {self.worker_id}"
        return f"process worker{where} ({self.env_name}, pid {getattr(self, 'pid', '?')})"

    # Loop side -----------------------------------------------------------------------
    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._exited = loop.create_future()
        loop.add_reader(self._socket.fileno(), self._on_readable)
        loop.add_reader(self._sentinel, self._on_sentinel)
        self._reading = True

    def _submit(self, seq: int, action: Any) -> None:
        if self._request_kind(action):
            self._write(encode(Kind.RESET, seq))
            return
        try:
            payload = dumps(action)
        except Exception as exc:
            raise TypeError(
                f"{self.name}: the action could not be pickled to send it to the worker "
                f"process ({type(exc).__name__}: {exc})"
            ) from exc
        self._write(encode(Kind.STEP, seq, payload))

    def _write(self, data: bytes) -> None:
        if self.exitcode is not None:
            return  # already gone: its death was (or is about to be) reported
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
            self._outgoing += memoryview(data)[sent:]
            self._ensure_loop().add_writer(self._socket.fileno(), self._on_writable)

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
        while True:
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
                self._on_message(kind, seq, payload)
            if count < len(buffer):
                return

    def _on_message(self, kind: int, seq: int, payload: bytes | memoryview) -> None:
        if kind == Kind.READY:
            # Spaces are informative only: one that does not unpickle here is skipped.
            with contextlib.suppress(Exception):
                self.observation_space, self.action_space = loads(payload)
            return
        if seq != self._awaited_seq:
            return  # stale: no need to unpickle it
        try:
            result = loads(payload)
        except Exception as exc:
            result = Failure.from_exception(exc, "unpickling its reply in the parent")
        self._on_reply(seq, result)

    def _on_sentinel(self) -> None:
        loop = self._loop
        assert loop is not None
        loop.remove_reader(self._sentinel)
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
        self._finish(exitcode)

    def _finish(self, exitcode: int | None) -> None:
        self.exitcode = exitcode if exitcode is not None else -1
        self._stop_reading()
        if self._force_timer is not None:
            self._force_timer.cancel()
        if self._loop is not None and self._outgoing:
            self._loop.remove_writer(self._socket.fileno())
        self._outgoing.clear()
        self._socket.close()
        self._process.close()
        if not self._closing:
            self._on_death(
                WorkerDied(
                    f"{self.name} died unexpectedly with exit code {_describe_exit(exitcode)}",
                    worker_id=self.worker_id,
                    exitcode=exitcode,
                )
            )
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(None)

    def _stop_reading(self) -> None:
        if self._reading and self._loop is not None:
            self._reading = False
            self._loop.remove_reader(self._socket.fileno())

    # Closing -------------------------------------------------------------------------
    def _start_close(self) -> None:
        loop = self._ensure_loop()
        self._write(encode(Kind.CLOSE, 0))
        if self.exitcode is None:
            # If nobody awaits aclose(), still make sure the child goes within bounds.
            self._force_timer = loop.call_later(self.cleanup_time, self._terminate)

    def _abandon(self) -> None:
        super()._abandon()
        if self.exitcode is None and self._loop is None:
            self._process.kill()
            self._process.join()
            self.exitcode = self._process.exitcode
            self._socket.close()
            self._process.close()

    def _terminate(self) -> None:
        if self.exitcode is None:
            self._process.terminate()
            assert self._loop is not None
            self._force_timer = self._loop.call_later(_TERMINATE_GRACE, self._kill)

    def _kill(self) -> None:
        if self.exitcode is None:
            self._process.kill()

    async def _wait_closed(self, cleanup_time: float) -> None:
        self._ensure_loop()
        exited = self._exited
        assert exited is not None
        for wait, force in (
            (cleanup_time, self._terminate),
            (_TERMINATE_GRACE, self._kill),
            (_KILL_GRACE, None),
        ):
            with anyio.move_on_after(wait):
                await asyncio.shield(exited)
            if exited.done():
                return
            if force is not None:
                if self._force_timer is not None:
                    self._force_timer.cancel()
                force()
        warnings.warn(
            f"{self.name} did not exit even after SIGKILL; it is left behind",
            RuntimeWarning,
            stacklevel=3,
        )


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
def _child_main(sock: socket.socket, payload: bytes, seed: int | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock.setblocking(True)
    stream = sock.makefile("rb")
    try:
        source = cloudpickle.loads(payload)
        runner = EnvRunner(source, seed)
        runner.build()
    except Exception as exc:
        runner = EnvRunner(None, seed)
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
            if kind == Kind.RESET:
                result = runner.reset()
            else:
                try:
                    action = loads(data)
                except Exception as exc:
                    result = Failure.from_exception(exc, "unpickling the action")
                else:
                    result = runner.step(action)
            sock.sendall(_encode_reply(seq, result))
    except (BrokenPipeError, ConnectionResetError):
        return  # the parent is gone
    finally:
        runner.close()
        stream.close()
        sock.close()


def _encode_reply(seq: int, result: Any) -> bytes:
    if isinstance(result, Failure):
        try:
            return encode(Kind.FAILURE, seq, dumps(result))
        except Exception:
            return encode(Kind.FAILURE, seq, dumps(result.without_exception()))
    try:
        return encode(Kind.STATE, seq, dumps(result))
    except Exception as exc:
        failure = Failure.from_exception(exc, "pickling the state to send it to the parent")
        return encode(Kind.FAILURE, seq, dumps(failure.without_exception()))

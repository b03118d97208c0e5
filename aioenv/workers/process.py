"""A worker whose env runs in a child process, watched from the event loop.

A child process (a *host*) serves one env, or several with ``envs_per_process``: each env
is still its own worker, with its own id and first-ready semantics, in a *slot* of the
host. The parent keeps no thread per worker: a persistent ``loop.add_reader`` callback
reads replies from a non-blocking socket, and another watches the process sentinel, so a
dead child is seen at once. The parent closes its copy of the child's socket end, so a
child that dies shows up as end-of-file, never as a hang. The child watches a second
socket that only the parent holds open: if the parent dies, the child exits by itself.

Messages for one host sent in the same loop iteration travel in one write: cheap envs pay
one wake-up per batch of actions. The child answers each request as soon as it is done, so
the parent works on one state while the child steps the next env.

Large observations skip the socket: once the env reports its observation space, the parent
maps a memory file laid out for that space and passes it to the child, which writes each
observation in place (see :mod:`aioenv._shared_memory`).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import queue
import signal
import socket
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal, TypeVar

import anyio
import cloudpickle

from .._environment import EnvSource, Step
from .._errors import TransportError, WorkerDied
from .._protocol import (
    FrameDecoder,
    Kind,
    decode_step,
    dumps,
    encode,
    encode_action,
    encode_step,
    is_shared,
    loads,
)
from .._runner import ControlRequest, EnvRunner, EpisodeOptions, Failure
from .._sentinels import RESET, Reset
from .._shared_memory import (
    AUTO_THRESHOLD,
    Layout,
    SharedObservations,
    available,
    memory_file,
)
from ._base import Worker

__all__ = ["ProcessWorker", "default_context"]

S = TypeVar("S")

_RECEIVE_SIZE = 1 << 16
_TERMINATE_GRACE = 1.0  # seconds between SIGTERM and SIGKILL
_KILL_GRACE = 5.0  # seconds to wait for the exit after SIGKILL before warning
_DESCRIPTOR_WAIT = 5.0  # seconds the child waits for a SHARE frame's descriptor
_READY, _STEP_STATE = int(Kind.READY), int(Kind.STEP_STATE)  # plain ints compare faster
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
    kills the child at once (with every env it hosts). Use :meth:`hosted` (or
    ``make_pool(..., envs_per_process=k)``) to put several envs in one child.

    ``shared_memory``: ``"auto"`` (observations of 8 KiB or more, in a space with a fixed
    layout, travel through shared memory), True (whenever the space allows) or False (always
    through the socket). Either way the states handed out own their arrays unless the pool
    was made with ``copy=False``.
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
        shared_memory: bool | Literal["auto"] = "auto",
        _start: bool = True,
    ) -> None:
        super().__init__(
            env,
            seed=seed,
            cleanup_time=cleanup_time,
            step_timeout=step_timeout,
            start_timeout=start_timeout,
        )
        try:
            self._payload = cloudpickle.dumps(self.source)
        except Exception as exc:
            raise TypeError(
                f"{self.name}: the env could not be pickled to send it to a worker process "
                f"({type(exc).__name__}: {exc}); pass a factory or a gymnasium id instead, "
                "or use a thread worker"
            ) from exc
        if shared_memory not in (True, False, "auto"):
            raise ValueError(f"shared_memory must be True, False or 'auto', got {shared_memory!r}")
        if shared_memory is True and not available():
            raise ValueError(
                "shared_memory=True needs os.memfd_create (Linux); use shared_memory='auto'"
            )
        self._shared_memory = shared_memory
        self._layout: Layout | None = None  # known once the env reports its space
        self._shared: SharedObservations | None = None  # mapped for the current host
        self._context = _resolve_context(context)
        self._slot = 0
        self._hosts: list[_Host] = []  # every host this worker used that may still run
        if _start:
            self._join(_Host([self], build=True))

    @classmethod
    def hosted(
        cls,
        env: EnvSource | list[EnvSource],
        seeds: Sequence[int | None],
        envs_per_process: int,
        **options: Any,
    ) -> list[ProcessWorker[Any]]:
        """One worker per seed, ``envs_per_process`` of them sharing each child process.
        ``env`` is one env source for all, or a list with one per seed."""
        if not isinstance(envs_per_process, int) or envs_per_process < 1:
            raise ValueError(f"envs_per_process must be an int >= 1, got {envs_per_process!r}")
        envs = env if isinstance(env, list) else [env] * len(seeds)
        workers: list[ProcessWorker[Any]] = [
            cls(source, seed=seed, _start=False, **options)
            for source, seed in zip(envs, seeds, strict=True)
        ]
        try:
            for first in range(0, len(workers), envs_per_process):
                members = workers[first : first + envs_per_process]
                host = _Host(members, build=True)
                for worker in members:
                    worker._join(host)
        except BaseException:
            for worker in workers:
                worker._abandon()  # the children started so far go too
            raise
        return workers

    def _join(self, host: _Host) -> None:
        self._host = host
        self._slot = host.members.index(self)
        host.open_slots.add(self._slot)
        self._hosts.append(host)
        self._shared = None  # a new process gets its own memory: a killed one cannot write it
        if self._loop is not None:
            host.watch(self._loop)
        if self._layout is not None:
            self._share()

    def _share(self) -> None:
        """Map memory for this worker's observations and pass it to its current host."""
        assert self._layout is not None
        fd = memory_file(self._layout.nbytes)
        try:
            shared = SharedObservations(self._layout, fd)
            frame = encode(Kind.SHARE, 0, dumps(self._layout), self._slot)
            if self._host.send_with_fd(frame, fd):
                self._shared = shared
        finally:
            os.close(fd)  # the child has its own descriptor now

    def _layout_for(self, space: Any) -> Layout | None:
        if self._shared_memory is False or not available():
            return None
        layout = Layout.of(space)
        if layout is None or (self._shared_memory == "auto" and layout.nbytes < AUTO_THRESHOLD):
            return None
        return layout

    @property
    def pid(self) -> int:
        """The process id of the child running this worker's env."""
        return self._host.pid

    @property
    def exitcode(self) -> int | None:
        """That child's exit code; None while it runs."""
        return self._host.exitcode

    @property
    def name(self) -> str:
        where = "" if self.worker_id is None else f" {self.worker_id}"
        host = getattr(self, "_host", None)
        if host is None:
            return f"process worker{where} ({self.env_name})"
        slot = f", slot {self._slot}" if host.size > 1 else ""
        return f"process worker{where} ({self.env_name}, pid {host.pid}{slot})"

    # Hooks -----------------------------------------------------------------------------
    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        for host in self._hosts:
            host.watch(loop)

    def _spawn(self, seed: int | None) -> None:
        host = self._host
        while host.successor is not None:  # siblings may have replaced it already
            host = host.successor
        if not host.alive:
            host.successor = _Host(host.members, build=False)
            host = host.successor
        if host is not self._host:
            self._join(host)
        host.send(encode(Kind.REBUILD, 0, dumps((seed, self._episode)), self._slot))

    def _submit(self, seq: int, action: Any) -> None:
        if action is RESET:
            frame = encode(Kind.RESET, seq, b"", self._slot)
        elif isinstance(action, Reset):
            frame = encode(Kind.RESET, seq, self._pickle(action, "reset arguments"), self._slot)
        else:
            frame = encode_action(seq, self._pickle(action, "action"), self._slot)
        self._host.send(frame)

    def _submit_control(self, seq: int, request: ControlRequest) -> None:
        self._host.send(encode(Kind.CONTROL, seq, self._pickle(request, "request"), self._slot))

    def _pickle(self, obj: Any, what: str) -> bytes:
        try:
            return dumps(obj)
        except Exception as exc:
            raise TypeError(
                f"{self.name}: the {what} could not be pickled to send it to the worker "
                f"process ({type(exc).__name__}: {exc})"
            ) from exc

    def _discard_env(self, env_gone: bool) -> None:
        host = self._host
        if env_gone or host.size == 1:
            host.kill(self)  # a hung step cannot be interrupted: the whole child goes
        # else: a sibling-friendly restart; _spawn rebuilds just this slot's env

    def _abandon(self) -> None:
        super()._abandon()
        self._shared = None
        for host in self._hosts:
            host.kill_now()
        self._hosts.clear()

    # From hosts --------------------------------------------------------------------------
    def _on_host_message(self, host: _Host, kind: int, seq: int, payload: Any) -> None:
        if host is not self._host:
            return  # a replaced host's words are never delivered
        if kind == _READY:
            self._on_ready(payload)
            return
        if not seq or (seq != self._awaited_seq and seq not in self._controls):
            return  # stale: no need to decode it
        borrowed = False
        result: Any
        try:
            if kind == _STEP_STATE:
                shared = self._shared
                result = decode_step(payload, shared)
                borrowed = shared is not None and is_shared(payload)
            else:
                result = loads(payload)
        except Exception as exc:
            self._on_undecodable(seq, exc)
            return
        self._on_reply(seq, result, borrowed)

    def _on_ready(self, payload: Any) -> None:
        """The env reports its spaces: map shared memory for its observations. Neither is
        needed to go on, so a failure here is a warning, and observations travel through
        the socket."""
        try:
            self.observation_space, self.action_space = loads(payload)
            self._layout = self._layout_for(self.observation_space)
            if self._layout is not None:
                self._share()
        except Exception as exc:
            self._layout = self._shared = None
            warnings.warn(
                f"{self.name}: aioenv could not set up shared memory for its observations "
                f"({type(exc).__name__}: {exc}); they travel through the socket instead",
                RuntimeWarning,
                stacklevel=2,
            )

    def _on_undecodable(self, seq: int, exc: Exception) -> None:
        error = TransportError(
            f"{self.name}: aioenv could not decode the worker's reply in the parent "
            f"({type(exc).__name__}: {exc}); the state is lost, the env is not at fault "
            "(a state the parent cannot unpickle: make it plain data)",
            worker_id=self.worker_id,
        )
        error.__cause__ = exc
        future = self._controls.pop(seq, None)
        if future is not None:
            if not future.done():
                future.set_exception(error)
            return
        self._on_failure(error, env_gone=False)

    def _on_host_exit(self, host: _Host) -> None:
        with contextlib.suppress(ValueError):
            self._hosts.remove(host)
        if host is not self._host or host.killed_by is self or self._closing:
            return
        cause = ""
        if host.killed_by is not None:
            cause = f"; its process was killed because {host.killed_by.name} failed"
        self._on_death(
            WorkerDied(
                f"{self.name} died unexpectedly with exit code "
                f"{_describe_exit(host.exitcode)}{cause}",
                worker_id=self.worker_id,
                exitcode=host.exitcode,
            )
        )

    # Closing ---------------------------------------------------------------------------
    def _start_close(self) -> None:
        self._ensure_loop()
        self._shared = None  # unmapped as soon as no array handed out (copy=False) views it
        self._host.release(self._slot, self.cleanup_time)

    async def _wait_closed(self, cleanup_time: float) -> None:
        self._ensure_loop()
        hosts = [
            host
            for host in self._hosts
            if host.exited is not None and (not host.open_slots or not host.alive)
        ]
        steps = ((cleanup_time, "terminate"), (_TERMINATE_GRACE, "kill"), (_KILL_GRACE, ""))
        for wait, how in steps:
            with anyio.move_on_after(wait):
                for host in hosts:
                    assert host.exited is not None
                    await asyncio.shield(host.exited)
            hosts = [host for host in hosts if host.exitcode is None]
            if not hosts:
                return
            for host in hosts:
                host.force(how)
        warnings.warn(
            f"{self.name}: pids {[host.pid for host in hosts]} did not exit even after "
            "SIGKILL; they are left behind",
            RuntimeWarning,
            stacklevel=3,
        )


class _Host:
    """One child process serving the envs of ``members`` (slot ``i`` is ``members[i]``)."""

    def __init__(self, members: list[ProcessWorker[Any]], *, build: bool) -> None:
        first = members[0]
        parent_end, child_end = socket.socketpair()
        alive_parent, alive_child = socket.socketpair()
        process = first._context.Process(  # type: ignore[attr-defined]
            target=_host_main,
            args=(
                child_end,
                alive_child,
                [member._payload for member in members],
                [member.seed for member in members],
                first._episode,
                build,
            ),
            name=f"aioenv-process-worker ({first.env_name})",
            daemon=True,
        )
        try:
            if first._context.get_start_method() == "forkserver":
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
        self.members = members
        self.size = len(members)
        # Slots whose worker uses this host; a replacement host gains them as they join.
        self.open_slots = set(range(self.size)) if build else set()
        self.pid: int = process.pid
        self.exitcode: int | None = None
        self.killed_by: ProcessWorker[Any] | None = None
        self.successor: _Host | None = None
        self.exited: asyncio.Future[None] | None = None
        self._process = process
        self._sentinel: int = process.sentinel
        self._socket = parent_end
        self._socket.setblocking(False)
        self._alive = alive_parent  # held open, never written: the child's parent-death alarm
        self._receive_buffer = bytearray(_RECEIVE_SIZE)
        self._decoder = FrameDecoder()
        self._outgoing = bytearray()
        self._queued: list[bytes] = []
        self._reading = False
        self._force_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def alive(self) -> bool:
        return self.exitcode is None and self.killed_by is None

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        previous = self._loop
        if previous is not None and previous is not loop and previous.is_closed():
            # A later event loop takes over; the closed one took its readers and timers.
            self._loop, self._reading, self._force_timer = None, False, None
        if self._loop is not None or self.exitcode is not None:
            return
        self._loop = loop
        self.exited = loop.create_future()
        loop.add_reader(self._socket.fileno(), self._on_readable)
        loop.add_reader(self._sentinel, self._on_sentinel)
        self._reading = True

    def send(self, frame: bytes) -> None:
        """Send now, or (several envs here) at the end of this loop iteration, together
        with every other frame for this host sent meanwhile."""
        if self.exitcode is not None or self.killed_by is not None:
            return  # gone, or going: its death is (or was) handled elsewhere
        if self.size == 1 or self._loop is None:
            self._write(frame)
            return
        if not self._queued:
            self._loop.call_soon(self._flush)
        self._queued.append(frame)

    def _flush(self) -> None:
        frames, self._queued = self._queued, []
        if self.alive:
            self._write(b"".join(frames))

    def send_with_fd(self, frame: bytes, fd: int) -> bool:
        """Send a copy of descriptor ``fd`` ahead of ``frame``, which goes as usual. False
        if it could not go (the caller carries on without it)."""
        if not self.alive:
            return False
        # Descriptors travel on the parent-death socket, which the child's watchdog thread
        # reads: receiving them on the main socket would need recvmsg for every request,
        # which made the child's reads several times slower.
        try:
            socket.send_fds(self._alive, [b"\0"], [fd])
        except OSError:
            return False
        self.send(frame)
        return True

    def _write(self, data: bytes) -> None:
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

    def release(self, slot: int, cleanup_time: float) -> None:
        """The env in ``slot`` is done: close it; the last one closes the process, which is
        forced out if it does not exit within ``cleanup_time``."""
        self.open_slots.discard(slot)
        if self.open_slots:
            self.send(encode(Kind.CLOSE_SLOT, 0, b"", slot))
            return
        if self._queued:
            self._flush()
        if self.alive:
            self._write(encode(Kind.CLOSE, 0))
        if self.exitcode is None and self._loop is not None:
            self._force_timer = self._loop.call_later(cleanup_time, self.force, "terminate")

    def force(self, how: str) -> None:
        if self.exitcode is not None:
            return
        if how == "terminate":
            self._process.terminate()
            assert self._loop is not None
            self._force_timer = self._loop.call_later(_TERMINATE_GRACE, self.force, "kill")
        elif how == "kill":
            self._process.kill()

    def kill(self, by: ProcessWorker[Any]) -> None:
        """Kill the child at once because ``by`` failed; it is reaped in the background."""
        if self.killed_by is None:
            self.killed_by = by
        self._stop_reading()
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
        members = self.members
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
            for kind, seq, slot, payload in self._decoder.feed(view[:count]):
                members[slot]._on_host_message(self, kind, seq, payload)
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
        for member in self.members:
            member._on_host_exit(self)

    def _stop_reading(self) -> None:
        if self._reading and self._loop is not None:
            self._reading = False
            self._loop.remove_reader(self._socket.fileno())

    def _close_resources(self) -> None:
        self._stop_reading()
        if self._force_timer is not None:
            self._force_timer.cancel()
        if self._loop is not None and self._outgoing:
            self._loop.remove_writer(self._socket.fileno())
        self._outgoing.clear()
        self._queued.clear()
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
def _host_main(
    sock: socket.socket,
    alive: socket.socket,
    payloads: list[bytes],
    seeds: list[int | None],
    episode: EpisodeOptions,
    build: bool,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    descriptors: queue.SimpleQueue[int] = queue.SimpleQueue()  # for SHARE frames, in order
    threading.Thread(target=_exit_when_parent_dies, args=(alive, descriptors), daemon=True).start()
    sock.setblocking(True)
    shared: list[SharedObservations | None] = [None] * len(payloads)
    sources: list[Any] = []
    for payload in payloads:
        try:
            sources.append(cloudpickle.loads(payload))
        except Exception as exc:
            sources.append(_Unpicklable(Failure.from_exception(exc, "construction (unpickling)")))
    runners = [
        _runner(source, seed, episode, build) for source, seed in zip(sources, seeds, strict=True)
    ]
    try:
        if build:
            sock.sendall(b"".join(_ready(slot, runner) for slot, runner in enumerate(runners)))
        decoder = FrameDecoder()
        while True:
            data = sock.recv(_RECEIVE_SIZE)  # whatever has arrived is one batch
            if not data:
                return  # the parent is gone
            for kind, seq, slot, frame in decoder.feed(data):
                if kind == Kind.CLOSE:
                    return
                runner = runners[slot]
                if kind == Kind.SHARE:
                    shared[slot] = _attach(frame, descriptors)
                elif kind == Kind.CLOSE_SLOT:
                    runner.close()
                    shared[slot] = None
                elif kind == Kind.REBUILD:
                    runner.close()
                    seed, slot_episode = loads(frame)
                    runners[slot] = _runner(sources[slot], seed, slot_episode, True)
                else:
                    # Each answer goes at once, not with the batch: the parent works on it
                    # while this child steps the next env, and neither side idles long
                    # enough for its core to sleep (waking a sleeping core costs far more
                    # than a write; see benchmarks/wake_latency.py).
                    sock.sendall(_answer(runner, kind, seq, slot, frame, shared[slot]))
    except (BrokenPipeError, ConnectionResetError):
        return  # the parent is gone
    finally:
        for runner in runners:
            runner.close()
        while not descriptors.empty():
            os.close(descriptors.get())
        sock.close()


def _attach(frame: Any, descriptors: queue.SimpleQueue[int]) -> SharedObservations | None:
    """Map the memory the parent passed; None (observations keep travelling through the
    socket) if that fails."""
    try:
        fd = descriptors.get(timeout=_DESCRIPTOR_WAIT)  # sent just before the frame
    except queue.Empty:
        return None
    try:
        return SharedObservations(loads(frame), fd)
    except Exception:
        return None
    finally:
        os.close(fd)


class _Unpicklable:
    """Stands in for an env that could not be unpickled in the child."""

    def __init__(self, failure: Failure) -> None:
        self.failure = failure


def _runner(source: Any, seed: int | None, episode: EpisodeOptions, build: bool) -> EnvRunner:
    if isinstance(source, _Unpicklable):
        runner = EnvRunner(None, seed, episode)
        runner.build_failure = source.failure
        return runner
    runner = EnvRunner(source, seed, episode)
    if build:
        runner.build()
    return runner


def _ready(slot: int, runner: EnvRunner) -> bytes:
    try:
        return encode(Kind.READY, 0, dumps(runner.spaces), slot)
    except Exception:
        return encode(Kind.READY, 0, dumps((None, None)), slot)


def _answer(
    runner: EnvRunner,
    kind: int,
    seq: int,
    slot: int,
    payload: Any,
    shared: SharedObservations | None,
) -> bytes:
    if kind == Kind.RESET and not payload:
        result = runner.reset()
    else:
        try:
            request = loads(payload)
        except Exception as exc:
            result = Failure.from_exception(exc, "unpickling the request")
        else:
            result = runner.control(request) if kind == Kind.CONTROL else runner.handle(request)
    return _encode_reply(seq, result, slot, shared if kind != Kind.CONTROL else None)


def _exit_when_parent_dies(alive: socket.socket, descriptors: queue.SimpleQueue[int]) -> None:
    """Only the parent holds the other end open: end-of-file means it died. Until then it
    carries the descriptors of shared memory, one byte each."""
    with contextlib.suppress(OSError):
        while True:
            data, fds, _, _ = socket.recv_fds(alive, 1, 1)
            if not data:
                break
            for fd in fds:
                descriptors.put(fd)
    os._exit(1)


def _encode_reply(
    seq: int, result: Any, slot: int, shared: SharedObservations | None = None
) -> bytes:
    if isinstance(result, Failure):
        try:
            return encode(Kind.FAILURE, seq, _dumps_by_value(result), slot)
        except Exception:
            return encode(Kind.FAILURE, seq, dumps(result.without_exception()), slot)
    try:
        if type(result) is Step:
            return encode_step(seq, result, slot, shared)
        return encode(Kind.STATE, seq, dumps(result), slot)
    except Exception:
        pass
    try:
        # Classes from the user's __main__ (shipped here by value with the env) pickle by
        # value too; cloudpickle hands the parent back its own class objects.
        return encode(Kind.STATE, seq, cloudpickle.dumps(result, protocol=5), slot)
    except Exception as exc:
        failure = Failure.from_exception(exc, "pickling the state to send it to the parent")
        return encode(Kind.FAILURE, seq, dumps(failure.without_exception()), slot)


def _dumps_by_value(obj: Any) -> bytes:
    try:
        return dumps(obj)
    except Exception:
        return cloudpickle.dumps(obj, protocol=5)  # type: ignore[no-any-return]

"""A worker whose env runs in a child process, watched from the event loop.

A child process (a *host*) serves one env, or several with ``envs_per_process``: each env
is still its own worker, with its own id and first-ready semantics, in a *slot* of the
host. An action travels: :meth:`ProcessWorker._submit` encodes it (:mod:`aioenv.wire._frames`)
and hands it to the worker's :class:`~aioenv.workers.process._host.Host`, which writes it to the
child; the child's loop (:mod:`aioenv.workers.process._child`) steps the env and writes the reply;
the host reads it and calls back :meth:`ProcessWorker._on_host_message`, which decodes it
and delivers it through :meth:`~aioenv.workers.Worker._on_reply`.

Messages for one host's socket sent in the same loop iteration travel in one write. The
child answers each request as soon as it is done, so the parent works on one state while
the child steps the next env.

Each env of a child steps through its own *lane* of the engine once it has reported an
observation space of a fixed layout (:mod:`aioenv.engine._lane`: its row in a shared
buffer and two kernel wakes, the answer's watched by the event loop), with no socket on
the way. Large observations of an answer that takes the socket skip it too: the child
writes them in the lane's row (see :mod:`aioenv.wire._shared_memory`).
"""

from __future__ import annotations

import contextlib
import functools
import signal
import warnings
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

import anyio
import numpy as np

from ...core._commands import Reset
from ...core._docs import documented_with
from ...core._environment import EnvSource
from ...core._errors import TransportError
from ...core._messages import ControlRequest
from ...core._rollouts import Rollout, package_of
from ...core._supervision import SUPERVISION_DEFAULTS
from ...engine._buffer import NoLayout
from ...engine._lane import Lane
from ...engine._start import Context, resolve_context
from ...env_side._idle_spin import DEFAULT_IDLE_SPIN, checked_idle_spin
from ...env_side._process_group import TERMINATE_GRACE
from ...env_side._thread_caps import DEFAULT_THREADS_PER_ENV
from ...wire._frames import (
    LANE_ANSWER,
    READY,
    decode_reply,
    encode,
    encode_action,
    encode_array_action,
    encode_spin,
)
from ...wire._pickles import dumps, loads, not_pickled, pickled_for, raw_dtype
from ...wire._requests import Request
from ...wire._shared_memory import AUTO_THRESHOLD, Layout, available
from .._base import Worker
from .._slotted import WORKER_KEYWORDS, SlottedWorker
from ._host import CHILD_STARTS, ChildRecipe, Host

__all__ = ["ProcessWorker"]

S = TypeVar("S")

_KILL_GRACE = 5.0  # seconds to wait for the exit after SIGKILL before warning


@documented_with(Worker)
class ProcessWorker(SlottedWorker[S, Host]):
    """Runs the env in a child process (crash isolation, true parallelism).

    The env is sent with cloudpickle, so lambdas and classes defined in ``__main__`` work,
    and the gymnasium ids registered in this process when the child starts can be made
    there (``gymnasium.make`` in a factory).
    The child ignores SIGINT: the parent decides when it stops. ``aclose`` sends CLOSE,
    waits ``cleanup_time``, then sends SIGTERM, then SIGKILL. A step past its deadline
    kills the child at once (with every env it hosts). Use :meth:`hosted` (or
    ``make_pool(..., envs_per_process=k)``) to put several envs in one child.

    :param context: a multiprocessing context or start method name; default
        :func:`~aioenv.workers.default_context` (forkserver with preloads, else spawn).
    :param shared_memory: ``"auto"`` (the default: observations of 8 KiB or more, in a
        space with a fixed layout, travel through shared memory), True (whenever the space
        allows) or False (always through the socket, and steps too: no lane). Either way
        the states handed out own their arrays unless the pool was made with ``copy=False``.
    :param idle_spin: seconds the child keeps polling for its next request after each
        answer before it sleeps (default 0: it sleeps at once). In a lockstep loop with a
        core to spare per child this saves both sides a wake-up per step; an idle pool
        costs at most this much CPU per child after each answer. The child stops polling
        for a while when polling does not pay (the request came after the spin, or the
        child was off its CPU for most of it: the machine is busy). At most 0.01.
    :param threads_per_env: the threads each native thread pool of the child may use
        (OpenMP, OpenBLAS, MKL, BLIS, Accelerate, numexpr, torch, OpenCV); default 1, so
        that env processes do not fight over the cores. The child sets
        ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
        ``BLIS_NUM_THREADS``, ``VECLIB_MAXIMUM_THREADS`` and ``NUMEXPR_NUM_THREADS``
        before it builds the env, caps the libraries already loaded, and caps torch and
        OpenCV as the env imports them (it never imports them itself). One of these
        variables set in this process's environment keeps its value there. None leaves
        every pool as the libraries set it.
    """

    kind = "process"
    _discard_verb = "killed"
    _per_host_option = "envs_per_process"
    _off_loop = CHILD_STARTS
    _sent_to = "a worker process"

    def __init__(
        self,
        env: EnvSource,
        *,
        seed: int | None = None,
        cleanup_time: float = SUPERVISION_DEFAULTS.cleanup_time,
        context: Context | str | None = None,
        step_timeout: float | None = SUPERVISION_DEFAULTS.step_timeout,
        start_timeout: float | None = SUPERVISION_DEFAULTS.start_timeout,
        reset_timeout: float | None = SUPERVISION_DEFAULTS.reset_timeout,
        episode_timeout: float | None = SUPERVISION_DEFAULTS.episode_timeout,
        shared_memory: bool | Literal["auto"] = "auto",
        idle_spin: float = DEFAULT_IDLE_SPIN,
        threads_per_env: int | None = DEFAULT_THREADS_PER_ENV,
        _start: bool = True,
    ) -> None:
        given = locals()  # Worker's keywords, taken above under their own names
        super().__init__(env, **{name: given[name] for name in WORKER_KEYWORDS})
        if not (isinstance(shared_memory, bool) or shared_memory == "auto"):
            raise ValueError(f"shared_memory must be True, False or 'auto', got {shared_memory!r}")
        if shared_memory is True and not available():
            raise ValueError(
                "shared_memory=True needs os.memfd_create (Linux); use shared_memory='auto'"
            )
        self._shared_memory = shared_memory
        self._idle_spin = checked_idle_spin(idle_spin)
        self._spaces_reported: bytes | None = None  # the pickled spaces it reported last
        self._context = resolve_context(context)
        self._begin(self.source, threads_per_env, _start)

    @property
    def pid(self) -> int:
        """The process id of the child running this worker's env."""
        return self._current_host().pid

    @property
    def exitcode(self) -> int | None:
        """That child's exit code; None while it runs."""
        return self._current_host().exitcode

    @property
    def idle_spin(self) -> float:
        """Seconds the child polls for its next request before it blocks on it."""
        return self._idle_spin

    def set_idle_spin(self, seconds: float) -> None:
        """Make the child poll ``seconds`` (0: not at all) for each next request before
        it blocks, from its next wait on; a restarted child starts with it. A child that
        hosts several workers' envs waits one way for all of them: the last call for any
        of them sets it. Call it from the event loop the worker runs on."""
        self._idle_spin = checked_idle_spin(seconds)
        if self._host is not None:
            self._host.send(encode_spin(self._idle_spin, self._slot))

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
        return cls._hosted(env, seeds, envs_per_process, **options)

    def _start_host(self, **recipe: Any) -> Host:
        recipe.update(context=self._context, name=self.env_name, idle_spin=self._idle_spin)
        return Host(ChildRecipe(**recipe))

    # What the steps travel in ------------------------------------------------------------
    def _lane(self) -> None:
        """Offer the current host this env's lane (:mod:`aioenv.engine._lane`), unless it
        has one. Its states view the lane's row where shared memory is asked for, or the
        observations are large (``"auto"``); the others are copies. Where no memory file
        can be made (no ``os.memfd_create``: macOS), there is no lane: every step takes
        the socket, as ``shared_memory=False`` has them do.

        A new process (a restart's) gets a lane of its own, which a killed one cannot
        write, once its child's READY comes: until the start is done, the child's end of
        the alive socket is still in this process, where a lane's three descriptors would
        make it readable with fewer than the 4 bytes a stale multiprocessing sentinel of
        the same number is read for (a start that polls it would wait for ever)."""
        host, slot = self._current_host(), self._slot
        if self._shared_memory is not False and available() and not host.has_lane(slot):
            # Views where asked for (True), or ("auto") for observations of at least
            # AUTO_THRESHOLD bytes; a space of no fixed layout gets no lane (NoLayout).
            layout = Layout.of(self.observation_space)
            large = layout is not None and layout.nbytes >= AUTO_THRESHOLD
            views = self._shared_memory is True or large
            with contextlib.suppress(NoLayout, TypeError):  # TypeError: None, or not gymnasium
                spaces = self.observation_space, self.action_space
                host.offer_lane(Lane(*spaces, views, self.num_envs), slot)

    def _on_lane_answer(self, host: Host, lane: Lane) -> None:
        answer = lane.answered()
        if answer is not None and host is self._host:  # (a killed host's lane is closed)
            seq, step = answer
            if not isinstance(step, Exception):
                self._on_reply(seq, step, lane.views)
            elif seq == self._awaited:
                self._on_undecodable(seq, step)

    # Hooks -----------------------------------------------------------------------------
    def _spawn(self, seed: int | None) -> None:
        before = self._host
        host = self._host_for_restart()
        if host is not before:  # a new child, started with the spin its first one was
            host.send(encode_spin(self._idle_spin, self._slot))
        host.send(encode(Request.REBUILD, 0, dumps((seed, self._episode)), self._slot))

    def _submit(self, seq: int, action: Any) -> None:
        host = self._host
        assert host is not None, "a process worker always has a host once built"
        # A step takes the lane once nothing sent before it is queued or waiting (the
        # lane's order); in a child of several envs, it is posted with that write.
        lane = host.lanes.get(self._slot) if not (host.writes.waiting or host.queued) else None
        if lane is not None and lane.put(seq, action, host.size == 1):
            if host.size > 1:
                host.post_soon(lane)
            return
        if isinstance(action, Reset):  # (RESET itself is pickled as an action is, below)
            payload = pickled_for(action, "reset arguments", self)
            frame = encode(Request.STEP, seq, payload, self._slot)
        elif type(action) is np.ndarray and raw_dtype(action.dtype):
            frame = encode_array_action(seq, action, self._slot)
        elif type(action) is Rollout:
            self._submit_control(seq, action)
            return
        else:
            try:
                frame = encode_action(seq, action, self._slot)
            except Exception as exc:
                raise not_pickled("action", self, exc) from exc
        host.send(frame)

    def _submit_control(self, seq: int, request: ControlRequest | Rollout) -> None:
        """A control request, or a rollout (which goes as a step): a policy they carry goes
        to each child process with its bytes once.

        Workers that share a child process (``envs_per_process``) share its cache of
        unpickled policies, so only the first request to a child carries a policy's bytes;
        the others carry its key alone. Which key a child has is recorded on its
        :class:`~aioenv.workers.process._host.Host` (``shipped_policy``, once sent with its
        bytes): a replacement child (after a death) is a new host and gets the bytes
        again."""
        host = self._current_host()
        package = package_of(request)
        if package is not None and host.shipped_policy == package.key:
            request = package.repacked(request, None)  # the package without its bytes
        payload = pickled_for(request, "request", self)
        kind = Request.CONTROL if type(request) is ControlRequest else Request.STEP
        host.send(encode(kind, seq, payload, self._slot))
        if package is not None:
            host.shipped_policy = package.key

    # From the host ---------------------------------------------------------------------
    def _on_host_message(self, host: Host, kind: int, seq: int, payload: Any) -> None:
        if host is not self._host:
            return  # a replaced host's words are never delivered
        if kind == READY:
            self._on_ready(payload)
            return
        if kind == LANE_ANSWER:
            in_use = payload == b"\x01"
            host.lane_answered(self._slot, in_use, functools.partial(self._on_lane_answer, host))
            return
        if not seq or (seq != self._awaited and seq not in self._controls):
            return  # stale (see workers._inbox): no need to decode it
        lane = host.lanes.get(self._slot)
        try:
            shared = None if lane is None else lane.observations
            result, borrowed = decode_reply(kind, payload, shared)
        except Exception as exc:
            self._on_undecodable(seq, exc)
            return
        self._on_reply(seq, result, borrowed)

    def _on_undecodable(self, seq: int, exc: Exception) -> None:
        """The reply to request ``seq`` could not be decoded here: its state is lost."""
        error = TransportError(
            f"{self.name}: aioenv could not decode the worker's reply in the parent "
            f"({type(exc).__name__}: {exc}); the state is lost, the env is not at fault "
            "(a state the parent cannot unpickle: make it plain data)",
            worker_id=self.worker_id,
        )
        error.__cause__ = exc
        future = self._controls.pop(seq, None)
        if future is not None:  # a control request's answer: its future gets the error
            if not future.done():
                future.set_exception(error)
            return
        self._on_failure(error, env_gone=False)

    def _on_ready(self, payload: Any) -> None:
        """The env reports its spaces (once built, and again after each rebuild): offer
        its lane (:meth:`_lane`), unless the child has it already. A restarted env that
        reports the same bytes keeps the same space objects, so its pool checks them at
        once; one that reports other spaces shows them, for its pool to refuse (its lane,
        laid out for the first, carries none of their observations). The lane is not
        needed to go on, so a failure here is a warning, and steps travel through the
        socket."""
        try:
            if self._spaces_reported is None or payload != self._spaces_reported:
                spaces = loads(payload)
                if spaces == (None, None) and self._spaces_reported is not None:
                    return  # a rebuild that failed: its reset says so; the spaces stay
                self.observation_space, self.action_space = spaces
                self._spaces_reported = bytes(payload)
            self._lane()
        except Exception as exc:
            self._spaces_reported = None
            warnings.warn(
                f"{self.name}: aioenv could not set up shared memory for its steps "
                f"({type(exc).__name__}: {exc}); they travel through the socket instead",
                RuntimeWarning,
                stacklevel=2,
            )

    def _on_host_exit(self, host: Host) -> None:
        killed_for = host.killed_for
        cause = "" if killed_for is None else f"; its process was killed because {killed_for[1]}"
        if host.start_error is not None:
            error = host.start_error
            message = (
                f"{self.name}: its process could not be started ({type(error).__name__}: {error})"
            )
        else:
            exitcode = describe_exit(host.exitcode)
            message = f"{self.name} died unexpectedly with exit code {exitcode}{cause}"
        killed_slot = None if killed_for is None else killed_for[0]
        self._host_gone(host, killed_slot, message, host.exitcode)

    # Closing ---------------------------------------------------------------------------
    def _start_close(self) -> None:
        self._ensure_loop()
        self._release_off_loop()  # closing: no restart comes any more
        self._current_host().release(self._slot, self.cleanup_time)

    async def _wait_closed(self, cleanup_time: float) -> None:
        # This worker waits for the hosts it was the last to release (or that died).
        hosts = [
            host
            for host in self._hosts
            if host.exited is not None and (not host.in_use or not host.alive)
        ]
        steps = ((cleanup_time, "terminate"), (TERMINATE_GRACE, "kill"), (_KILL_GRACE, ""))
        for wait, how in steps:
            with anyio.move_on_after(wait):
                for host in hosts:
                    assert host.exited is not None
                    await host.exited.wait()
            hosts = [host for host in hosts if host.exitcode is None]
            if not hosts:
                return
            for host in hosts:
                host.force(how)
        warnings.warn(
            f"{self.name}: {', '.join(host.label for host in hosts)} did not exit even after "
            "SIGKILL; they are left behind",
            RuntimeWarning,
            stacklevel=3,
        )


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

"""The parent's side of the engine: a vector env's envs in child processes, stepped through
one shared step buffer, with no event loop and no pool between the calling thread and
the children.

A lockstep step writes each child's actions into its rows of the buffer, posts each
child's request wake, sleeps (the GIL released) on the one answer wake until every child
has posted, and reads the results from the buffer; only what has no fixed size (infos, a
failure) comes as a message beside it (:mod:`aioenv.engine._channel`), and only when there
is some. Requests that are not steps (resets, calls, attributes) go as messages through
the same hand-off, so every request reaches a child in the order it was made.

A child's death is noticed while the parent waits for it (its process sentinel is watched
beside the wake): the request fails with :class:`~aioenv.WorkerDied`, and every later call
with :class:`~aioenv.WorkerRemoved`, since the vector env cannot go on without its envs.
The children lead process groups of their own; closing asks each to close its envs, then
waits, terminates and kills, and ends what the envs started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import signal
import socket
from collections.abc import Sequence
from typing import Any

from ..core import _pickling as pickling
from ..core._commands import Command, Reset
from ..core._environment import BatchStep, EnvSource
from ..core._errors import EnvError, WorkerDied, WorkerError, WorkerRemoved
from ..core._messages import ControlRequest, EpisodeOptions, Failure
from ..core._registry import snapshot as registry_snapshot
from ..core._seeds import worker_seeds
from ..env_side._idle_spin import DEFAULT_IDLE_SPIN
from ..env_side._process_group import TERMINATE_GRACE, signal_group
from ..env_side._thread_caps import DEFAULT_THREADS_PER_ENV, ThreadCaps
from ._buffer import StepBuffer, rows_of, write_rows
from ._channel import receive_message, send_message
from ._child import ChildPlan
from ._start import ChildStart, Context, resolve_context
from ._wake import Gone, Wake

__all__ = ["CLOSE_GRACE", "ENGINE_OPTIONS", "EngineChildren"]

#: The program of an engine child, imported in the child only.
CHILD_PROGRAM = "aioenv.engine._child:serve"
#: Seconds a child is given to close its envs and exit before it is terminated.
CLOSE_GRACE = 5.0
#: The options of a vector env whose envs step through the engine; any other pool option
#: (deadlines, restarts, ...) still takes the pool.
ENGINE_OPTIONS = frozenset(
    {"seed", "max_episode_steps", "context", "idle_spin", "threads_per_env", "copy"}
)


@dataclasses.dataclass
class _Child:
    """One child: its process, the parent's ends of its sockets, its request wake and
    its rows of the buffer."""

    name: str
    start: ChildStart
    request: Wake
    rows: slice

    @property
    def first(self) -> int:
        return int(self.rows.start)


class EngineChildren:
    """The envs of ``groups`` (a source per child, a :class:`VectorSource` of its envs;
    ``sizes[w]`` envs each) in child processes, behind the calls a vector env asks of its
    envs (:class:`aioenv.vector._runtime.Envs`), by child id. ``observation_space`` and
    ``action_space`` are one env's; ValueError if either has no fixed layout in memory.
    Nothing starts until :meth:`start`."""

    def __init__(
        self,
        groups: Sequence[EnvSource],
        sizes: Sequence[int],
        observation_space: Any,
        action_space: Any,
        *,
        autoreset: object,
        seed: int | None = None,
        max_episode_steps: int | None = None,
        context: Context | str | None = None,
        idle_spin: float = DEFAULT_IDLE_SPIN,
        threads_per_env: int | None = DEFAULT_THREADS_PER_ENV,
        copy: bool = False,  # the vector env copies what it returns itself
    ) -> None:
        del copy
        self._episode = EpisodeOptions(autoreset=autoreset, max_episode_steps=max_episode_steps)  # type: ignore[arg-type]
        self.autoreset: str = self._episode.autoreset
        self.closed = False
        self.sizes = list(sizes)
        n = sum(sizes)
        self._spaces = (observation_space, action_space)
        self._buffer = StepBuffer(observation_space, action_space, n)
        self._answer = Wake.new()
        self._context = resolve_context(context)
        self._groups = list(groups)
        self._seeds = worker_seeds(seed, len(self._groups))
        self._idle_spin = float(idle_spin)
        self._thread_caps = ThreadCaps.resolve(threads_per_env, os.environ, "AioVectorEnv")
        bounds = [0, *itertools.accumulate(sizes)]
        self._rows = [slice(lo, hi) for lo, hi in itertools.pairwise(bounds)]
        self._children: list[_Child] = []
        self._pending: set[int] = set()  # the children handed a request not yet read
        self._taken = 0  # the answer wake's posts taken for them so far
        #: Children that died, by id: every later call raises WorkerRemoved.
        self._dead: dict[int, WorkerDied] = {}

    # Start ---------------------------------------------------------------------------------
    def start(self) -> tuple[list[Any], list[Any]]:
        """Start every child and build its envs; their spaces, a list per child. A child
        whose env fails to build raises its EnvError (closing is the caller's)."""
        registry = registry_snapshot()
        n = self._buffer.rewards.shape[0]
        for w, (group, rows) in enumerate(zip(self._groups, self._rows, strict=True)):
            envs = (
                f"env {rows.start}"
                if rows.stop - rows.start == 1
                else f"envs {rows.start}-{rows.stop - 1}"
            )
            name = f"process worker {w} ({envs})"
            plan = ChildPlan(
                pickling.dumps(group),
                self._seeds[w],
                self._episode,
                registry,
                self._thread_caps,
                self._idle_spin,
                self._spaces,
                rows.start,
                rows.stop,
                n,
            )
            start = ChildStart(self._context, name, [plan], CHILD_PROGRAM)
            child = _Child(name, start, Wake.new(), rows)
            self._children.append(child)
            start.start()
            fds = [self._buffer.fd, *child.request.descriptors(), *self._answer.descriptors()]
            socket.send_fds(start.socket, [b"\0"], fds)
        for w, child in enumerate(self._children):
            try:
                built = receive_message(child.start.socket)
            except (EOFError, OSError):
                raise self._died(w, "while it built its envs") from None
            if isinstance(built, Failure):
                raise EnvError.from_failure(built, child.name, w)
        return self.get_attr("observation_space"), self.get_attr("action_space")

    # Requests out, answers in --------------------------------------------------------------
    def exchange(self, ids: list[int], requests: list[Any]) -> tuple[list[Any], list[WorkerError]]:
        """Send ``requests[k]`` to child ``ids[k]`` and take every answer."""
        self.dispatch(ids, requests, True)
        return self.collect(ids)

    def dispatch(self, ids: list[int], requests: list[Any], drop: bool) -> None:
        """Hand each child its request without waiting; what was in flight is dropped
        first (it always is: a lockstep vector env has one request per child at most)."""
        self._check_usable()
        if self._pending:
            self._answers()  # left by an interrupted call, or dropped by the caller
        for w, request in zip(ids, requests, strict=True):
            self._hand(w, request)

    def collect(self, ids: list[int]) -> tuple[list[Any], list[WorkerError]]:
        answers = self._answers()
        errors = [answer for answer in answers.values() if isinstance(answer, WorkerError)]
        if errors:
            return [], errors
        return [answers[w] for w in ids], []

    def receive(self, count: int, held: dict[int, Any]) -> WorkerError | None:
        error = None
        for w, answer in self._answers().items():
            if isinstance(answer, WorkerError):
                error = error or answer
            else:
                held[w] = answer
        return error

    def _hand(self, w: int, request: Any, op: str = "step") -> None:
        """Write child ``w``'s request into its rows (a batch of actions) or send it as a
        message (anything else), then wake it."""
        child = self._children[w]
        notes = self._buffer.notes
        message = op != "step" or isinstance(request, (Reset, Command))
        if not message:
            try:
                write_rows(rows_of(self._buffer.actions, child.rows), request)
            except (ValueError, TypeError):
                message = True  # not the space's layout: the child's runner says what is wrong
        notes[child.first] = message
        child.request.post()
        self._pending.add(w)
        if message:
            send_message(child.start.socket, (op, request))

    def _answers(self, timeout: float | None = None) -> dict[int, Any]:
        """Wait for every child handed a request, and take their answers: a BatchStep or
        a control's result, or the WorkerError that replaced it, by child id. Interrupted
        (Ctrl-C), it leaves them pending, the posts it took counted, for the next call.
        With ``timeout``, it gives up waiting after so many seconds (closing): the
        children that have not answered are left out."""
        answers: dict[int, Any] = {}
        while self._taken < len(self._pending):
            waiting = sorted(self._pending)
            watch = [self._children[w].start.process.sentinel for w in waiting]
            try:
                posts = self._answer.wait(timeout, watch)
            except Gone as gone:
                w = next(w for w in waiting if self._children[w].start.process.sentinel == gone.fd)
                self._pending.discard(w)
                answers[w] = self._died(w, "while it stepped")
                continue
            if not posts:
                return answers  # timed out
            self._taken += posts
        for w in sorted(self._pending):
            answers[w] = self._read(w)
        self._pending.clear()
        self._taken = 0
        return answers

    def _read(self, w: int) -> Any:
        child = self._children[w]
        buffer = self._buffer
        rows = child.rows
        if buffer.notes[child.first]:
            try:
                answer = receive_message(child.start.socket)
            except (EOFError, OSError):
                return self._died(w, "while it answered")
            if isinstance(answer, Failure):
                return EnvError.from_failure(answer, child.name, w)
            if not (type(answer) is BatchStep and answer.observations is None):
                return answer  # a whole reset's BatchStep, or a control's result
            infos: BatchStep[Any] = answer
        else:
            infos = _NO_INFOS
        return dataclasses.replace(
            infos,
            observations=rows_of(buffer.observations, rows),
            rewards=buffer.rewards[rows].copy(),
            terminated=buffer.terminated[rows].copy(),
            truncated=buffer.truncated[rows].copy(),
        )

    # Controls ------------------------------------------------------------------------------
    def _control(self, requests: dict[int, Any], op: str = "control") -> list[Any]:
        """Each child's answer to its request (None where it had none); a child's error
        is raised. ``op``: a ControlRequest's, or ``"spin"`` (seconds to poll)."""
        self._check_usable()
        if self._pending:
            self._answers()
        for w, request in requests.items():
            self._hand(w, request, op)
        answers = self._answers()
        for answer in answers.values():
            if isinstance(answer, WorkerError):
                raise answer
        return [answers.get(w) for w in range(len(self._children))]

    def call_envs(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        request = ControlRequest("call", name, args, kwargs)
        return self._control(dict.fromkeys(range(len(self._children)), request))

    def apply_envs(
        self, functions: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[Any]:
        return self._control(
            {
                w: ControlRequest("apply", "", (function, *args), kwargs)
                for w, function in enumerate(functions)
                if function is not None
            }
        )

    def get_attr(self, name: str) -> list[Any]:
        request = ControlRequest("get", name)
        return self._control(dict.fromkeys(range(len(self._children)), request))

    def set_attr(self, name: str, values: Any) -> None:
        self._control(
            {
                w: ControlRequest("set", name, (values[w] if isinstance(values, list) else values,))
                for w in range(len(self._children))
            }
        )

    @property
    def idle_spin(self) -> float:
        """Seconds each child polls for its next request before it sleeps."""
        return self._idle_spin

    def set_idle_spin(self, seconds: float) -> None:
        """Make every child poll ``seconds`` for its next request before it sleeps."""
        self._idle_spin = float(seconds)
        every = range(len(self._children))
        self._control(dict.fromkeys(every, self._idle_spin), "spin")

    def __len__(self) -> int:
        return len(self._rows)

    def has_pending(self, worker_id: int) -> bool:
        return worker_id in self._pending

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    # Failures and close --------------------------------------------------------------------
    def _died(self, w: int, when: str) -> WorkerDied:
        child = self._children[w]
        process = child.start.process
        process.join(TERMINATE_GRACE)
        error = WorkerDied(
            f"{child.name}: the child process exited with code {process.exitcode} {when}; "
            "its envs are lost (a segfault, os._exit, or a kill from outside). The vector env "
            "cannot go on without them: close it and make a new one",
            worker_id=w,
            exitcode=process.exitcode,
        )
        self._dead[w] = error
        return error

    def _check_usable(self) -> None:
        if self._dead:
            w = min(self._dead)
            removed = WorkerRemoved(
                f"{self._children[w].name} of the AioVectorEnv died ({self._dead[w].args[0]}); "
                "an AioVectorEnv has a fixed number of envs and cannot go on without them: "
                "close it and make a new one",
                w,
            )
            removed.__cause__ = self._dead[w]
            raise removed

    def close(self) -> None:
        """Ask every child to close its envs and exit; wait ``CLOSE_GRACE`` seconds, then
        terminate and kill what is left, with whatever its envs started."""
        if self.closed:
            return
        self.closed = True
        if self._pending:
            self._answers(CLOSE_GRACE)  # a child mid-step would write its note over ours
        notes = self._buffer.notes
        for child in self._children:
            with contextlib.suppress(OSError):
                notes[child.first] = 1
                child.request.post()
                send_message(child.start.socket, None)
        for child in self._children:
            process = child.start.process
            if process.pid is None:  # its start failed
                child.start.close()
                continue
            process.join(CLOSE_GRACE)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if process.exitcode is None:
                    signal_group(process.pid, sig)
                    process.join(TERMINATE_GRACE)
            signal_group(process.pid, signal.SIGKILL)  # what the envs left behind
            child.start.close()
            child.request.close()
            with contextlib.suppress(ValueError):  # still running: nothing more to do
                process.close()
        self._answer.close()
        self._buffer.close()


#: The infos of a step that had none: the answer's other parts come from the buffer.
_NO_INFOS: BatchStep[Any] = BatchStep(None, None, None, None, {}, {}, {}, {}, {})

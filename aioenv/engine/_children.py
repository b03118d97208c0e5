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

import itertools
import os
from collections.abc import Sequence
from typing import Any

from ..core import _pickling as pickling
from ..core._commands import Command, Reset
from ..core._environment import BatchStep, EnvSource, Stepped
from ..core._errors import EnvError, WorkerDied, WorkerError, no_pool
from ..core._messages import ControlRequest, EpisodeOptions
from ..core._registry import snapshot as registry_snapshot
from ..core._seeds import worker_seeds
from ..env_side._idle_spin import DEFAULT_IDLE_SPIN
from ..env_side._thread_caps import DEFAULT_THREADS_PER_ENV, ThreadCaps
from ..wire._frames import decode_infos
from ._buffer import StepBuffer, copied, rows_of, write_rows
from ._channel import encoded, post_with
from ._child import ChildPlan
from ._family import CLOSE_GRACE, Child, together
from ._start import Context, resolve_context
from ._wake import Gone, Wake

__all__ = ["ENGINE_OPTIONS", "EngineChildren"]

#: The options of a vector env whose envs step through the engine; any other pool option
#: (deadlines, restarts, ...) still takes the pool.
ENGINE_OPTIONS = frozenset({"seed", "max_episode_steps", "context", "idle_spin", "threads_per_env"})


class EngineChildren:
    """The envs of ``groups`` (a source per child, a :class:`VectorSource` of its envs;
    ``sizes[w]`` envs each) in child processes, behind the calls a vector env asks of its
    envs (:class:`aioenv.vector._runtime.Envs`), by child id. ``observation_space`` and
    ``action_space`` are one env's; ValueError if either has no fixed layout in memory.
    ``copy``: a :meth:`step` returns observations of its own, else the buffer's. Nothing
    starts until :meth:`start`."""

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
        copy: bool = True,
    ) -> None:
        self.batched = True
        self.by_env = False
        self.closes_at_exit = False
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
        self._children: list[Child] = []
        self._sentinels: list[int] = []  # each child's process sentinel, watched for its exit
        #: What a step of every child uses: its first rows, its request wakes, its ids.
        self._firsts = [rows.start for rows in self._rows]
        # The notes as bytes: cleared and looked at per step for less than a microsecond
        # (numpy's indexing and ``any`` cost a few).
        self._notes = memoryview(self._buffer.notes)
        self._no_notes = bytes(n)
        self._every = range(len(self._rows))
        self._copy = copy
        self._pending: set[int] = set()  # the children handed a request not yet read
        self._taken = 0  # the answer wake's posts taken for them so far
        self._in_buffer: set[int] = set()  # those whose request is a step in the buffer
        #: Children that died, by id: every later call raises WorkerRemoved.
        self._dead: dict[int, WorkerDied] = {}

    # Start ---------------------------------------------------------------------------------
    def start(self) -> tuple[list[Any], list[Any]]:
        """Start every child and build its envs; their spaces, a list per child. A child
        whose env fails to build raises its EnvError (closing is the caller's)."""
        registry = registry_snapshot()
        n = self._buffer.rewards.shape[0]
        for w, (group, rows) in enumerate(zip(self._groups, self._rows, strict=True)):
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
            child = Child.of(w, self._context, plan)
            self._children.append(child)
            child.launch(self._buffer.fd, self._answer)
            self._sentinels.append(child.sentinel)
        self._requests = [child.request for child in self._children]
        for w, child in enumerate(self._children):
            try:
                built = child.message(w)
            except (EOFError, OSError):
                raise self._died(w, "while it built its envs") from None
            if isinstance(built, EnvError):
                raise built
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
        notes[child.rows.start] = message
        if message:
            self._in_buffer.discard(w)
            post_with(child.start.socket, child.request, encoded((op, request)))
        else:
            self._in_buffer.add(w)
            child.request.post()
        self._pending.add(w)

    def _answers(self, timeout: float | None = None) -> dict[int, Any]:
        """Wait for every child handed a request, and take their answers: a BatchStep or
        a control's result, or the WorkerError that replaced it, by child id. With
        ``timeout``, it gives up waiting after so many seconds (closing): the children
        that have not answered are left out."""
        answers: dict[int, Any] = self._wait(timeout)
        if self._taken < len(self._pending):
            return answers  # timed out
        for w in sorted(self._pending):
            answers[w] = self._read(w)
        self._pending.clear()
        self._taken = 0
        return answers

    def _wait(self, timeout: float | None = None) -> dict[int, WorkerError]:
        """Wait until every child handed a request has posted its answer: the children
        that died meanwhile, their errors by id (no longer pending). Interrupted (Ctrl-C),
        it leaves the others pending, the posts it took counted, for the next call."""
        died: dict[int, WorkerError] = {}
        while self._taken < len(self._pending):
            waiting = sorted(self._pending)
            watch = [self._sentinels[w] for w in waiting]
            try:
                posts = self._answer.wait(timeout, watch)
            except Gone as gone:
                w = waiting[watch.index(gone.fd)]
                self._pending.discard(w)
                died[w] = self._died(w, "while it stepped")
                continue
            if not posts:
                break  # timed out
            self._taken += posts
        return died

    # The lockstep step: the hot path ---------------------------------------------------------
    def step(self, actions: Any) -> Stepped | None:
        """Step every env with its row of ``actions`` (a batch of the vector env's action
        space): see :data:`Stepped`; the observations are copied from the buffer (or,
        without ``copy``, the buffer's own, valid until the next call). An env's failure
        is raised (a WorkerError, the others of the step attached). None where the actions
        do not fit the buffer exactly (the caller splits them and goes the general way,
        which says what is wrong) or where requests are in flight."""
        if self._pending or self._dead:
            return None
        buffer = self._buffer
        try:
            write_rows(buffer.actions, actions)
        except (ValueError, TypeError):
            return None
        self._notes[:] = self._no_notes
        for wake in self._requests:
            wake.post()
        self._pending.update(self._every)
        self._in_buffer.update(self._every)
        died = self._wait()
        self._pending.clear()
        self._taken = 0
        observations = buffer.observations
        if self._copy:
            observations = copied(observations)
        parts = self._infos(died) if died or self._notes != self._no_notes else {}
        rewards, terminated, truncated = buffer.rewards, buffer.terminated, buffer.truncated
        return observations, rewards.copy(), terminated.copy(), truncated.copy(), parts

    def _infos(self, died: dict[int, WorkerError]) -> dict[int, BatchStep[Any]]:
        """The infos of a step's children that sent some, as BatchSteps of their rows
        that hold nothing else, by child id; the failures of those that failed or died,
        raised all together."""
        errors = list(died.values())
        parts: dict[int, BatchStep[Any]] = {}
        for w, noted in enumerate(self._buffer.notes[self._firsts].tolist()):
            if not noted or w in died:
                continue
            answer = self._message(w)
            if isinstance(answer, WorkerError):
                errors.append(answer)
            else:
                flag, data = answer
                parts[w] = decode_infos(flag, data, None, None, None, None)
        if errors:
            raise together(errors)
        return parts

    def _message(self, w: int) -> Any:
        """Child ``w``'s message: its answer, or the WorkerError a failure or its death
        is."""
        try:
            return self._children[w].message(w)
        except (EOFError, OSError):
            return self._died(w, "while it answered")

    def _read(self, w: int) -> Any:
        """Child ``w``'s answer, which it posted: from its rows of the buffer (a step), a
        message (a reset, a control, a failure) or both (a step with infos)."""
        buffer = self._buffer
        rows = self._children[w].rows
        answer = self._message(w) if buffer.notes[rows.start] else None
        stepped = w in self._in_buffer
        if not stepped or isinstance(answer, WorkerError):
            return answer  # a whole reset's BatchStep, a control's result, an error
        parts = (
            rows_of(buffer.observations, rows),
            buffer.rewards[rows].copy(),
            buffer.terminated[rows].copy(),
            buffer.truncated[rows].copy(),
        )
        if answer is None:
            return BatchStep(*parts)
        flag, data = answer
        return decode_infos(flag, data, *parts)

    def observations(self) -> Any:
        """Every env's latest observation, from the buffer (every step and reset writes
        there): a copy, or with ``copy=False`` the buffer's own, valid until the next
        call."""
        observations = self._buffer.observations
        return copied(observations) if self._copy else observations

    @property
    def pool(self) -> Any:
        raise no_pool("in child processes through the engine's shared buffer")

    def allow_differing_observations(self) -> None:
        raise ValueError("the engine's buffer holds envs of one observation space")

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
        return [answers.get(w) for w in self._every]

    def _to_every(self, request: Any, op: str = "control") -> list[Any]:
        """Every child's answer to the same request."""
        return self._control(dict.fromkeys(self._every, request), op)

    def call_envs(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        return self._to_every(ControlRequest("call", name, args, kwargs))

    def apply_envs(
        self, functions: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[Any]:
        asked = {w: (f, *args) for w, f in enumerate(functions) if f is not None}
        return self._control({w: ControlRequest("apply", "", a, kwargs) for w, a in asked.items()})

    def get_attr(self, name: str) -> list[Any]:
        return self._to_every(ControlRequest("get", name))

    def set_attr(self, name: str, values: Any) -> None:
        per_child = values if isinstance(values, list) else [values] * len(self)
        self._control({w: ControlRequest("set", name, (per_child[w],)) for w in self._every})

    @property
    def idle_spin(self) -> float:
        """Seconds each child polls for its next request before it sleeps."""
        return self._idle_spin

    def set_idle_spin(self, seconds: float) -> None:
        """Make every child poll ``seconds`` for its next request before it sleeps."""
        self._idle_spin = float(seconds)
        self._to_every(self._idle_spin, "spin")

    def __len__(self) -> int:
        return len(self._rows)

    def has_pending(self, worker_id: int) -> bool:
        return worker_id in self._pending

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    # Failures and close --------------------------------------------------------------------
    def _died(self, w: int, when: str) -> WorkerDied:
        self._dead[w] = self._children[w].exit_error(w, when)
        return self._dead[w]

    def _check_usable(self) -> None:
        if self._dead:
            w = min(self._dead)
            raise self._children[w].removed(w, self._dead[w])

    def close(self) -> None:
        """Ask every child to close its envs and exit; wait ``CLOSE_GRACE`` seconds, then
        terminate and kill what is left, with whatever its envs started."""
        if self.closed:
            return
        self.closed = True
        if self._pending:
            self._answers(CLOSE_GRACE)  # a child mid-step would write its note over ours
        for child in self._children:
            child.ask_to_close(self._buffer.notes)
        for child in self._children:
            child.end()
        self._answer.close()
        self._buffer.close()

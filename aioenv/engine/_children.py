"""The parent's side of the engine: a vector env's envs in child processes, stepped through
one shared step buffer, with no event loop and no pool between the calling thread and
the children.

A lockstep step writes each child's actions into its rows of the buffer, posts each
child's request wake, sleeps (the GIL released) on the one answer wake until every child
has posted, and reads the results from the buffer; only what has no fixed size (infos, a
failure) comes as a message beside it (:mod:`aioenv.engine._child`), and only when there
is some. Requests that are not steps (resets, calls, attributes) go as messages through
the same hand-off, so every request reaches a child in the order it was made.

A child's death is noticed while the parent waits for it (its process sentinel is watched
beside the wake): the request fails with :class:`~aioenv.WorkerDied`, and every later call
with :class:`~aioenv.WorkerRemoved`, since the vector env cannot go on without its envs. A
child past its deadline (``step_timeout``, ``reset_timeout``, ``start_timeout``: timed
waits, by the rule every worker kind follows) is killed, and fails the same way with
:class:`~aioenv.WorkerTimeout`. With ``restart="on_failure"``, an env that raises is
restarted in its child, and a child that dies or hangs is replaced by a new one
(:mod:`aioenv.engine._revivals`), under the restart budget, as a pool restarts its
workers. An episode budget (``episode_timeout``: an env to a child) is timed by the
parent, and an episode past it ends cut short
(:class:`~aioenv.engine._revivals.EpisodeBudgets`). The children lead process groups of
their own; closing asks each to close its envs, then waits ``cleanup_time``, terminates
and kills, and ends what the envs started. How a request is handed to a child and its
answer taken back, the lockstep step included, is :mod:`aioenv.engine._handoffs`'.
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing.connection
import signal
import time
from collections.abc import Sequence
from typing import Any

from ..core import _pickling as pickling
from ..core._environment import BatchStep, EnvSource, copy_arrays
from ..core._errors import EnvError, WorkerError, no_pool
from ..core._messages import ControlRequest, EpisodeOptions
from ..core._registry import snapshot as registry_snapshot
from ..core._seeds import worker_seeds
from ..core._supervision import Supervision
from ..env_side._idle_spin import DEFAULT_IDLE_SPIN, checked_idle_spin
from ..env_side._process_group import TERMINATE_GRACE
from ..env_side._thread_caps import DEFAULT_THREADS_PER_ENV, ThreadCaps
from ._buffer import StepBuffer, rows_state
from ._child import ChildPlan, answer_of
from ._family import Child, together
from ._handoffs import HandOffs
from ._revivals import EpisodeBudgets, Revivals
from ._start import Context, resolve_context
from ._wake import Wake

__all__ = ["ENGINE_OPTIONS", "EngineChildren"]

#: The options of a vector env whose envs step through the engine (every supervision
#: option among them); any other pool option still takes the pool.
ENGINE_OPTIONS = frozenset(
    {"seed", "max_episode_steps", "context", "idle_spin", "threads_per_env"}
    | {field.name for field in dataclasses.fields(Supervision)}
)


class EngineChildren(HandOffs):
    """The envs of ``groups`` (a source per child, a :class:`VectorSource` of its envs;
    ``sizes[w]`` envs each) in child processes, behind the calls a vector env asks of its
    envs (:class:`aioenv.vector._runtime.Envs`), by child id. ``observation_space`` and
    ``action_space`` are one env's; ValueError if either has no fixed layout in memory.
    ``copy``: a :meth:`step` returns observations of its own, else the buffer's.
    ``supervision``: deadlines (``step_timeout``, ``reset_timeout``, ``start_timeout``)
    and ``cleanup_time``, as :class:`~aioenv.core._supervision.Supervision` takes them.
    Nothing starts until :meth:`start`. The hand-offs and the lockstep step are
    :class:`~aioenv.engine._handoffs.HandOffs`'."""

    batched = True
    by_env = False

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
        **supervision: Any,
    ) -> None:
        episode = EpisodeOptions(autoreset=autoreset, max_episode_steps=max_episode_steps)  # type: ignore[arg-type]
        self.sizes = list(sizes)
        n = sum(sizes)
        # Every option is checked before the buffer and the wake take descriptors.
        options, spin = Supervision(**supervision), checked_idle_spin(idle_spin)
        if options.episode_timeout is not None and max(sizes) > 1:
            raise ValueError(
                "episode_timeout times one episode per child; this vector env groups "
                f"{max(sizes)} envs in a child (envs_per_worker): use one env per worker"
            )
        self._context = resolve_context(context)
        thread_caps = ThreadCaps.resolve(threads_per_env, "AioVectorEnv")
        restarts = options.restart == "on_failure" or options.on_failure is not None
        in_child = dataclasses.replace(options, on_failure=None) if restarts else None
        spaces, registry = (observation_space, action_space), registry_snapshot()
        # Every child's plan but for its envs, rows and seeds (see _plans).
        shared = ChildPlan(
            b"", None, episode, registry, thread_caps, spin, spaces, slice(0), n, restarts=in_child
        )
        #: What each child is sent to build and serve its envs.
        self._plans = _plans(groups, sizes, seed, shared)
        buffer = StepBuffer(observation_space, action_space, n)
        try:
            answer = Wake.new()
        except BaseException:
            buffer.close()
            raise
        super().__init__(buffer, answer, options, episode.autoreset, copy, spin)
        if options.episode_timeout is not None:
            self.budgets = EpisodeBudgets(options.episode_timeout, n, self.autoreset)
            self.timed = True
        if self._plans[0].restarts is not None or self.budgets is not None:
            self.revivals = Revivals(self, self._plans, options, self.autoreset)
            self.unsettled = self.revivals.unsettled
            self.report = self.revivals.report

    # Start ---------------------------------------------------------------------------------
    def start(self) -> tuple[list[Any], list[Any]]:
        """Start every child and build its envs; their spaces, a list per child. A child
        whose env fails to build raises its EnvError (closing is the caller's)."""
        for w, plan in enumerate(self._plans):
            self._launch(w, plan)
        for w in range(len(self.children)):
            error = self._built(w)
            if error is not None:
                raise error
        return self.get_attr("observation_space"), self.get_attr("action_space")

    def respawn(self, w: int, plan: ChildPlan) -> WorkerError | None:
        """Replace child ``w`` (dead, or killed) with a new one serving ``plan``, its envs
        built: None, or the error of its start (its env's, its death, its deadline)."""
        self._launch(w, plan)
        return self._built(w)

    def _launch(self, w: int, plan: ChildPlan) -> None:
        """Start child ``w`` serving ``plan``, in the place of the one before it, if any
        (ended first); its envs are being built when this returns (:meth:`_built`). Where
        its start fails, the new child is in its place all the same, for :meth:`close` to
        end (not started, it has no sentinel to be watched by: nothing waits on it)."""
        child = Child.of(w, self._context, plan)  # (failing, it leaves the old one to close)
        if w < len(self.children):
            self.children[w].end(0.0)
            self.children[w] = child
        else:
            self.children.append(child)
        child.launch(self.buffer.fd, self.answer, self.options)

    def _built(self, w: int) -> WorkerError | None:
        """Child ``w``'s envs built: None, or the error of its start (its env's, its death,
        its deadline). Its first message (its spaces, or the EnvError of its build) is
        waited for by the start-up deadline it was handed, if any: past it, the
        WorkerTimeout that says so (the child killed)."""
        child = self.children[w]
        if child.timeout is not None:
            left = max(0.0, child.due - time.monotonic())
            if not multiprocessing.connection.wait([child.start.socket, child.sentinel], left):
                return child.timed_out(w)
        try:
            built = answer_of(child.start.socket, child.name, w)
        except (EOFError, OSError):
            return self.died(w, "while it built its envs")
        return built if isinstance(built, EnvError) else None

    def last_state(self, w: int) -> BatchStep[Any]:
        """Child ``w``'s rows as it left them: its envs' last state (no infos)."""
        return rows_state(self.buffer, self.children[w].rows)

    # Requests out, answers in --------------------------------------------------------------
    def exchange(self, ids: list[int], requests: list[Any]) -> tuple[list[Any], list[WorkerError]]:
        """Send ``requests[k]`` to child ``ids[k]`` and take every answer."""
        self.dispatch(ids, requests, True)
        return self.collect(ids)

    def dispatch(self, ids: list[int], requests: list[Any], drop: bool) -> None:
        """Hand each child its request without waiting (none of them has one in flight);
        with ``drop``, what the others have in flight is waited for and dropped first."""
        self.check_usable()
        if drop:
            self.early.clear()
            if self.pending:
                self.answers()  # left by an interrupted call, or dropped by the caller
        for w, request in zip(ids, requests, strict=True):
            self.hand(w, request)

    def collect(self, ids: list[int]) -> tuple[list[Any], list[WorkerError]]:
        self.check_usable()
        answers = self.answers()
        if self.early:
            answers.update(self.early)
            self.early.clear()
        errors = [answer for answer in answers.values() if isinstance(answer, WorkerError)]
        if errors:
            return [], errors
        return [answers[w] for w in ids], []

    def receive(self, count: int, held: dict[int, Any]) -> WorkerError | None:
        """Take answers into ``held`` (by child id), the first children to answer first
        (those that answered together, by id), until it has ``count``; the error of a
        child that failed, died or hung instead (the answers taken before it stay in
        ``held``, the others pending, so a second error is the next call's).

        Which children have answered is read from their marks, which each writes just
        before its post: once as many pending children are marked as posts were counted
        for them, the marked ones are exactly those that posted, so what they wrote before
        their posts is visible (see :mod:`aioenv.engine._wake`); more marks than posts
        means a post is on its way, waited for."""
        self.check_usable()
        for w in sorted(self.early)[: count - len(held)] if self.early else ():
            answer = self.early.pop(w)
            if isinstance(answer, WorkerError):
                return answer
            held[w] = answer
        marks = self.buffer.marks
        while len(held) < count:
            died: dict[int, WorkerError] = {}
            marked = [w for w in sorted(self.pending) if marks[self.children[w].rows.start]]
            if not marked or len(marked) > self._taken:
                self._wait_once(None, died)
                if died:
                    return together(list(died.values()))
                continue
            for w in marked[: count - len(held)]:  # the others stay marked, their posts counted
                answer = self._read(w)
                if self.budgets is not None:
                    self.budgets.opened(w, self.sent[w], answer)
                self.pending.discard(w)
                self._taken -= 1
                if isinstance(answer, WorkerError):
                    return answer  # the next marked stay pending: an error of theirs is kept
                held[w] = answer
                if self.revivals is not None and self.unsettled:
                    self.revivals.progress((w,))
        return None

    def observations(self) -> Any:
        """Every env's latest observation, from the buffer (every step and reset writes
        there): a copy, or with ``copy=False`` the buffer's own, valid until the next
        call."""
        observations = self.buffer.observations
        return copy_arrays(observations) if self.copy else observations

    @property
    def pool(self) -> Any:
        raise no_pool("in child processes through the engine's shared buffer")

    # Controls ------------------------------------------------------------------------------
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
        children = range(len(self.children))
        per_child = values if isinstance(values, list) else [values] * len(children)
        self._control({w: ControlRequest("set", name, (per_child[w],)) for w in children})

    def has_pending(self, worker_id: int) -> bool:
        return worker_id in self.pending or worker_id in self.early

    @property
    def num_pending(self) -> int:
        return len(self.pending) + len(self.early)

    # Close -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Ask every child to close its envs and exit; wait ``cleanup_time`` seconds (for
        them all, not each), then terminate and kill what is left, with whatever its envs
        started."""
        if self.closed:
            return
        self.closed = True
        grace, ended = self.options.cleanup_time, 0
        children, notes = self.children, self._notes
        due, asked, marks = time.monotonic() + grace, set(), self._marks
        try:
            while True:  # a child mid-step would write its note over ours: asked once done
                for w, child in enumerate(children):
                    if w not in asked and (w not in self.pending or marks[child.rows.start]):
                        if w in self.pending:  # read: a long message is written after a post
                            self._read(w)
                            self.pending.discard(w)
                        child.ask_to_close(notes)
                        asked.add(w)
                left = due - time.monotonic()
                if len(asked) == len(children) or left <= 0 or not self._wait_once(left, {}):
                    break
            for w in set(range(len(children))) - asked:  # hung past the grace: asked anyway
                children[w].ask_to_close(notes)
            for child in self.children:  # one grace for them all, then SIGTERM to each left
                if child.start.join(max(0.0, due - time.monotonic())) is None:
                    child.kill(signal.SIGTERM, 0.0)  # (not a reaped child: its pid is free)
            due = time.monotonic() + TERMINATE_GRACE  # and one after it, then SIGKILL
            for child in self.children:
                child.end(max(0.0, due - time.monotonic()), 0.0)
                ended += 1
        finally:  # interrupted (Ctrl-C), the children not ended yet are ended at once
            for child in self.children[ended:]:
                child.end(0.0)
            self.answer.close()
            self._notes.release()  # the buffer's notes and marks, as the hand-offs view them
            self._marks.release()
            self.buffer.close()


def _plans(
    groups: Sequence[EnvSource], sizes: Sequence[int], seed: int | None, shared: ChildPlan
) -> list[ChildPlan]:
    """What each child of ``groups`` (``sizes[w]`` envs each) is sent to build and serve
    its envs: ``shared`` (what every child is sent alike: its episode options, the
    registry, thread caps, idle spin, spaces, buffer size and restart options) with the
    child's own envs, rows and seeds. Each env's seed is the one it has in line or alone
    in a worker, however the envs are grouped; a child's own seed draws its restarts'."""
    bounds = itertools.pairwise([0, *itertools.accumulate(sizes)])
    seeds, envs_seeds = worker_seeds(seed, len(groups)), worker_seeds(seed, shared.n)
    return [
        dataclasses.replace(
            shared,
            payload=pickling.dumps(group),
            seed=seeds[w],
            rows=slice(lo, hi),
            child=w,
            env_seeds=tuple(envs_seeds[lo:hi]),
        )
        for w, (group, (lo, hi)) in enumerate(zip(groups, bounds, strict=True))
    ]

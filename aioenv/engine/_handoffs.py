"""The hand-offs between the parent and the engine's children: a request written into a
child's rows of the buffer (a batch of actions) or sent as a message beside it (anything
else), its request wake posted; the answers counted on the one answer wake and read back
the same two ways. The lockstep step, the hot path, is one of them for every child at once.

:class:`HandOffs` keeps what that takes: which children were handed a request and not
read yet, how many of the answer wake's posts were taken for them, when each must answer
(the deadline rule of :mod:`aioenv.core._supervision`, as timed waits), and the children
that died or hung. While the parent waits, each child's process sentinel is watched
beside the wake, so a death is noticed at once; a child past its deadline is killed.
Either way the request fails with that child's error, and every later hand-off raises
:class:`~aioenv.WorkerRemoved`: the vector env cannot go on without its envs; unless
restarts are on (:attr:`HandOffs.revivals`), and a new child answers in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core._commands import Command, Reset, is_reset
from ..core._environment import BatchStep, Stepped, copy_arrays, take_rows
from ..core._errors import WorkerDied, WorkerError
from ..core._supervision import Phase, Supervision, request_phase
from ..wire._frames import encode_reply
from ..wire._pickles import decode_infos
from ._buffer import (
    INFOS_IN_BUFFER,
    NEW_SPIN,
    PackedInfos,
    StepBuffer,
    rows_state,
    write_rows,
)
from ._child import GivenUp, answer_of
from ._family import Child, late, together, until_due
from ._wake import Gone, Wake

if TYPE_CHECKING:
    from ._revivals import EpisodeBudgets, Revivals

__all__ = ["HandOffs"]


class HandOffs:
    """The hand-offs to the children :meth:`add`-ed, through ``buffer`` and ``answer``
    (the answer wake), under ``options``' deadlines for envs of ``autoreset``; ``copy``:
    a :meth:`step` returns observations of its own, else the buffer's; ``idle_spin``:
    seconds the children poll for their next request before they sleep."""

    def __init__(
        self,
        buffer: StepBuffer,
        answer: Wake,
        options: Supervision,
        autoreset: str,
        copy: bool,
        idle_spin: float,
    ) -> None:
        self.buffer = buffer
        self.copy = copy
        #: Seconds each child polls for its next request before it sleeps (:meth:`set_idle_spin`).
        self.idle_spin = idle_spin
        self.answer = answer
        self.options = options
        self.timed = options.has_deadlines
        self.autoreset = autoreset
        #: The children handed off to (launched: each has its process sentinel).
        self.children: list[Child] = []
        self.pending: set[int] = set()  # the children handed a request not yet read
        self.early: dict[int, Any] = {}  # by child: answers a control took in flight, for recv
        self._taken = 0  # the answer wake's posts taken for them so far
        self._in_buffer: set[int] = set()  # those whose request is a step in the buffer
        #: What the records in each child's info slots are (its note says when it has some).
        self.packed = PackedInfos()
        #: Where the failures its children report with their answers go (``on_failure``).
        self.report: Callable[[list[WorkerError]], None] | None = None
        #: Children that died or hung, by id: every later hand-off raises WorkerRemoved.
        self.dead: dict[int, WorkerError] = {}
        #: Each child's last request handed, with its op (a lockstep step's is its rows).
        self.sent: dict[int, tuple[str, Any]] = {}
        self._lockstep = False  # a lockstep step is in flight
        #: Restarts of the children that die or hang (None: off).
        self.revivals: Revivals | None = None
        #: Each child's env's episode budget (``episode_timeout``; None: no budgets).
        self.budgets: EpisodeBudgets | None = None
        #: The children whose answers a revival's supervisor must hear of.
        self.unsettled: set[int] = set()
        #: Closing: a child that dies is not replaced any more.
        self.closed = False
        # The notes and marks as bytes: cleared and looked at per step for less than a
        # microsecond (numpy's indexing and ``any`` cost a few).
        self._notes = memoryview(buffer.notes)
        self._marks = memoryview(buffer.marks)
        self._zeros = bytes(len(buffer.notes))

    # Requests out ----------------------------------------------------------------------------
    def hand(self, w: int, request: Any, op: str = "step") -> None:
        """Write child ``w``'s request into its rows (a batch of actions) or send it as a
        message (anything else: ``op`` names a control's kind), then wake it."""
        child = self.children[w]
        buffer = self.buffer
        budgets, sent = self.budgets, (op, request)
        if budgets is not None and op == "step":
            instead = budgets.instead(w, request, lambda: rows_state(buffer, child.rows))
            if instead is not None:  # the episode ran out of its budget: the step is not sent
                op, request = instead
        note: int  # the child's: 0 a step in its rows, 1 a message, NEW_SPIN
        note = message = op != "step" or isinstance(request, (Reset, Command))
        if not message:
            try:
                write_rows(take_rows(buffer.actions, child.rows), request)
            except (ValueError, TypeError):
                # Not the space's layout: the child's runner says what is wrong.
                note = message = True
        elif op == "spin":  # its seconds in the buffer, which its note points to: no message
            buffer.spins[child.rows.start] = request
            note, message = NEW_SPIN, False
        buffer.notes[child.rows.start] = note
        buffer.marks[child.rows.start] = 0
        self.sent[w] = sent
        if self.timed:
            phase = None if op != "step" else "reset" if is_reset(request) else self._phase(w)
            if op == "expire":  # the child answers with its env's reset (see EpisodeBudgets)
                phase = "reset"
            child.handed(self.options, phase)
            if budgets is not None and phase is not None and phase != "reset":
                budgets.handed(w, child)
        if message:
            child.post(encode_reply(0, (op, request)))
        else:
            child.request.post()
        (self._in_buffer.discard if note else self._in_buffer.add)(w)
        self.pending.add(w)

    # The lockstep step: the hot path -------------------------------------------------------
    def step(self, actions: Any) -> Stepped | None:
        """Step every env with its row of ``actions`` (a batch of the vector env's action
        space): see :data:`Stepped`; the observations are copied from the buffer (or,
        without ``copy``, the buffer's own, valid until the next call). An env's failure
        is raised (a WorkerError, the others of the step attached). None where the actions
        do not fit the buffer exactly (the caller splits them and goes the general way,
        which says what is wrong) or where requests are in flight."""
        budgets = self.budgets
        if self.pending or self.dead or (budgets is not None and budgets.any_over()):
            return None
        buffer = self.buffer
        try:
            write_rows(buffer.actions, actions)
        except (ValueError, TypeError):
            return None
        self._notes[:] = self._marks[:] = self._zeros
        if self.timed:
            for w, child in enumerate(self.children):
                child.handed(self.options, self._phase(w))
                if budgets is not None:
                    budgets.handed(w, child)
        for child in self.children:
            child.request.post()
        every = range(len(self.children))
        self.pending.update(every)
        self._in_buffer.update(every)
        self._lockstep = True
        try:
            died = self.wait()
            self.pending.clear()
            self._taken = 0
            # Before the rows are read: a child that dies while it writes its message is
            # replaced, and the new one writes its rows (see _died_answering).
            parts = self._infos(died) if died or self._notes != self._zeros else {}
        finally:
            self._lockstep = False
        observations = buffer.observations
        if self.copy:
            observations = copy_arrays(observations)
        if self.revivals is not None and self.unsettled:
            self.revivals.progress(every)
        rewards, terminated, truncated = buffer.rewards, buffer.terminated, buffer.truncated
        if budgets is not None:
            budgets.stepped(terminated, truncated)
        return observations, rewards.copy(), terminated.copy(), truncated.copy(), parts

    def _phase(self, w: int) -> Phase:
        """The deadline a step of child ``w`` gets: a step's, or a step's and a reset's
        where it may reset an env (by the flags of its rows' last step, or while failures
        are counted against it: a new child answers its first step with resets)."""
        if w in self.unsettled:  # a new child's first step resets its envs, whatever mode
            return "step and reset"
        rows, buffer = self.children[w].rows, self.buffer
        ended = bool(buffer.terminated[rows].any() or buffer.truncated[rows].any())
        return request_phase(None, self.autoreset, ended)  # type: ignore[arg-type]

    # Controls, spins among them (the vector env's spin trial, between steps) ----------------
    def _control(self, requests: dict[int, Any], op: str = "control") -> list[Any]:
        """Each child's answer to its request (None where it had none); a child's error
        is raised. ``op``: a ControlRequest's, or ``"spin"`` (seconds to poll, handed
        through the buffer)."""
        self.check_usable()
        if self.pending:  # kept (early) for the pipelined calls that sent them to take
            self.early.update(self.answers())
        for w, request in requests.items():
            self.hand(w, request, op)
        answers = self.answers()
        for answer in answers.values():
            if isinstance(answer, WorkerError):
                raise answer
        return [answers.get(w) for w in range(len(self.children))]

    def _to_every(self, request: Any, op: str = "control") -> list[Any]:
        """Every child's answer to the same request."""
        return self._control(dict.fromkeys(range(len(self.children)), request), op)

    def set_idle_spin(self, seconds: float) -> None:
        """Make every child poll ``seconds`` for its next request before it sleeps."""
        self.idle_spin = float(seconds)  # the vector env's spin trial's (checked at start)
        self._to_every(self.idle_spin, "spin")

    # Answers in ------------------------------------------------------------------------------
    def wait(self) -> dict[int, WorkerError]:
        """Wait until every child handed a request has posted its answer: the children
        that died or ran past their deadlines meanwhile, their errors by id (no longer
        pending). Interrupted (Ctrl-C), it leaves the others pending, the posts it took
        counted, for the next call. (Closing waits so long at most through
        :meth:`_wait_once`'s ``timeout``, which a wait without one never sees run out.)"""
        died: dict[int, WorkerError] = {}
        while self._taken < len(self.pending):
            self._wait_once(None, died)
        return died

    def _wait_once(self, timeout: float | None, died: dict[int, WorkerError]) -> bool:
        """One sleep on the answer wake, until a post, a pending child's death or its
        deadline: the posts counted, the children that died or hung put in ``died`` (and
        no longer pending). False where ``timeout`` ran out (closing)."""
        waiting = sorted(self.pending)
        watch = [self.children[w].sentinel for w in waiting]
        timed = self.timed and timeout is None
        children = {w: self.children[w] for w in waiting} if timed else {}
        try:
            posts = self.answer.wait(until_due(children.values()) if timed else timeout, watch)
        except Gone as gone:
            w = waiting[watch.index(gone.fd)]
            if self.buffer.marks[self.children[w].rows.start]:
                # It posted before it died (Gone comes only once every post is taken):
                # that post was counted, and is not the answer of the child that replaces
                # it, whose own post would otherwise be left over for the next call.
                self._taken -= 1
            self._lost(w, self.died(w, "while it stepped"), died, timeout is None)
            return True
        if posts:
            self._taken += posts
        elif not timed:
            return False
        else:
            for w in late(children, self.buffer.marks):
                if self.children[w].ends_episode:
                    self._over_budget(w, died)
                else:
                    self._lost(w, self.children[w].timed_out(w), died, True)
        return True

    def _lost(self, w: int, error: WorkerError, died: dict[int, WorkerError], revive: bool) -> None:
        """Child ``w`` died or hung (``error``): with restarts on (and ``revive``: not
        closing), a new child is handed what answers its request, and stays pending; else,
        or where it is given up, its error goes in ``died``, and it is dead for good."""
        self.pending.discard(w)
        if revive and self.revivals is not None:
            given_up = self.revivals.revive(w, error, self._in_flight(w))
            if given_up is None:
                self.dead.pop(w, None)
                return
            error = given_up
        died[w] = self.dead[w] = error

    def _over_budget(self, w: int, died: dict[int, WorkerError]) -> None:
        """Child ``w``'s env ran past its episode budget with its step in flight: the
        child is killed and a new one answers in its place (no failure); ``died`` gets
        the error where the new one could not start."""
        assert self.revivals is not None
        assert self.budgets is not None
        self.children[w].kill()
        self.pending.discard(w)
        self.budgets.ends[w] = None  # the new child's answer opens the next episode
        given_up = self.revivals.revive(w, None, self._in_flight(w))
        if given_up is not None:
            died[w] = self.dead[w] = given_up

    def _in_flight(self, w: int) -> tuple[str, Any]:
        """Child ``w``'s request in flight, with its op."""
        if self._lockstep:  # a lockstep step's actions are in the child's rows
            rows = self.children[w].rows
            self.sent[w] = ("step", copy_arrays(take_rows(self.buffer.actions, rows)))
        return self.sent[w]

    def answers(self) -> dict[int, Any]:
        """Wait for every child handed a request, and take their answers: a BatchStep or
        a control's result, or the WorkerError that replaced it, by child id."""
        answers: dict[int, Any] = self.wait()
        for w in sorted(self.pending):
            answers[w] = self._read(w)
            if self.budgets is not None:
                self.budgets.opened(w, self.sent[w], answers[w])
        if self.revivals is not None and self.unsettled:
            ok = [w for w in self.pending if not isinstance(answers[w], WorkerError)]
            self.revivals.progress(ok)
        self.pending.clear()
        self._taken = 0
        return answers

    def _infos(self, died: dict[int, WorkerError]) -> dict[int, BatchStep[Any]]:
        """The infos of a step's children that sent some, as BatchSteps of their rows
        that hold nothing else, by child id; the failures of those that failed, died or
        hung (``died``), raised all together."""
        errors = list(died.values())
        parts: dict[int, BatchStep[Any]] = {}
        notes = self.buffer.notes
        for w, child in enumerate(self.children):
            note = notes[child.rows.start]
            if not note or w in died:
                continue
            if note == INFOS_IN_BUFFER:
                slots = self.buffer.infos[child.rows]
                parts[w] = self.packed.read(w, slots, None, None, None, None)
                continue
            answer = self._read(w, False)
            if isinstance(answer, WorkerError):
                errors.append(answer)
            elif answer is not None:  # its infos, or a whole answer (a new child's first, say)
                parts[w] = answer
        if errors:
            raise together(errors)
        return parts

    def _read(self, w: int, whole: bool = True) -> Any:
        """Child ``w``'s answer, which it posted: from its rows of the buffer (a step), a
        message (a reset, a control, a failure) or both (a step with infos); or the
        WorkerError a failure or its death is (a death, or an env given up, for good).
        Not ``whole`` (a lockstep step's child whose message goes with its rows, which the
        step reads itself): the message's infos as a BatchStep of the rows that holds
        nothing else, or None where it had none."""
        buffer = self.buffer
        child = self.children[w]
        rows = child.rows
        note = buffer.notes[rows.start]
        answer = None
        if note == 1:
            try:
                answer = answer_of(child.start.socket, child.name, w, self.report)
            except (EOFError, OSError):
                return _died_answering(self, w)
            if type(answer) is GivenUp:  # an env's restart budget is spent
                self.dead[w] = answer.error
                return answer.error
        stepped = w in self._in_buffer
        if not stepped or isinstance(answer, WorkerError) or type(answer) is BatchStep:
            return answer  # a whole reset's BatchStep, a control's result, an error
        parts: tuple[Any, ...] = (None, None, None, None)
        if whole:
            parts = (
                take_rows(buffer.observations, rows),
                buffer.rewards[rows].copy(),
                buffer.terminated[rows].copy(),
                buffer.truncated[rows].copy(),
            )
        if answer is not None:
            return self.packed.learned(w, decode_infos(answer[0], answer[1], parts))
        if note == INFOS_IN_BUFFER:
            return self.packed.read(w, buffer.infos[rows], *parts)
        return BatchStep(*parts) if whole else None

    # Failures ----------------------------------------------------------------------------------
    def died(self, w: int, when: str) -> WorkerDied:
        """Child ``w`` was found dead ``when``: its error, kept for every later call."""
        error = self.children[w].exit_error(w, when)
        self.dead[w] = error
        return error

    def check_usable(self) -> None:
        """WorkerRemoved once a child died or hung."""
        if self.dead:
            w = min(self.dead)
            raise self.children[w].removed(w, self.dead[w])


def _died_answering(offs: HandOffs, w: int) -> Any:
    """Child ``w`` of ``offs`` posted its answer and died before its message was read
    whole (a message longer than :data:`~aioenv.engine._child.SMALL` is written after
    the post): its error, for good; with restarts on, as after a death while it stepped,
    a new child is handed what answers its request, and that answer is read instead (the
    error that gave the child up, where none could be). A function of the module, not a
    method: :class:`HandOffs` is as long as a class may be."""
    # Only the new child's answer is waited for: the others pending have posted theirs.
    pending, taken = offs.pending, offs._taken
    offs.pending, offs._taken = set(), 0
    try:
        died: dict[int, WorkerError] = {}
        offs._lost(w, offs.died(w, "while it answered"), died, not offs.closed)
        if w not in died:
            died = offs.wait()
        return died[w] if w in died else offs._read(w)
    finally:
        offs.pending, offs._taken = pending, taken

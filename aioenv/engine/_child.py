"""The child's side of the engine: the whole program of a child process whose envs step
through the shared step buffer (:mod:`aioenv.engine._buffer`).

The child serves one group of envs, rows ``first`` to ``last - 1`` of the buffer, through
one :class:`~aioenv.env_side._serving.Slots` slot (the runner a grouped process worker's
child runs, so autoreset, seeds, time limits, infos and failures mean what they mean
there). It builds the envs and reports their spaces on its socket, then loops: wait on its
request wake (spinning first while the idle-spin rule says spinning pays, and returning
once the parent is gone), answer, post the answer wake. A step's actions are read from its
rows and its results written there; the row's note says whether a message on the socket
goes with the hand-off (see below): for a step, its infos encoded as a process worker's
are (:func:`aioenv.wire._pickles.encode_infos`), or its failure.

With restarts on, an env that raises is rebuilt here, by the rule envs in line follow
(:mod:`aioenv.env_side._env_restarts`: the same budget, seeds and cut-short episodes,
env by env), and the errors go to the parent with the answer (:class:`Reported`), for its
``on_failure``. A child that replaces one that died or hung (the parent's to restart,
:mod:`aioenv.engine._revivals`) answers its first step with its new envs' resets, marked
as a restart's or cutting short the episodes its predecessor left open (:class:`Revived`).
It imports nothing from the parent's side.

The messages beside the buffer, both sides' (the parent's :func:`answer_of`). What does
not fit the step buffer travels beside it, pickled, on the socket the parent and a child
share: requests that are not steps (resets, calls, closing) and the parts of an answer
that have no fixed size (infos, a final observation, a failure). A message is a process
worker's frame (:mod:`aioenv.wire._frames`, its sequence number and slot 0): a request or
an answer as :func:`~aioenv.wire._frames.encode_reply` encodes it (pickled whole, a
BatchStep in its binary layout), or a step's infos as an INFOS frame (their flag and
bytes, as a BATCH_STATE's tail carries them). Both sides read the socket only after the
wake told them a message is there; a small message is written before that post, so it
is whole when read, a large one after (:data:`SMALL`).
"""

from __future__ import annotations

import dataclasses
import pickle
import socket
from collections.abc import Callable
from typing import Any

from ..core._commands import RESET, is_reset
from ..core._environment import BatchStep, copy_arrays, take_rows
from ..core._errors import EnvError
from ..core._messages import EpisodeOptions, Failure
from ..core._restarts import restarted_state
from ..core._seeds import GroupSeed
from ..core._supervision import Supervision
from ..env_side._env_restarts import EnvRestarts
from ..env_side._idle_spin import IdleSpin
from ..env_side._process_group import begin_serving, end_own_group, exit_with_own_group
from ..env_side._serving import Slots
from ..env_side._thread_caps import ThreadCaps
from ..wire._frames import INFOS, Frame, FrameDecoder, Kind, decode_reply, encode, encode_reply
from ..wire._pickles import encode_infos
from ..wire._requests import CONTROL, STEP, Request
from ._buffer import INFOS_IN_BUFFER, NEW_SPIN, PackedInfos, StepBuffer, write_rows
from ._wake import Gone, Wake

__all__ = ["SMALL", "GivenUp", "Reported", "answer_of", "post_with", "serve"]

#: The most descriptors the parent sends: the buffer's, and two wakes' (two for a pipe).
_DESCRIPTORS = 5


@dataclasses.dataclass(frozen=True)
class ChildPlan:
    """What engine child ``child`` serves: ``payload`` (its group of env sources,
    cloudpickled), seeded with ``seed``, under ``episode``; the buffer of ``n`` rows of
    these single ``spaces`` (observation, action), its ``rows`` of them.
    ``env_seeds``: each env's seed, or one seed they are drawn from (a revived child's:
    its ``seed``); None, the default, leaves them unseeded (``seed`` is then the restart
    seeds' alone).
    ``restarts``: each env's restart options (``on_failure`` left out: its failures are
    reported to the parent with the answer, :class:`Reported`); None, an env's failure is
    the request's. ``revived``: this child replaces one that died or hung, for that reason
    (see :func:`_revived`)."""

    payload: bytes
    seed: int | None
    episode: EpisodeOptions
    registry: bytes
    thread_caps: ThreadCaps | None
    idle_spin: float
    spaces: tuple[Any, Any]
    rows: slice
    n: int
    child: int = 0
    env_seeds: GroupSeed = None
    restarts: Supervision | None = None
    revived: Revived | None = None


@dataclasses.dataclass(frozen=True)
class Revived:
    """Why a child replaces one that died or hung (``reason``, the restart's note), and
    the rows it left, where they left an episode open that its first step must cut short
    (``cut``; None: none is open)."""

    reason: str
    cut: BatchStep[Any] | None = None
    #: The env is the same, its episode having run out of its budget while idle (not a
    #: new child's): a reset asked for is answered as any reset is, unmarked.
    env_kept: bool = False


def serve(sock: socket.socket, alive: socket.socket, plan: ChildPlan) -> None:
    """Serve ``plan``'s envs until the parent asks this child to close or is gone. The
    buffer's and the wakes' descriptors come first on ``sock``; ``alive`` is never written:
    it becomes readable when the parent is gone. What the envs start ends with this
    process (see :mod:`aioenv.env_side._process_group`)."""
    begin_serving(alive)
    sock.setblocking(True)
    slots: Slots | None = None
    gone = True  # the parent, unless it asks this child to close
    try:
        _, fds, _, _ = socket.recv_fds(sock, 1, _DESCRIPTORS)
        if not fds:
            return
        buffer = StepBuffer(*plan.spaces, plan.n, fds[0])
        wakes = fds[1:]
        half = len(wakes) // 2
        request, answer = Wake.from_descriptors(wakes[:half]), Wake.from_descriptors(wakes[half:])
        slots = Slots(
            [plan.payload], [plan.env_seeds], plan.episode, plan.registry, plan.thread_caps
        )
        spaces = slots.serve(0, Request.BUILD, None)
        failure = slots.runners[0].build_failure
        sock.sendall(encode_reply(0, spaces if failure is None else failure))
        gone = failure is None  # (a build that failed ends this child, as if asked to)
        if not gone:
            return
        envs = _Envs(slots, buffer, plan)
        first, notes, marks, spin = plan.rows.start, buffer.notes, buffer.marks, envs.spin
        watch = (alive.fileno(),)
        while True:  # serve requests until the parent asks this child to close, or is gone
            request.wait(watch=watch, spin=spin)  # Gone once the parent is: see below
            note = notes[first]
            if not note:
                notes[first], data = envs.stepped()
            elif note == NEW_SPIN:  # (answered with no message)
                spin.seconds = float(buffer.spins[first])
                notes[first], data = 0, b""
            else:
                asked = receive_message(sock)
                if asked is None:  # close
                    gone = False
                    return
                data = envs.served(*asked)
                notes[first] = bool(data)
            marks[first] = 1
            post_with(sock, answer, data)
    except (BrokenPipeError, ConnectionResetError, EOFError, Gone):
        return  # the parent is gone
    except BaseException:
        gone = False
        raise
    finally:
        if slots is not None:
            slots.close()
        sock.close()
        if gone:  # an env's thread may still start processes: they go with this one
            exit_with_own_group(1)
        end_own_group()


class _Envs:
    """The child's envs (``slots``' one slot) and its rows of ``buffer``: each request's
    answer, as the message that goes with the post (b"" for none). With restarts on (the
    plan's ``restarts``), an env that fails is restarted by the rule of
    :mod:`aioenv.env_side._env_restarts`, and the errors it reports go with the answer."""

    def __init__(self, slots: Slots, buffer: StepBuffer, plan: ChildPlan) -> None:
        self.slots, self.buffer = slots, buffer
        self.rows = rows = plan.rows
        self.actions = take_rows(buffer.actions, rows)
        self.observations = take_rows(buffer.observations, rows)
        self.infos = buffer.infos[rows]
        self.child = plan.child
        self.packed = PackedInfos()  # the keys and types of the packed infos told so far
        self.revived = plan.revived
        self.spin = IdleSpin(plan.idle_spin, 0)  # how the child waits for a request
        self.reports: list[Any] = []
        self.restarts: EnvRestarts | None = None
        if plan.restarts is not None:
            options = dataclasses.replace(plan.restarts, on_failure=self.reports.append)
            self.restarts = EnvRestarts(
                slots.runners[0],  # type: ignore[arg-type]
                options,
                where="process env",
                first=rows.start,
                worker_id=plan.child,
            )
        slots.share(0, self.observations)  # a Box batch is stacked straight into the buffer

    def stepped(self) -> tuple[int, bytes]:
        """Step the envs with the actions in their rows and write the results there: the
        note for the answer, and the message that goes with it (their infos, or a
        failure), or b"" for none (:data:`INFOS_IN_BUFFER`: the infos are in the rows)."""
        if self.revived is not None:
            return 1, self.served("step", copy_arrays(self.actions))
        result = self._answer(STEP, copy_arrays(self.actions))
        # A Failure, or an env given up; else the Failure of writing it into the rows, if any.
        failed = result if type(result) is not BatchStep else self._written(result)
        if failed is not None:
            return 1, self._sent(encode_reply(0, failed))
        packed = result.packed_infos
        told = self.packed
        if packed is not None and not self.reports and told.written(self.child, packed, self.infos):
            return INFOS_IN_BUFFER, b""
        infos = encode_infos(result)
        # As a message whose reader gets encode_infos' (flag, data) back without unpickling
        # anything.
        message = b"" if infos is None else encode(Kind.INFOS, 0, bytes((infos[0],)) + infos[1])
        data = self._sent(message)
        return bool(data), data

    def served(self, op: str, payload: Any) -> bytes:
        """The answer to a request that came as a message: a reset's BatchStep (written
        into the buffer too, which keeps every env's latest state), a control's result,
        what the parent answers through this child (``"echo"``: a state of a child it
        replaced, or that one's error), or a Failure. ``"expire"``: the env's episode ran
        out of its budget; the request it carries is answered as a new child's first
        (:class:`Revived`)."""
        if op == "expire":  # its env's episode ran out of its budget (see EpisodeBudgets)
            self.revived, op, payload = payload
        if op == "echo":
            result = payload
        elif op == "step" and self.revived is not None:
            result = self._revived(payload)
        else:
            result = self._answer(CONTROL if op == "control" else STEP, payload)
        if type(result) is BatchStep:
            result = self._written(result) or result
        return self._sent(encode_reply(0, result))

    def _answer(self, request: int, payload: Any) -> Any:
        result = self.slots.serve(0, request, payload)
        restarts = self.restarts
        if restarts is None or request != STEP:
            return result
        if type(result) is not BatchStep:
            given_up = restarts.take_given_up()
            return result if given_up is None else GivenUp(_portable(given_up))
        if restarts.unsettled:
            restarts.progress_of(payload)
        return result

    def _revived(self, request: Any) -> Any:
        """The first step or reset of a child that replaces one that died or hung: a
        reset's answer (a step's too: the envs are new), marked as a restart's, or the
        step that cuts short the episodes its predecessor left open."""
        revived, self.revived = self.revived, None
        assert revived is not None
        if revived.env_kept and is_reset(request):
            return self._answer(STEP, request)
        first = self._answer(STEP, request if is_reset(request) else RESET)
        if type(first) is not BatchStep:
            return first
        return restarted_state(first, None if is_reset(request) else revived.cut, revived.reason)

    def _sent(self, data: bytes) -> bytes:
        """``data``, with the errors reported meanwhile where there are some."""
        if not self.reports:
            return data
        reported = Reported([_portable(error) for error in self.reports], data)
        self.reports.clear()
        return encode_reply(0, reported)

    def _written(self, result: BatchStep[Any]) -> Failure | None:
        """Write a BatchStep's observations into the child's rows of the buffer (and its
        rewards and flags); the Failure to report where they do not fit its layout."""
        buffer, rows = self.buffer, self.rows
        try:
            write_rows(self.observations, result.observations)
        except (ValueError, TypeError) as exc:
            return Failure.from_exception(
                exc,
                "writing the observations into the step buffer (an observation that is not "
                "of the observation space's shape and dtype)",
            )
        buffer.rewards[rows] = result.rewards
        buffer.terminated[rows] = result.terminated
        buffer.truncated[rows] = result.truncated
        return None


def _portable(error: Any) -> Any:
    """``error`` (and the errors it carries) without a cause that will not pickle: its
    text and traceback still say what the env raised."""
    for one in (error, *getattr(error, "more", ())):
        try:
            pickle.dumps(one.__cause__, protocol=5)
        except Exception:
            one.__cause__ = None
    return error


# The messages beside the buffer -----------------------------------------------------------
#: A message this long (bytes) fits a socket's buffer on any system aioenv runs on (Linux
#: gives a Unix socket 208 KiB by default): its sender can write it before it posts the
#: wake. A longer one is written after the post, as the reader reads it, since writing
#: it first could wait for a reader that waits for the post.
SMALL = 32 * 1024


@dataclasses.dataclass(frozen=True)
class Reported:
    """A child's answer (``message``: as it would travel alone, or b"" for none) with the
    errors of its envs that failed meanwhile, restarted or given up: each goes to the
    parent's ``on_failure``."""

    errors: list[Any]
    message: bytes


@dataclasses.dataclass(frozen=True)
class GivenUp:
    """A child's answer where an env of its failed with its restart budget spent: the
    error that gave it up (the vector env cannot go on without it)."""

    error: Any


def post_with(sock: socket.socket, wake: Wake, data: bytes) -> None:
    """Post ``wake`` with a message (``data``, encoded) for its taker on ``sock``: a small
    one written first, whole when read; a large one after the post, as it is read (see
    :data:`SMALL`). With no data, only the post."""
    if len(data) <= SMALL:
        if data:
            sock.sendall(data)
        wake.post()
    else:
        wake.post()
        sock.sendall(data)


def receive_message(sock: socket.socket) -> Any:
    """The next message; :class:`EOFError` if the other side closed its end first. One
    message is in flight at a time, so a read of more than it asks for takes nothing of
    the next: most messages take one ``recv`` (a large one is read as it is written, in
    reads of up to a mebibyte)."""
    decoder = FrameDecoder()
    frames: list[Frame] = []
    while not frames:
        chunk = sock.recv(1 << 20 if decoder.pending_bytes else SMALL)
        if not chunk:
            raise EOFError("the other side of the engine's socket closed it")
        frames = decoder.feed(chunk)
    return _decoded(frames[0])


def _decoded(frame: Frame) -> Any:
    """A whole message (its head and body, cut out as ``frame``) as its reader gets it."""
    kind, _, _, body = frame
    return (body[0], body[1:]) if kind == INFOS else decode_reply(kind, body, None)[0]


def answer_of(
    sock: socket.socket, name: str, w: int, report: Callable[[list[Any]], None] | None = None
) -> Any:
    """A child's message as the parent takes it: its answer (None for none: its rows hold
    it), the EnvError its failure is (of ``name``, child ``w``), or :class:`GivenUp`. The
    errors :class:`Reported` with it go to ``report``. EOFError or OSError where the child
    is gone."""
    answer = receive_message(sock)
    if type(answer) is Reported:
        if report is not None:
            report(answer.errors)
        answer = _decoded(FrameDecoder().feed(answer.message)[0]) if answer.message else None
    if isinstance(answer, Failure):
        return EnvError.from_failure(answer, name, w)
    return answer

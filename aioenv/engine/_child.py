"""The child's side of the engine: the whole program of a child process whose envs step
through the shared step buffer (:mod:`aioenv.engine._buffer`).

The child serves one group of envs, rows ``first`` to ``last - 1`` of the buffer, through
one :class:`~aioenv.env_side._serving.Slots` slot (the runner a grouped process worker's
child runs, so autoreset, seeds, time limits, infos and failures mean what they mean
there). It builds the envs and reports their spaces on its socket, then loops: wait on its
request wake (spinning first while the idle-spin rule says spinning pays, and returning
once the parent is gone), answer, post the answer wake. A step's actions are read from its
rows and its results written there; the row's note says whether a message on the socket
goes with the hand-off (:mod:`aioenv.engine._channel`): for a step, its infos encoded as a
process worker's are (:func:`aioenv.wire._frames.encode_infos`), or its failure. It
imports nothing from the parent's side.
"""

from __future__ import annotations

import dataclasses
import signal
import socket
from typing import Any

from ..core._environment import BatchStep
from ..core._messages import EpisodeOptions, Failure
from ..env_side._idle_spin import IdleSpin
from ..env_side._process_group import end_own_group, keep_own_group, lead_own_group
from ..env_side._serving import Slots
from ..env_side._thread_caps import ThreadCaps
from ..wire._frames import encode_infos
from ..wire._requests import CONTROL, STEP, Request
from ._buffer import StepBuffer, copied, rows_of, write_rows
from ._channel import encoded, encoded_infos, post_with, receive_message, send_message
from ._wake import Gone, Wake

__all__ = ["serve"]

#: The most descriptors the parent sends: the buffer's, and two wakes' (two for a pipe).
_DESCRIPTORS = 5


@dataclasses.dataclass(frozen=True)
class ChildPlan:
    """What one engine child serves: ``payload`` (its group of env sources, cloudpickled),
    seeded with ``seed``, under ``episode``; the buffer of ``n`` rows of these single
    ``spaces`` (observation, action), its rows ``first`` to ``last - 1``."""

    payload: bytes
    seed: int | None
    episode: EpisodeOptions
    registry: bytes
    thread_caps: ThreadCaps | None
    idle_spin: float
    spaces: tuple[Any, Any]
    first: int
    last: int
    n: int


def serve(sock: socket.socket, alive: socket.socket, plan: ChildPlan) -> None:
    """Serve ``plan``'s envs until the parent asks this child to close or is gone. The
    buffer's and the wakes' descriptors come first on ``sock``; ``alive`` is never written:
    it becomes readable when the parent is gone. What the envs start ends with this
    process (see :mod:`aioenv.env_side._process_group`)."""
    lead_own_group()
    keep_own_group()  # before any thread starts: it forks
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this child stops
    sock.setblocking(True)
    slots: Slots | None = None
    try:
        _, fds, _, _ = socket.recv_fds(sock, 1, _DESCRIPTORS)
        if not fds:
            return  # the parent is gone
        buffer = StepBuffer(*plan.spaces, plan.n, fds[0])
        wakes = fds[1:]
        half = len(wakes) // 2
        request, answer = Wake.from_descriptors(wakes[:half]), Wake.from_descriptors(wakes[half:])
        slots = Slots([plan.payload], [plan.seed], plan.episode, plan.registry, plan.thread_caps)
        spaces = slots.serve(0, Request.BUILD, None)
        failure = slots.runners[0].build_failure
        send_message(sock, spaces if failure is None else failure)
        if failure is None:
            _loop(sock, alive, slots, buffer, request, answer, plan)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return  # the parent is gone
    finally:
        if slots is not None:
            slots.close()
        end_own_group()
        sock.close()


def _loop(
    sock: socket.socket,
    alive: socket.socket,
    slots: Slots,
    buffer: StepBuffer,
    request: Wake,
    answer: Wake,
    plan: ChildPlan,
) -> None:
    first, rows = plan.first, slice(plan.first, plan.last)
    actions, observations = rows_of(buffer.actions, rows), rows_of(buffer.observations, rows)
    notes, marks = buffer.notes, buffer.marks
    slots.share(0, observations)  # a Box batch is stacked straight into the buffer
    spin = IdleSpin(plan.idle_spin, 0)
    watch = (alive.fileno(),)
    while True:
        try:
            request.wait(watch=watch, spin=spin)
        except Gone:
            return  # the parent is gone
        if notes[first]:
            asked = receive_message(sock)
            if asked is None:
                return  # close
            data = encoded(_served(slots, spin, observations, *asked))
        else:
            data = _stepped(slots, buffer, rows, actions, observations)
        notes[first] = bool(data)
        marks[first] = 1
        post_with(sock, answer, data)


def _served(slots: Slots, spin: IdleSpin, observations: Any, op: str, payload: Any) -> Any:
    """The answer to a request that came as a message: a reset's BatchStep (its
    observations written into the buffer too, which keeps every env's latest), a
    control's result, None for a new idle spin (``payload`` seconds), or a Failure."""
    if op == "spin":
        spin.seconds = payload
        return None
    result = slots.serve(0, CONTROL if op == "control" else STEP, payload)
    if type(result) is BatchStep:
        return _written(observations, result) or result
    return result


def _stepped(
    slots: Slots, buffer: StepBuffer, rows: slice, actions: Any, observations: Any
) -> bytes:
    """Step the envs with the actions in their rows and write the results there: the
    message that goes with the answer (their infos, or a failure), or b"" for none."""
    result = slots.serve(0, STEP, copied(actions))
    if type(result) is not BatchStep:
        return encoded(result)  # a Failure
    failed = _written(observations, result)
    buffer.rewards[rows] = result.rewards
    buffer.terminated[rows] = result.terminated
    buffer.truncated[rows] = result.truncated
    if failed is not None:
        return encoded(failed)
    infos = encode_infos(result)
    return b"" if infos is None else encoded_infos(*infos)


def _written(into: Any, result: BatchStep[Any]) -> Failure | None:
    """Write a BatchStep's observations into the child's rows of the buffer; the Failure
    to report where they do not fit its layout."""
    try:
        write_rows(into, result.observations)
    except (ValueError, TypeError) as exc:
        return Failure.from_exception(
            exc,
            "writing the observations into the step buffer (an observation that is not of "
            "the observation space's shape and dtype)",
        )
    return None

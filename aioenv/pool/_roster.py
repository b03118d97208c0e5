"""A pool's workers by id: looking one up, which of them take actions (the pool pauses
and resumes them, the roster's ``accepting`` and the inbox keep track), the open and
unpaused ones, the ones given up on, where each one's envs start among all the pool's
envs."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import TypeVar

from ..core._errors import UnknownWorker, WorkerError, WorkerRemoved, describe_failure
from ..workers._base import Worker
from ..workers._inbox import Inbox
from ..workers._seam import Member

__all__ = ["Roster", "checked_workers", "none_left"]

S = TypeVar("S")

#: In a pool whose workers all answer in line, the most states taken between two turns
#: of the event loop (see :attr:`Roster.all_in_line`).
TURN_EVERY = 16


class Roster:
    """The workers of a pool, addressed by id (their positions), as the pool's helpers see
    them (:class:`~aioenv.workers._seam.Member`). ``inbox``, the pool's, knows which
    workers are paused, and whether the pool is closed; the helpers read it here.

    A worker that failed for good (its ``failure``) stays in the pool until that error is
    handed out (raised, or returned by ``drain``): :meth:`hand_out` then moves it to
    ``removed``. From then on pool-wide calls leave it out and calls naming it raise
    :class:`~aioenv.WorkerRemoved`; its id is never reused, so no other id shifts."""

    def __init__(self, members: Sequence[Member], inbox: Inbox) -> None:
        self.members = list(members)
        self.inbox = inbox
        #: Per worker, the index of its first env (workers may step several together),
        #: and last the number of envs over all workers: worker ``i``'s envs are
        #: ``range(first_env[i], first_env[i + 1])``.
        self.first_env = [0, *itertools.accumulate(m.num_envs for m in self.members)]
        #: Envs over all workers.
        self.lanes = self.first_env[-1]
        #: The workers given up on, by id: the last error of each (handed out once).
        self.removed: dict[int, WorkerError] = {}
        #: Per worker, False once an action to it must be refused (the pool closed, the
        #: worker paused or given up on), kept up to date as those change (the pool's
        #: ``pause``, ``resume`` and ``aclose``, and :meth:`hand_out`): the sending path
        #: reads one flag per action and makes the checks that say why only when it is
        #: False.
        self.accepting = [True] * len(self.members)
        #: Where some workers answer in line (sync workers step during their send) and
        #: others do not: which do (see :meth:`send_order`); else None.
        in_line = [member.answers_in_line for member in self.members]
        self.in_line = in_line if any(in_line) and not all(in_line) else None
        #: Every worker answers in line (a pool of sync workers): a state is always ready
        #: while one is stepped, so a loop over them never waits, and the event loop (the
        #: program's other tasks and timers, a failed worker's restart) runs only when the
        #: pool gives it a turn: every TURN_EVERY states (see :meth:`owes_a_turn`).
        self.all_in_line = all(in_line)
        self._since_turn = 0  # states taken since the event loop's last turn

    def __len__(self) -> int:
        return len(self.members)

    def owes_a_turn(self) -> bool:
        """Where every worker answers in line: a state is taken now; True where the event
        loop is then owed its turn (``TURN_EVERY`` states since its last)."""
        self._since_turn = (self._since_turn + 1) % TURN_EVERY
        return not self._since_turn

    def index(self, worker_id: int) -> int:
        """``worker_id`` checked: an int naming one of the workers (UnknownWorker
        otherwise)."""
        if type(worker_id) is int and 0 <= worker_id < len(self.members):
            return worker_id  # the common case, checked first
        try:
            index = operator.index(worker_id)
        except TypeError:
            raise UnknownWorker(f"worker ids are ints, got {worker_id!r}") from None
        if not 0 <= index < len(self.members) or isinstance(worker_id, bool):
            raise UnknownWorker(
                f"no worker {worker_id!r}: this pool has workers 0..{len(self.members) - 1}"
            )
        return index

    def live_index(self, worker_id: int) -> int:
        """``worker_id`` checked as :meth:`index` does, and not given up on (WorkerRemoved
        otherwise)."""
        index = self.index(worker_id)
        if index in self.removed:
            error = self.removed[index]
            raise WorkerRemoved(
                f"{self.members[index].name} was given up on and left the pool after it "
                f"failed for good ({describe_failure(error)}); address the others "
                "(pool.active_ids), or make a new pool to have it back",
                index,
            ) from error
        return index

    def hand_out(self, worker_id: int | None, error: BaseException) -> None:
        """``error`` was handed out (raised, or returned by ``drain``) for worker
        ``worker_id``: where it is the worker's failure for good, the worker leaves the
        pool."""
        if worker_id is None or worker_id in self.removed:
            return
        if isinstance(error, WorkerError) and self.members[worker_id].failure is error:
            self.removed[worker_id] = error
            self.accepting[worker_id] = False

    def check_some_left(self, call: str) -> None:
        """Raise WorkerRemoved for a pool-wide ``call`` if every worker that is not closed
        was given up on (at least one was): nothing is left to do it with."""
        if self.removed and not self._open_ids():
            raise none_left(call, self.removed)

    def removed_note(self) -> str:
        """For a message about the workers left: how many were given up on, if any."""
        if not self.removed:
            return ""
        return f" ({len(self.removed)} worker(s) were given up on: see pool.removed)"

    def active(self) -> list[Member]:
        """Workers that are open, not paused and not given up on."""
        paused = self.inbox.paused
        return [self.members[i] for i in self._open_ids() if i not in paused]

    def send_order(self, worker_ids: Sequence[int]) -> list[int]:
        """``worker_ids`` in the order to send each of them an action: the workers that
        answer in line last. A sync worker steps its env inside the send, so any worker
        sent an action after it would wait for that step before starting its own; sent
        last, it steps while the others do."""
        in_line = self.in_line
        if in_line is None:
            return list(worker_ids)
        return sorted(worker_ids, key=lambda worker_id: in_line[worker_id])

    def ids(self, worker_ids: Sequence[int] | None) -> list[int]:
        """Worker ids to address: ``worker_ids`` checked (none given up on), or the ids of
        every open worker not given up on."""
        self.inbox.check_open()
        if worker_ids is None:
            return self._open_ids()
        return [self.live_index(worker_id) for worker_id in worker_ids]

    def _open_ids(self) -> list[int]:
        """The ids of the workers that are open and not given up on."""
        removed = self.removed
        return [
            i for i, member in enumerate(self.members) if not member.closed and i not in removed
        ]


def none_left(call: str, removed: dict[int, WorkerError]) -> WorkerRemoved:
    """The error of a pool-wide ``call`` once every worker of the pool was given up on:
    how many, and the last one's reason (the whole story is in ``pool.removed``)."""
    last = next(reversed(removed))  # the last handed out
    error = WorkerRemoved(
        f"{call}: every worker of this pool was given up on after failing for good "
        f"({len(removed)} in pool.removed; the last, worker {last}: "
        f"{describe_failure(removed[last])}); make a new pool to go on",
        None,
    )
    error.__cause__ = removed[last]
    return error


def checked_workers(workers: Sequence[Worker[S]]) -> list[Worker[S]]:
    """``workers`` as a list, checked: aioenv workers, none of them in a pool already."""
    workers = list(workers)
    if not workers:
        raise ValueError("a pool needs at least one worker")
    seen: set[int] = set()  # ids of the workers checked so far: a worker listed twice
    for position, worker in enumerate(workers):
        if not isinstance(worker, Worker):
            raise TypeError(
                f"workers[{position}] is a {type(worker).__name__}, not an aioenv worker "
                "(SyncWorker, ThreadWorker, ProcessWorker or AsyncEnvWorker); use make_pool() "
                "to build workers from envs"
            )
        if worker.in_pool or id(worker) in seen:
            raise ValueError(f"workers[{position}] ({worker.name}) already belongs to a pool")
        seen.add(id(worker))
    return workers

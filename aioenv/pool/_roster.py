"""A pool's workers by id: looking one up, pausing and resuming, the open and unpaused
ones, where each one's envs start among all the pool's envs."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..core._errors import UnknownWorker
from ..workers._base import Worker
from ..workers._inbox import Inbox
from ..workers._seam import Member

__all__ = ["Roster", "checked_workers"]

S = TypeVar("S")


class Roster:
    """The workers of a pool, addressed by id (their positions), as the pool's helpers see
    them (:class:`~aioenv.workers._seam.Member`). ``check_open`` raises once the pool is
    closed; ``inbox`` knows which workers are paused."""

    def __init__(
        self, members: Sequence[Member], inbox: Inbox, check_open: Callable[[], None]
    ) -> None:
        self.members = list(members)
        self._inbox = inbox
        self._check_open = check_open
        #: Per worker, the index of its first env (workers may step several together).
        self.first_env = [sum(m.num_envs for m in self.members[:i]) for i in range(len(members))]
        #: Envs over all workers.
        self.lanes = self.first_env[-1] + self.members[-1].num_envs

    def __len__(self) -> int:
        return len(self.members)

    def member(self, worker_id: int) -> Member:
        """The worker with this id (UnknownWorker otherwise)."""
        return self.members[self.index(worker_id)]

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

    def active(self) -> list[Member]:
        """Workers that are open and not paused."""
        return [
            member
            for member in self.members
            if not member.closed and not self._inbox.is_paused(member.worker_id)
        ]

    def pause(self, worker_id: int) -> None:
        """Hold the worker's states back until it is resumed (see ``WorkerPool.pause``)."""
        self._check_open()
        self._inbox.pause(self.member(worker_id).worker_id)

    def resume(self, worker_id: int | None) -> None:
        """Resume the worker, or every paused worker where ``worker_id`` is None."""
        self._check_open()
        targets = self.members if worker_id is None else [self.member(worker_id)]
        for member in targets:
            self._inbox.resume(member.worker_id)

    def paused(self) -> tuple[int, ...]:
        """The ids of the paused workers, in increasing order."""
        return tuple(i for i in range(len(self.members)) if self._inbox.is_paused(i))

    def ids(self, worker_ids: Sequence[int] | None) -> list[int]:
        """Worker ids to address: ``worker_ids`` checked, or every open worker's."""
        self._check_open()
        if worker_ids is None:
            return [i for i, member in enumerate(self.members) if not member.closed]
        return [self.index(worker_id) for worker_id in worker_ids]


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

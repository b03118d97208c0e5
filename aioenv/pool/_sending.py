"""A pool's sending side: actions to one worker, resets to all, seeds for the next reset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core._commands import RESET, Command, Reset
from ..core._errors import InvalidAction, StateNotTaken, WorkerError, WorkerPaused
from ..core._seeds import checked_seed
from ..workers._inbox import Inbox, Outcome
from ..workers._seam import Member
from ._actions import explain_invalid_action
from ._receiving import EpisodeCounter
from ._roster import Roster

__all__ = ["PoolSending"]


class PoolSending:
    """The sending side of a :class:`~aioenv.WorkerPool`, which inherits it, over the
    workers of its roster: ``reset`` and ``set_seeds``, and the checks its ``send_action``
    makes where the action is not the common case (:meth:`_addressee`). Tells the pool's
    ``_episodes`` where a reset starts a new episode, asks the pool's inbox which workers
    are paused or owe a state, and checks actions against the spaces where
    ``check_actions``."""

    _roster: Roster
    _inbox: Inbox
    _episodes: EpisodeCounter
    check_actions: bool

    def _addressee(self, action: Any, worker_id: int) -> Member:
        """The worker ``action`` to ``worker_id`` goes to, or the error that says why none
        does (the pool is closed, the id names no worker, the worker was given up on or
        is paused, the action is not in its space where ``check_actions``). The pool's
        ``send_action`` takes the common case (none of these) itself."""
        self._inbox.check_open()
        roster = self._roster
        worker = roster.members[roster.live_index(worker_id)]
        if worker.worker_id in self._inbox.paused:
            raise WorkerPaused(f"{worker.name} is paused; pool.resume({worker_id}) first")
        if self.check_actions and not isinstance(action, (Command, Reset)):
            space = worker.action_space
            if space is not None and not space.contains(action):
                raise InvalidAction(f"{worker.name}: {explain_invalid_action(action, space)}")
        return worker

    def _on_send_error(self, worker: Member, error: WorkerError) -> None:
        """An action to ``worker`` raised ``error``. Where that is the error it failed for
        good with, it is handed out (the worker leaves the pool), unless it is still to be
        taken in place of its last state: it is raised once, there, and this action gets
        StateNotTaken."""
        if error is not worker.failure:
            return
        if worker.worker_id in self._inbox.owed:
            raise StateNotTaken(
                f"{worker.name} failed for good and its error is not taken yet; take it with "
                "pool.get_state() (it raises it), after which the worker is out of the pool"
            ) from None
        self._roster.hand_out(worker.worker_id, error)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Send ``RESET`` to every open, unpaused worker not given up on; the replies come
        back through ``get_state``/``get_batch`` like any other state. ``seed=s`` seeds env
        ``i`` with ``s + i`` (gymnasium's vector convention; envs counted across all the
        pool's workers, in worker order, removed ones included) for this reset only. A
        worker that failed for good while idle gets no reset: its error comes back in
        place of its reset state, raised once.

        :raises ValueError: ``seed`` is not a non-negative int (numpy's too) or None.
        :raises WorkerRemoved: every worker was given up on.
        """
        self._inbox.check_open()
        seed = checked_seed(seed, "reset()")
        self._roster.check_some_left("reset()")
        targets = self._roster.active()
        for worker in targets:
            if worker.worker_id in self._inbox.owed:
                raise StateNotTaken(
                    f"reset(): {worker.name} has an action in flight or a state not taken; "
                    "take every pending state before resetting (nothing was sent)"
                )
        first_env = self._roster.first_env
        members = self._roster.members
        ids = [worker.worker_id for worker in targets if worker.worker_id is not None]
        for worker_id in self._roster.send_order(ids):
            worker = members[worker_id]
            if worker.failure is not None:
                # It failed for good while idle: its error answers this reset in place of
                # its state, raised once like any failure, and then it leaves the pool.
                self._inbox.owe(worker_id)
                self._inbox.deliver(Outcome(worker_id, None, worker.failure))
                continue
            if seed is None and options is None:
                worker.send_action(RESET)
            else:
                worker_seed = None if seed is None else seed + first_env[worker_id]
                worker.send_action(Reset(seed=worker_seed, options=options))
            self._episodes.expect_reset(worker_id)

    async def set_seeds(self, seeds: Sequence[int | None]) -> None:
        """Seed each worker's next reset (``seeds[i]`` for worker ``i``; None leaves that
        worker alone). Later resets continue the env's RNG. ``seeds`` has one entry per
        worker, removed ones included (their seeds go unused), so positions never shift."""
        workers = self._roster.members
        if len(seeds) != len(workers):
            raise ValueError(f"set_seeds() needs {len(workers)} seeds, got {len(seeds)}")
        checked = [checked_seed(seed, "set_seeds()") for seed in seeds]  # before any is set
        for worker, seed in zip(workers, checked, strict=True):
            if seed is not None:
                worker.seed_next_reset(seed)

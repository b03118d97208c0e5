"""What a pool sends its workers: its sending side (:class:`PoolSending`: actions to one
worker, resets to all, seeds for the next reset), and its remote control
(:class:`RemoteControl`): call env methods, read and write env attributes, render (the
envs' frames tiled into one image).

The remote control's requests go to each worker's env in order with its steps (a step in
flight finishes first; its state is delivered as usual), and the pool waits for every
answer before raising the first error, so no answer is left dangling. Results come back
as :class:`WorkerResults`, which say which worker gave each one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from ..core._commands import RESET, Command, Reset
from ..core._errors import InvalidAction, StateNotTaken, WorkerError, WorkerPaused
from ..core._messages import ControlRequest
from ..core._seeds import checked_seed
from ..workers._inbox import Inbox, Outcome
from ..workers._seam import Member
from ._actions import explain_invalid_action
from ._receiving import EpisodeCounter
from ._roster import Roster

__all__ = ["PerWorker", "PoolSending", "RemoteControl", "WorkerResults", "tile_images"]

T = TypeVar("T")


class WorkerResults(list[T]):
    """What :meth:`~aioenv.WorkerPool.call` and :meth:`~aioenv.WorkerPool.get_attr`
    return: a list with one result per worker addressed, in ``worker_ids`` order (the
    ``worker_ids`` given, else every open worker not given up on, in id order).

    ``worker_ids`` says which worker gave each result: once a worker was given up on
    (``pool.removed``) the default leaves it out, so position ``i`` is worker
    ``worker_ids[i]``, not necessarily worker ``i``. ``by_id()`` maps ids to results.
    It compares equal to the plain list of its results.
    """

    def __init__(self, results: Iterable[T] = (), worker_ids: Sequence[int] = ()) -> None:
        super().__init__(results)
        #: The id of the worker that gave each result, position by position.
        self.worker_ids: tuple[int, ...] = tuple(worker_ids)
        if len(self.worker_ids) != len(self):
            raise ValueError(f"{len(self)} results for {len(self.worker_ids)} worker ids")

    def by_id(self) -> dict[int, T]:
        """The results keyed by worker id."""
        return dict(zip(self.worker_ids, self, strict=True))

    def __repr__(self) -> str:
        return f"WorkerResults({list(self)!r}, worker_ids={list(self.worker_ids)!r})"


@dataclasses.dataclass(frozen=True)
class PerWorker:
    """An argument of :meth:`~aioenv.WorkerPool.call` with one value per addressed worker:
    ``values[i]`` goes to the ``i``-th worker of ``worker_ids`` (default: every open worker,
    in id order). Garage's ``env_update``: ``await pool.call("set_task", PerWorker(tasks))``.
    """

    values: Sequence[Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))


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


class RemoteControl:
    """The remote control of a :class:`~aioenv.WorkerPool`, which inherits it: the envs'
    calls, in order with each worker's steps, over the workers of the pool's roster."""

    _roster: Roster

    async def call(
        self, name: str, *args: Any, worker_ids: Sequence[int] | None = None, **kwargs: Any
    ) -> WorkerResults[Any]:
        """Call method ``name`` of each env (or read it, if it is not callable) and return
        the results in ``worker_ids`` order: by default every open worker not given up on,
        in id order. The result is a list that says which worker gave each entry
        (:class:`WorkerResults`: ``worker_ids``, ``by_id()``), so once a worker was given
        up on no position shifts unnoticed. A worker with a step in flight finishes that
        step first; its state is delivered as usual. An argument (positional or keyword)
        wrapped in :class:`PerWorker` gives each worker its own value.

        :raises ValueError: a :class:`PerWorker` holds more or fewer values than workers.
        :raises WorkerRemoved: ``worker_ids`` names a worker that was given up on.
        """
        return await self._calls("call", name, args, kwargs, worker_ids)

    async def apply(
        self, function: Any, *args: Any, worker_ids: Sequence[int] | None = None, **kwargs: Any
    ) -> WorkerResults[Any]:
        """Run ``function(env, *args, **kwargs)`` on each env, in its worker, in order with
        its steps: ``env`` is the env as its factory built it (a gymnasium env with its own
        wrappers, or the :class:`Environment`). Results, ``worker_ids`` and
        :class:`PerWorker` arguments as for :meth:`call` (``function`` may be one too; a
        worker's ``None`` leaves its env alone and answers None). A worker that steps
        several envs runs it on each and answers a list. ``function`` must pickle for
        process workers."""
        return await self._calls("apply", "", (function, *args), kwargs, worker_ids)

    async def get_attr(
        self, name: str, worker_ids: Sequence[int] | None = None
    ) -> WorkerResults[Any]:
        """Attribute ``name`` of each env, in ``worker_ids`` order, as :meth:`call` returns
        its results (by default every open worker not given up on)."""
        return await self._calls("get", name, (), {}, worker_ids)

    async def set_attr(
        self, name: str, values: Any, worker_ids: Sequence[int] | None = None
    ) -> None:
        """Set attribute ``name`` of each env: ``values`` is a list with one value per
        worker addressed (by default every open worker not given up on, in id order), or a
        single value for all."""
        ids = self._roster.ids(worker_ids)
        if isinstance(values, (list, tuple)):
            if len(values) != len(ids):
                raise ValueError(
                    f"set_attr() got {len(values)} values for {len(ids)} workers ({ids})"
                    f"{self._roster.removed_note()}"
                )
        else:
            values = [values] * len(ids)
        await self._ask(ids, [ControlRequest("set", name, (value,)) for value in values])

    async def render(self, mode: str = "rgb_array", tiled: bool = True) -> Any:
        """Frames of every open, unpaused env (a worker's envs in turn, where it steps
        several): one tiled image, or a list of frames. The envs must have been made with
        ``render_mode="rgb_array"``."""
        if mode != "rgb_array":
            raise ValueError(f"render() supports mode='rgb_array', got {mode!r}")
        workers = self._roster.active()
        ids = [worker.worker_id for worker in workers]
        answers = await self._calls("call", "render", (), {}, ids)  # type: ignore[arg-type]
        frames = []
        for worker, answer in zip(workers, answers, strict=True):
            for frame in answer if worker.num_envs > 1 else [answer]:  # a list: one per env
                if not isinstance(frame, np.ndarray) or frame.ndim not in (2, 3):
                    raise TypeError(
                        f"{worker.name}: render() returned {type(frame).__name__}; make the "
                        "env with render_mode='rgb_array'"
                    )
                frames.append(frame)
        return tile_images(frames) if tiled else frames

    async def _calls(
        self,
        op: Literal["call", "get", "apply"],
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        worker_ids: Sequence[int] | None,
    ) -> WorkerResults[Any]:
        """``call`` method ``name`` of each env addressed, ``get`` its attribute ``name``, or
        ``apply`` ``args[0]`` to it, with ``args`` and ``kwargs`` (each :class:`PerWorker`
        one spread over the workers)."""
        ids = self._roster.ids(worker_ids)
        per_worker = [v for v in (*args, *kwargs.values()) if isinstance(v, PerWorker)]
        what = f"call({name!r})" if op == "call" else "apply()"
        for values in per_worker:
            if len(values.values) != len(ids):
                raise ValueError(
                    f"{what}: a PerWorker argument holds {len(values.values)} values "
                    f"for {len(ids)} workers ({ids}); give one value per worker"
                    f"{self._roster.removed_note()}"
                )
        requests = [
            ControlRequest(
                op,
                name,
                tuple(_own(value, index) for value in args),
                {key: _own(value, index) for key, value in kwargs.items()},
            )
            for index in range(len(ids))
        ]
        return await self._ask(ids, requests)

    async def _ask(self, ids: list[int], requests: list[ControlRequest]) -> WorkerResults[Any]:
        """Send ``requests[k]`` to worker ``ids[k]``, wait for every answer (they are
        answered in flight already), then raise the first error. A worker's error for good
        raised here is handed out: the worker leaves the pool. Every error raised names its
        worker (one raised as a request is sent, a closed or failed worker's or a request
        that would not pickle for a child process, as one answered). The rollouts'
        :meth:`~aioenv.WorkerPool.set_policy` ships its policy through it too."""
        roster = self._roster
        sent: list[asyncio.Future[Any] | Exception] = []
        for worker_id, request in zip(ids, requests, strict=True):
            try:
                sent.append(roster.members[worker_id].control(request))
            except Exception as error:  # nothing was sent to it (closed, failed for good)
                sent.append(error)
        results: list[Any] = []
        for item in sent:
            try:
                results.append(item if isinstance(item, Exception) else await item)
            except Exception as error:
                results.append(error)
        for worker_id, result in zip(ids, results, strict=True):
            if isinstance(result, Exception):
                roster.hand_out(worker_id, result)
                raise result
        return WorkerResults(results, ids)


def _own(value: Any, index: int) -> Any:
    """The ``index``-th worker's value of an argument."""
    return value.values[index] if isinstance(value, PerWorker) else value


def tile_images(frames: Sequence[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """Lay ``H x W x C`` frames out on a near-square grid, row by row (8 frames: 4 x 2);
    frames of different sizes are padded to the largest, and empty cells are black."""
    if not frames:
        raise ValueError("no frames to tile")
    height = max(frame.shape[0] for frame in frames)
    width = max(frame.shape[1] for frame in frames)
    channels = frames[0].shape[2] if frames[0].ndim == 3 else 1
    square = math.ceil(math.sqrt(len(frames)))
    columns = min((square, square + 1), key=lambda c: math.ceil(len(frames) / c) * c - len(frames))
    rows = math.ceil(len(frames) / columns)
    canvas = np.zeros((rows * height, columns * width, channels), dtype=frames[0].dtype)
    for index, frame in enumerate(frames):
        row, column = divmod(index, columns)
        image = frame if frame.ndim == 3 else frame[..., None]
        top, left = row * height, column * width
        canvas[top : top + image.shape[0], left : left + image.shape[1]] = image
    return canvas if channels > 1 or frames[0].ndim == 3 else canvas[..., 0]

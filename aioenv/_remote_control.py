"""A pool's remote control: call env methods, read and write env attributes, render.

Requests go to each worker's env in order with its steps (a step in flight finishes first;
its state is delivered as usual), and the pool waits for every answer before raising the
first error, so no answer is left dangling.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from ._messages import ControlRequest
from ._render import tile_images
from .workers._base import Worker

__all__ = ["PerWorker", "RemoteControl"]

S = TypeVar("S")


@dataclasses.dataclass(frozen=True)
class PerWorker:
    """An argument of :meth:`~aioenv.WorkerPool.call` with one value per addressed worker:
    ``values[i]`` goes to the ``i``-th worker of ``worker_ids`` (default: every open worker,
    in id order). Garage's ``env_update``: ``await pool.call("set_task", PerWorker(tasks))``.
    """

    values: Sequence[Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))


class RemoteControl(abc.ABC, Generic[S]):
    """The remote-control methods of :class:`~aioenv.WorkerPool`."""

    _workers: list[Worker[S]]

    @abc.abstractmethod
    def _ids(self, worker_ids: Sequence[int] | None) -> list[int]:
        """Worker ids to address: ``worker_ids`` checked, or every open worker's."""

    @abc.abstractmethod
    def _active_workers(self) -> list[Worker[S]]:
        """Workers that are open and not paused."""

    async def call(
        self, name: str, *args: Any, worker_ids: Sequence[int] | None = None, **kwargs: Any
    ) -> list[Any]:
        """Call method ``name`` of each env (or read it, if it is not callable) and return
        the results in ``worker_ids`` order. A worker with a step in flight finishes that
        step first; its state is delivered as usual. An argument (positional or keyword)
        wrapped in :class:`PerWorker` gives each worker its own value.

        :raises ValueError: a :class:`PerWorker` holds more or fewer values than workers.
        """
        per_worker = [v for v in (*args, *kwargs.values()) if isinstance(v, PerWorker)]
        if not per_worker:
            return await self._control(ControlRequest("call", name, args, kwargs), worker_ids)
        ids = self._ids(worker_ids)
        for values in per_worker:
            if len(values.values) != len(ids):
                raise ValueError(
                    f"call({name!r}): a PerWorker argument holds {len(values.values)} values "
                    f"for {len(ids)} workers ({ids}); give one value per worker"
                )
        requests = [
            ControlRequest(
                "call",
                name,
                tuple(_own(value, index) for value in args),
                {key: _own(value, index) for key, value in kwargs.items()},
            )
            for index in range(len(ids))
        ]
        futures = [self._workers[i].control(r) for i, r in zip(ids, requests, strict=True)]
        return await self._gather(futures)

    async def get_attr(self, name: str, worker_ids: Sequence[int] | None = None) -> list[Any]:
        """Attribute ``name`` of each env, in ``worker_ids`` order."""
        return await self._control(ControlRequest("get", name), worker_ids)

    async def set_attr(
        self, name: str, values: Any, worker_ids: Sequence[int] | None = None
    ) -> None:
        """Set attribute ``name`` of each env: ``values`` is a list with one value per
        worker, or a single value for all."""
        ids = self._ids(worker_ids)
        if isinstance(values, (list, tuple)):
            if len(values) != len(ids):
                raise ValueError(f"set_attr() got {len(values)} values for {len(ids)} workers")
        else:
            values = [values] * len(ids)
        futures = [
            self._workers[i].control(ControlRequest("set", name, (value,)))
            for i, value in zip(ids, values, strict=True)
        ]
        await self._gather(futures)

    async def render(self, mode: str = "rgb_array", tiled: bool = True) -> Any:
        """Frames of every open, unpaused env: one tiled image, or a list of frames. The
        envs must have been made with ``render_mode="rgb_array"``."""
        if mode != "rgb_array":
            raise ValueError(f"render() supports mode='rgb_array', got {mode!r}")
        ids = [worker.worker_id for worker in self._active_workers()]
        frames = await self.call("render", worker_ids=ids)  # type: ignore[arg-type]
        for worker_id, frame in zip(ids, frames, strict=True):
            if not isinstance(frame, np.ndarray) or frame.ndim not in (2, 3):
                raise TypeError(
                    f"{self._workers[worker_id].name}: render() returned "  # type: ignore[index]
                    f"{type(frame).__name__}; make the env with render_mode='rgb_array'"
                )
        return tile_images(frames) if tiled else frames

    async def _control(
        self, request: ControlRequest, worker_ids: Sequence[int] | None
    ) -> list[Any]:
        ids = self._ids(worker_ids)
        return await self._gather([self._workers[i].control(request) for i in ids])

    @staticmethod
    async def _gather(futures: list[asyncio.Future[Any]]) -> list[Any]:
        # Wait for all (they are answered in flight already), then raise the first error.
        results: list[Any] = []
        for future in futures:
            try:
                results.append(await future)
            except Exception as error:
                results.append(error)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results


def _own(value: Any, index: int) -> Any:
    """The ``index``-th worker's value of an argument."""
    return value.values[index] if isinstance(value, PerWorker) else value

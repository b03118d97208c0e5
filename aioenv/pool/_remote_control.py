"""A pool's remote control: call env methods, read and write env attributes, render.

Requests go to each worker's env in order with its steps (a step in flight finishes first;
its state is delivered as usual), and the pool waits for every answer before raising the
first error, so no answer is left dangling.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core._messages import ControlRequest
from ._render import tile_images
from ._roster import Roster

__all__ = ["Controls", "PerWorker"]


@dataclasses.dataclass(frozen=True)
class PerWorker:
    """An argument of :meth:`~aioenv.WorkerPool.call` with one value per addressed worker:
    ``values[i]`` goes to the ``i``-th worker of ``worker_ids`` (default: every open worker,
    in id order). Garage's ``env_update``: ``await pool.call("set_task", PerWorker(tasks))``.
    """

    values: Sequence[Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))


class Controls:
    """The remote control of a :class:`~aioenv.WorkerPool` (whose methods of the same names
    say what each does), over the workers of its ``roster``."""

    def __init__(self, roster: Roster) -> None:
        self._roster = roster

    async def call(
        self, name: str, *args: Any, worker_ids: Sequence[int] | None = None, **kwargs: Any
    ) -> list[Any]:
        per_worker = [v for v in (*args, *kwargs.values()) if isinstance(v, PerWorker)]
        if not per_worker:
            return await self._control(ControlRequest("call", name, args, kwargs), worker_ids)
        ids = self._roster.ids(worker_ids)
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
        futures = [self._roster.members[i].control(r) for i, r in zip(ids, requests, strict=True)]
        return await self._gather(futures)

    async def get_attr(self, name: str, worker_ids: Sequence[int] | None = None) -> list[Any]:
        return await self._control(ControlRequest("get", name), worker_ids)

    async def set_attr(
        self, name: str, values: Any, worker_ids: Sequence[int] | None = None
    ) -> None:
        ids = self._roster.ids(worker_ids)
        if isinstance(values, (list, tuple)):
            if len(values) != len(ids):
                raise ValueError(f"set_attr() got {len(values)} values for {len(ids)} workers")
        else:
            values = [values] * len(ids)
        futures = [
            self._roster.members[i].control(ControlRequest("set", name, (value,)))
            for i, value in zip(ids, values, strict=True)
        ]
        await self._gather(futures)

    async def render(self, mode: str = "rgb_array", tiled: bool = True) -> Any:
        if mode != "rgb_array":
            raise ValueError(f"render() supports mode='rgb_array', got {mode!r}")
        ids = [worker.worker_id for worker in self._roster.active()]
        frames = await self.call("render", worker_ids=ids)  # type: ignore[arg-type]
        for worker_id, frame in zip(ids, frames, strict=True):
            if not isinstance(frame, np.ndarray) or frame.ndim not in (2, 3):
                raise TypeError(
                    f"{self._roster.members[worker_id].name}: render() returned "  # type: ignore[index]
                    f"{type(frame).__name__}; make the env with render_mode='rgb_array'"
                )
        return tile_images(frames) if tiled else frames

    async def _control(
        self, request: ControlRequest, worker_ids: Sequence[int] | None
    ) -> list[Any]:
        ids = self._roster.ids(worker_ids)
        return await self._gather([self._roster.members[i].control(request) for i in ids])

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

"""A worker whose env runs in a dedicated thread of the parent process."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from .._environment import EnvSource
from .._runner import EnvRunner
from ._base import Worker

__all__ = ["ThreadWorker"]

S = TypeVar("S")

_STOP = object()


class ThreadWorker(Worker[S]):
    """Runs the env in its own thread. Good for envs that release the GIL (simulators in
    C/C++, I/O) and for envs that cannot be pickled. Results are handed to the event loop
    with ``call_soon_threadsafe``: nothing polls and the loop never blocks.

    A thread cannot be killed: if the env does not close within ``cleanup_time``, the
    (daemon) thread is left behind and a ``RuntimeWarning`` says so.
    """

    kind = "thread"

    def __init__(
        self, env: EnvSource, *, seed: int | None = None, cleanup_time: float = 5.0
    ) -> None:
        super().__init__(env, seed=seed, cleanup_time=cleanup_time)
        self._runner = EnvRunner(env, seed)
        self._requests: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        self._finished = threading.Event()
        self._on_finished: Callable[[], None] | None = None
        self._thread = threading.Thread(
            target=self._serve, name=f"aioenv-thread-worker ({self.env_name})", daemon=True
        )
        self._thread.start()

    def _submit(self, seq: int, action: Any) -> None:
        self._requests.put((seq, action))

    def _start_close(self) -> None:
        self._requests.put((0, _STOP))

    def _abandon(self) -> None:
        super()._abandon()
        self._start_close()

    async def _wait_closed(self, cleanup_time: float) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def on_finished() -> None:
            loop.call_soon_threadsafe(_set_done, done)

        # The serving thread sets the event, then calls back; whichever side comes second
        # sees the other's write, so the wake-up cannot be missed.
        self._on_finished = on_finished
        if self._finished.is_set():
            return
        with anyio.move_on_after(cleanup_time):
            await done
            return
        if not self._finished.is_set():
            warnings.warn(
                f"{self.name}: the env did not close within {cleanup_time:g} s; its thread "
                "cannot be killed and is left running as a daemon thread",
                RuntimeWarning,
                stacklevel=3,
            )

    def _serve(self) -> None:
        runner = self._runner
        runner.build()
        self.observation_space, self.action_space = runner.spaces
        try:
            while True:
                seq, action = self._requests.get()
                if action is _STOP:
                    runner.close()
                    return
                result = runner.reset() if self._request_kind(action) else runner.step(action)
                loop = self._loop
                if loop is None:
                    continue
                try:
                    loop.call_soon_threadsafe(self._on_reply, seq, result)
                except RuntimeError:
                    return  # the event loop is closed: nobody is left to answer
        finally:
            self._finished.set()
            callback = self._on_finished
            if callback is not None:
                with contextlib.suppress(RuntimeError):
                    callback()


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

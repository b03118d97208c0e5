"""A worker whose env runs in a dedicated thread of the parent process."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from ..core._docs import documented_with
from ..core._errors import env_ended_worker
from ..core._messages import ControlRequest, Failure
from ..env_side._thread_safety import refusal, runner_unsafe_reason
from ..env_side._vector_runner import Runner, make_runner
from ._base import Worker

__all__ = ["ThreadWorker"]

S = TypeVar("S")

_STOP = object()


@documented_with(Worker)
class ThreadWorker(Worker[S]):
    """Runs the env in its own thread. Good for envs that release the GIL (simulators in
    C/C++, I/O) and for envs that cannot be pickled. Results are handed to the event loop
    with ``call_soon_threadsafe``: nothing polls and the loop never blocks.

    An env that is not safe in a thread (one that draws with pygame while it steps, such
    as ``CarRacing-v3``; see "Thread workers" in the concepts guide) is refused: its
    worker fails at start with a ``ValueError`` that names ``mode="process"``. An env's
    ``metadata["thread_safe"]`` (True or False) decides instead.

    A thread cannot be killed. A step past its deadline abandons the thread (its late
    reply is ignored; a restart gets a new thread), and an env that does not close within
    ``cleanup_time`` is left running as a daemon thread, with a ``RuntimeWarning``.
    """

    kind = "thread"
    _discard_verb = "abandoned (a thread cannot be killed; its late reply is ignored)"

    def _setup(self, seed: int | None) -> None:
        self._threads: list[_EnvThread] = []
        #: Calls from env threads for the event loop, held until the worker has one.
        self._held: collections.deque[tuple[Any, ...]] = collections.deque()
        self._spawn(seed)

    def _spawn(self, seed: int | None) -> None:
        self._current = _EnvThread(self, make_runner(self.source, seed, self._episode))
        # The threads of the envs it replaced are kept only while they run.
        self._threads = [t for t in self._threads if t._thread.is_alive()] + [self._current]

    def _submit(self, seq: int, action: Any) -> None:
        self._current.requests.put((seq, action))

    def _on_thread_reply(self, env_thread: _EnvThread, seq: int, result: Any) -> None:
        if env_thread is self._current:  # an abandoned thread's reply is never delivered
            self._on_reply(seq, result)

    def _on_thread_death(self, env_thread: _EnvThread, exc: BaseException) -> None:
        if env_thread is self._current:
            self._on_death(env_ended_worker(self.name, self.worker_id, exc))

    def _from_thread(self, *call: Any) -> None:
        """Run ``call`` (a callback and its arguments) on the worker's event loop, from an
        env's thread; before the worker has one (actions sent before any loop ran), once
        it is bound to one."""
        self._held.append(call)
        if (loop := self._loop) is not None:
            self._bind_loop(loop)

    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        # The calls held go to the loop: from here once _loop is set, or from the thread
        # that holds one and then sees _loop set; each is taken once, by one side.
        with contextlib.suppress(IndexError, RuntimeError):  # none left; the loop closed
            while True:
                loop.call_soon_threadsafe(*self._held.popleft())

    def _start_close(self) -> None:
        self._current.requests.put((0, _STOP))

    def _abandon(self) -> None:
        self._start_close()

    async def _wait_closed(self, cleanup_time: float) -> None:
        loop = asyncio.get_running_loop()
        done = [t.finished_future(loop) for t in self._threads if not t.finished.is_set()]
        with anyio.move_on_after(cleanup_time):
            for future in done:
                await future
        for env_thread in self._threads:
            if env_thread.finished.is_set():
                env_thread.join()  # it has run its last line: this returns at once
        self._threads = [t for t in self._threads if not t.finished.is_set()]
        if self._threads:
            warnings.warn(
                f"{self.name}: the env did not close within {cleanup_time:g} s; its thread "
                "cannot be killed and is left running as a daemon thread",
                RuntimeWarning,
                stacklevel=3,
            )


class _EnvThread:
    """One env and the thread that serves its requests, in order."""

    def __init__(self, worker: ThreadWorker[Any], runner: Runner) -> None:
        self.requests: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        self.finished = threading.Event()
        self._worker = worker
        self._runner = runner
        self._on_finished: Callable[[], None] | None = None
        self._thread = threading.Thread(
            target=self._serve, name=f"aioenv-thread-worker ({worker.env_name})", daemon=True
        )
        self._thread.start()

    def join(self) -> None:
        self._thread.join(timeout=1.0)

    def finished_future(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """A future of ``loop``, completed there when the thread has finished."""
        future: asyncio.Future[None] = loop.create_future()

        def on_finished() -> None:
            loop.call_soon_threadsafe(_set_done, future)

        # The thread sets the event, then reads the callback; whichever side comes second
        # sees the other's write, so the wake-up cannot be missed.
        self._on_finished = on_finished
        if self.finished.is_set():
            _set_done(future)
        return future

    def _serve(self) -> None:
        worker, runner = self._worker, self._runner
        try:
            runner.build()
            _refuse_if_unsafe(runner, worker.env_name)
            if worker.observation_space is None:
                worker.observation_space, worker.action_space = runner.spaces
            while True:
                seq, action = self.requests.get()
                if action is _STOP:
                    runner.close()
                    return
                if isinstance(action, ControlRequest):
                    result = runner.control(action)
                else:
                    result = runner.handle(action)
                loop = worker._loop
                if loop is None:
                    worker._from_thread(worker._on_thread_reply, self, seq, result)
                    continue
                try:
                    loop.call_soon_threadsafe(worker._on_thread_reply, self, seq, result)
                except RuntimeError:
                    return  # the event loop is closed: nobody is left to answer
        except BaseException as exc:  # SystemExit and the like, built or stepped: env done
            self._report_death(exc)
        finally:
            self.finished.set()
            callback = self._on_finished
            if callback is not None:
                with contextlib.suppress(RuntimeError):
                    callback()

    def _report_death(self, exc: BaseException) -> None:
        self._runner.close()
        self._worker._from_thread(self._worker._on_thread_death, self, exc)


def _refuse_if_unsafe(runner: Runner, env_name: str) -> None:
    """Close the envs ``runner`` built and fail it as a construction failure (what every
    request is then answered) where one is not safe in a thread."""
    reason = runner_unsafe_reason(runner)
    if reason is not None:
        runner.close()
        runner.build_failure = Failure.from_exception(
            refusal(env_name, reason), "construction (thread workers' check)"
        )


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

"""A worker whose env runs in a dedicated thread of the parent process."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import queue
import threading
import warnings
from typing import Any, TypeVar

from ..core._docs import documented_with
from ..core._environment import VectorSource
from ..core._messages import ControlRequest, Failure
from ..core._seeds import GroupSeed
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
        self._spawn(VectorSource.first_seed(self.source, seed))

    def _spawn(self, seed: GroupSeed) -> None:
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
            self._on_env_exit(exc)

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

    async def _wait_closed(self, cleanup_time: float) -> None:
        running = [asyncio.wrap_future(t.finished) for t in self._threads if not t.finished.done()]
        if running:
            await asyncio.wait(running, timeout=cleanup_time)
        for env_thread in self._threads:
            if env_thread.finished.done():
                env_thread._thread.join(timeout=1.0)  # it has run its last line: at once
        self._threads = [t for t in self._threads if not t.finished.done()]
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
        #: Completed when the thread has finished (``asyncio.wrap_future`` waits for it on
        #: a loop). Running from the start, so that a wait cancelled cannot cancel it.
        self.finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.finished.set_running_or_notify_cancel()
        self._worker = worker
        self._runner = runner
        self._thread = threading.Thread(
            target=self._serve, name=f"aioenv-thread-worker ({worker.env_name})", daemon=True
        )
        self._thread.start()

    def _serve(self) -> None:
        worker, runner = self._worker, self._runner
        try:
            runner.build()
            # Where an env it built is not safe in a thread: close them, and fail the runner
            # as a construction failure (what every request is then answered).
            reason = runner_unsafe_reason(runner)
            if reason is not None:
                runner.close()
                runner.build_failure = Failure.from_exception(
                    refusal(worker.env_name, reason), "construction (thread workers' check)"
                )
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
                except RuntimeError:  # its event loop is closed: nobody takes the answer,
                    continue  # and the env serves on (aclose's stop closes it)
        except BaseException as exc:  # SystemExit and the like, built or stepped: env done
            runner.close()
            worker._from_thread(worker._on_thread_death, self, exc)
        finally:
            self.finished.set_result(None)

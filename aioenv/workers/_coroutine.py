"""A worker whose env is a coroutine env, served by a task on the worker's event loop."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import threading
import warnings
from typing import Any, TypeVar

from ..core._commands import Command, Reset
from ..core._docs import documented_with
from ..core._errors import EnvError, WorkerError
from ..core._messages import ControlRequest, Failure
from ..env_side._async_runner import AsyncEnvRunner
from ..env_side._runner import NOT_ACTIONS
from ..loops._here import CoroutineHost, raised_in
from ._base import Worker

__all__ = ["AsyncEnvWorker"]

S = TypeVar("S")

_STOP = object()
#: Resets as requests: ``RESET`` (the one Command sent as a request) and ``Reset(...)``.
_RESETS = (Command, Reset)

#: Seconds ``aclose`` waits for env tasks to end once cancelled (an env that swallows the
#: cancellation is left behind, with a warning).
_CANCEL_GRACE = 1.0


@documented_with(Worker)
class AsyncEnvWorker(Worker[S]):
    """Runs a coroutine env (``async def reset``/``step``; see the README) as a task on the
    event loop: no thread, no process, so thousands of envs that wait on I/O (a remote
    simulator, a game server, a web API) share one loop. Plain envs work too, but block
    the loop while they step.

    Under trio (a pool bridged to a trio run, see the docs' trio guide) each call of the
    env runs as a task of the trio run instead, so the env may use trio: the bridge hands
    itself to the worker as the host of its env's coroutines.

    Requests are served in order by one task per env. A step past its ``step_timeout`` is
    cancelled (the task is cancelled and the env closed); closing the worker cancels a
    step in flight, closes the env (awaiting an async ``close``) and waits for the task,
    at most ``cleanup_time`` seconds before cancelling the close as well.
    """

    kind = "coroutine"
    steps_batches = False  # one env, one task
    _discard_verb = "cancelled (its task was cancelled and the env closed)"

    def _setup(self, seed: int | None) -> None:
        self._envs: list[_EnvTask] = []  # the current env's, and discarded ones still closing
        self._host: CoroutineHost | None = None  # None: the env's coroutines run on the loop
        self._spawn(seed)

    def _spawn(self, seed: int | None) -> None:
        self._current = _EnvTask(self, AsyncEnvRunner(self.source, seed, self._episode))
        self._envs.append(self._current)
        if self._loop is not None:
            self._current.start(self._loop)

    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._current.start(loop)

    def _run_coroutines_in(self, host: CoroutineHost) -> None:
        self._host = host

    def _submit(self, seq: int, action: Any) -> None:
        """Queue request ``seq`` for the current env's task, which serves it after those
        before it (every action's path: no call of the task's between)."""
        env = self._current
        env.requests.append((seq, action))
        wake_up = env.wake_up
        if wake_up is not None:
            # Dropped as it is woken: a future kept until the next wait would outlive the
            # step, and each object that does makes the garbage collector run sooner.
            env.wake_up = None
            if not wake_up.done():  # else the task was cancelled while it waited
                wake_up.set_result(None)

    def _env_error(self, failure: Failure) -> EnvError:
        # An env that called the library of another event loop than its own: say why. Its
        # host's hint where its coroutines run elsewhere; on a pool that runs on asyncio,
        # what to add to the message of the env's error: where the env called trio, how
        # to run it under trio; else nothing.
        if self._host is not None:
            hint = self._host.env_error_hint(failure.exception)
        elif raised_in("trio", failure.exception):
            hint = (
                " (this pool runs on asyncio, so its coroutine envs do too: an env that "
                "calls trio needs the pool run under trio, `async with pool as bridged:` in "
                "a trio run; written with anyio, it works on both)"
            )
        else:
            hint = ""
        if hint:
            failure = dataclasses.replace(failure, message=failure.message + hint)
        return super()._env_error(failure)

    def _on_task_death(self, env_task: _EnvTask, exc: BaseException) -> None:
        if env_task is self._current:
            self._on_env_exit(exc)

    def _on_task_ended(self, env_task: _EnvTask, task: asyncio.Task[None]) -> None:
        self._envs.remove(env_task)  # listed by _spawn, and its task ends once
        if env_task._cancelled or env_task is not self._current:
            return
        if task.cancelled():  # not by the worker: by the end of its loop, as asyncio.run's
            ended = (
                "its env was closed with the event loop it ran on, which ended (use the pool "
                'within one asyncio.run, or restart="on_failure" to start a new env)'
            )
            self._on_death(WorkerError(f"{self.name}: {ended}", worker_id=self.worker_id))
            return
        if task.exception() is None:
            return
        error = WorkerError(
            f"{self.name}: the task serving the env failed ({task.exception()!r})",
            worker_id=self.worker_id,
        )
        error.__cause__ = task.exception()
        self._on_death(error)

    def _discard_env(self, env_gone: bool) -> None:
        if env_gone:
            self._current.cancel()  # it hung: cancel the step it is awaiting
        else:
            self._submit(0, _STOP)

    def _start_close(self) -> None:
        self._current.cancel()  # a step in flight is cancelled; the env is then closed

    async def _wait_closed(self, cleanup_time: float) -> None:
        tasks = [env.task for env in self._envs if env.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=cleanup_time)
        for task in pending:  # an env whose close outlasted cleanup_time: cancel the close
            task.cancel()
        if pending:
            _, pending = await asyncio.wait(pending, timeout=_CANCEL_GRACE)
        if pending:
            warnings.warn(
                f"{self.name}: the env's task did not end when cancelled (does the env "
                "swallow asyncio.CancelledError?); it is left running",
                RuntimeWarning,
                stacklevel=3,
            )


class _EnvTask:
    """One env and the task that serves its requests, in order."""

    def __init__(self, worker: AsyncEnvWorker[Any], runner: AsyncEnvRunner) -> None:
        #: The requests to serve, in order (queued by the worker's ``_submit``).
        self.requests: collections.deque[tuple[int, Any]] = collections.deque()
        self.task: asyncio.Task[None] | None = None
        #: Set while the task waits for a request: what ``_submit`` wakes it with.
        self.wake_up: asyncio.Future[None] | None = None
        self._worker = worker
        self._runner = runner
        self._cancelled = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.task is not None or self._cancelled:
            return
        self.task = loop.create_task(
            self._serve(), name=f"aioenv-async-worker ({self._worker.env_name})"
        )
        self.task.add_done_callback(lambda task: self._worker._on_task_ended(self, task))

    def cancel(self) -> None:
        self._cancelled = True
        if self.task is not None:
            self.task.cancel()

    async def _serve(self) -> None:
        worker, runner, requests = self._worker, self._runner, self.requests
        loop = asyncio.get_running_loop()
        host = worker._host  # None: the env's coroutines run right here
        try:
            runner.build()
            if worker.observation_space is None:
                worker.observation_space, worker.action_space = runner.spaces
            while True:
                while not requests:
                    self.wake_up = wake_up = loop.create_future()
                    await wake_up
                seq, request = requests.popleft()
                if request is _STOP:
                    return
                try:
                    if host is not None:
                        result = await host.run_env_call(
                            functools.partial(_answer, runner, request)
                        )
                    elif runner.gym is not None and not isinstance(request, NOT_ACTIONS):
                        # A plain gymnasium env (it blocks the loop while it steps anyway):
                        # its step is answered in line, with no plan or driver,
                        result = runner.step_row(request, True)
                    elif runner.gym is not None and isinstance(request, _RESETS):
                        # and its reset by the plain driver (only a rollout's policy may
                        # need the async one).
                        result = runner.handle(request)
                    elif (call := runner.step_call(request)) is not None:
                        # The hot path: the env's own step, awaited right here.
                        try:
                            result = await call
                        except Exception as exc:
                            result = runner.step_raised(exc)
                        else:
                            result, autoreset = runner.stepped(result)
                            if autoreset is not None:
                                result = await autoreset
                    else:
                        result = await _answer(runner, request)
                except (SystemExit, KeyboardInterrupt) as exc:
                    if isinstance(exc, KeyboardInterrupt) and host is None and _on_main_thread():
                        # Ctrl-C in the env's step on the caller's thread is the caller's
                        # (as a sync worker's): it ends the loop's run from outside this
                        # task, before what waits for the request, which is forgotten (the
                        # env is kept), can run.
                        loop.call_soon(_interrupt, exc)
                        if self is worker._current and seq == worker._awaited:
                            worker.forget_request()
                        continue
                    # Raised in a task, these would end the whole event loop: this env is
                    # done instead, as a process worker's would be.
                    worker._on_task_death(self, exc)
                    return
                if self is worker._current:  # a discarded env's reply is never delivered
                    worker._on_reply(seq, result)
        except SystemExit as exc:  # raised as the env was built: this env is done
            worker._on_task_death(self, exc)
        finally:  # after a cancellation too: the env's close is awaited
            await (runner.aclose() if host is None else host.run_env_call(runner.aclose))


def _on_main_thread() -> bool:
    """Where Ctrl-C lands (Python runs signal handlers in the main thread only)."""
    return threading.current_thread() is threading.main_thread()


def _interrupt(exc: KeyboardInterrupt) -> None:
    raise exc


async def _answer(runner: AsyncEnvRunner, request: Any) -> Any:
    """The answer to ``request`` by the env's async driver: a control request's, or any
    other request's."""
    if isinstance(request, ControlRequest):
        return await runner.acontrol(request)
    return await runner.ahandle(request)

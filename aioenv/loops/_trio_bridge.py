"""Pools under trio: the pool runs on a private asyncio loop, trio tasks await it.

Workers, hosts and the inbox are built on asyncio's primitives for speed, so under trio a
pool does not move to trio: it runs on an asyncio loop in a background thread (the
*bridge*, :class:`~aioenv.loops._background.BackgroundLoop`), and a :class:`TrioPool` stands in
for it in the trio run. Its coroutine methods hand the call to the bridge loop
(``call_soon_threadsafe``) and park the trio task until the reply wakes it
(``TrioToken.run_sync_soon``): no thread per call, no blocking of the trio thread. Its plain
methods and attributes run on the bridge loop too, the trio thread waiting for the round
trip (two thread wake-ups: about 0.14 ms on a 2-core x86_64 machine). Every name
is forwarded, so methods added to the pool work here without a change. Calls run there in
a context of their own, not the trio task's: under ``anyio.run(backend="trio")`` the trio
task's context says the library running is trio, and anyio would believe it on the bridge
loop as well (see :mod:`aioenv.loops._background`).

Coroutine envs are the exception that runs the other way: the bridge is handed to the
pool's coroutine workers as their :class:`~aioenv.loops._here.CoroutineHost`, so each call
of a coroutine env (which may use trio) runs as a task of the trio run, awaited from the
bridge.

A stand-in is an instance of the pool's class for ``isinstance`` (and a worker's stand-in
of the worker's): its class is registered as a virtual subclass of the pool's (pools and
workers are abstract base classes), so methods are never inherited, only forwarded.

A trio cancellation cancels the pool's call on the bridge and waits for it to end, so no
reply is left behind; the pool's own methods are cancel-safe, so nothing is lost. Closing
(``async with`` exit or ``aclose()``) closes the pool on the bridge, shielded, then stops
the bridge's thread.

This module imports trio: it is imported only once trio is running (trio is optional), and
no other module of aioenv imports it.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import outcome
import trio

from ..core._errors import ClosedError, pool_closed
from ._background import BackgroundLoop, close_at_exit
from ._here import CoroutineHost, raised_in

__all__ = ["TrioPool", "bridged"]

T = TypeVar("T")

#: The name of the bridge's thread (``aioenv-`` names mark aioenv's threads).
BRIDGE_THREAD = "aioenv-trio-bridge"

#: The stand-in of each pool used under trio, by the pool's id: one per pool, so the pool's
#: own ``aclose`` (``async with`` exit) closes the bridge its stand-in runs on. Weak: an entry
#: goes with its stand-in (which holds the pool, so the id stays the pool's meanwhile).
_STAND_INS: weakref.WeakValueDictionary[int, TrioPool] = weakref.WeakValueDictionary()


def bridged(pool: T) -> T:
    """The :class:`TrioPool` standing in for ``pool`` in this trio run, made on first use."""
    stand_in = _STAND_INS.get(id(pool))
    if stand_in is None:
        stand_in = _STAND_INS[id(pool)] = _stand_in_class(TrioPool, type(pool))(pool)
    return stand_in  # type: ignore[return-value]  # it has the pool's every method


class _Bridge:
    """The private asyncio loop and the hand-off between it and the trio run."""

    def __init__(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.background = BackgroundLoop(BRIDGE_THREAD)
        self.closed = False

    def check_open(self) -> None:
        if self.closed or not self.background.running:
            raise pool_closed()

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)`` on the bridge loop (it must not await); the trio
        thread waits for it."""
        if self.background.in_loop_thread:
            return function(*args, **kwargs)
        done: concurrent.futures.Future[outcome.Outcome[T]] = concurrent.futures.Future()
        self.check_open()
        self.background.post(lambda: done.set_result(outcome.capture(function, *args, **kwargs)))
        return done.result().unwrap()

    async def run(
        self, function: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any
    ) -> T:
        """Await ``function(*args, **kwargs)`` run on the bridge loop. Cancelled, it
        cancels the call there and waits for it to end before raising."""
        self.check_open()
        token, waiter = self.token, trio.lowlevel.current_task()

        def reply(task: asyncio.Task[T]) -> None:  # on the bridge loop: wake the trio task
            result = outcome.capture(task.result)  # a cancelled task's raises CancelledError
            token.run_sync_soon(trio.lowlevel.reschedule, waiter, result)

        target = function if not kwargs else functools.partial(function, **kwargs)
        cancel = self.background.start(target, args, None, reply)
        raise_cancel: Callable[[], Any] | None = None

        def abort(raise_cancel_: Callable[[], Any]) -> trio.lowlevel.Abort:
            nonlocal raise_cancel
            raise_cancel = raise_cancel_
            try:
                cancel()
            except RuntimeError:  # the bridge loop is gone: no reply will come
                return trio.lowlevel.Abort.SUCCEEDED
            return trio.lowlevel.Abort.FAILED  # the call's end reschedules this task

        try:
            result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        except asyncio.CancelledError:
            if raise_cancel is not None:
                raise_cancel()  # raises trio.Cancelled
            raise ClosedError("the pool's bridge loop stopped during the call") from None
        return result

    async def run_env_call(self, function: Callable[[], Awaitable[T]]) -> T:
        """Await ``function()`` as a task of the trio run, from the bridge loop: a coroutine
        env's call (it may use trio). Cancelled here, it cancels the task there and waits
        for it to end (a second cancellation stops waiting: the task is left to trio)."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[outcome.Outcome[T]] = loop.create_future()
        # The task's cancel scope, made here so that a cancellation that comes before the
        # task enters it (``run_sync_soon`` may call it first) still counts.
        scope = trio.CancelScope()

        async def run() -> None:  # the trio task; its outcome goes to ``ended``
            result: outcome.Outcome[Any] = outcome.Error(asyncio.CancelledError())
            with scope:
                result = await outcome.acapture(function)
                if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
                    result.unwrap()  # the scope catches its own cancellation
            if scope.cancelled_caught:
                result = outcome.Error(asyncio.CancelledError())
            # Set once (``ended`` is only awaited through asyncio.shield, which never
            # cancels it), on the bridge loop.
            with contextlib.suppress(RuntimeError):  # the bridge loop closed: nobody waits
                loop.call_soon_threadsafe(ended.set_result, result)

        try:
            self.token.run_sync_soon(trio.lowlevel.spawn_system_task, run)
        except trio.RunFinishedError:  # closed at interpreter exit: best effort, here
            return await function()
        try:
            result = await asyncio.shield(ended)
        except asyncio.CancelledError:
            self.token.run_sync_soon(scope.cancel)
            await asyncio.shield(ended)  # the task ends once cancelled
            raise
        return result.unwrap()

    def env_error_hint(self, error: BaseException | None) -> str:
        """Where a coroutine env's ``error`` came from asyncio, why it cannot call it."""
        if not raised_in("asyncio", error):
            return ""
        return (
            " (this pool runs under trio, so its coroutine envs run in the trio run: an "
            "env that calls asyncio needs the pool run on asyncio; written with anyio, it "
            "works on both)"
        )

    def stop(self) -> None:
        self.closed = True
        self.background.stop()


class _Forwarder:
    """Stands in for ``target`` (a pool or one of its workers) in the trio run: every
    method and attribute is forwarded to the bridge loop by name."""

    def __init__(self, target: Any, bridge: _Bridge) -> None:
        # Set through object.__setattr__: this class forwards attribute writes.
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_bridge", bridge)
        object.__setattr__(self, "_forwards", {})

    def __getattr__(self, name: str) -> Any:
        forwards: dict[str, Any] = self._forwards
        if name in forwards:
            return forwards[name]
        target, bridge = self._target, self._bridge
        member = getattr(type(target), name, None)
        coroutine = inspect.iscoroutinefunction(member)
        if not (coroutine or inspect.isfunction(member)):
            return _bridged(bridge.call(getattr, target, name), bridge)  # read there
        bound = getattr(target, name)

        async def forward(*args: Any, **kwargs: Any) -> Any:
            return _bridged(await bridge.run(bound, *args, **kwargs), bridge)

        def forward_sync(*args: Any, **kwargs: Any) -> Any:
            return _bridged(bridge.call(bound, *args, **kwargs), bridge)

        # A method's forwarder is made once: awaited on the bridge loop for a coroutine
        # method, called there for a plain one.
        forwards[name] = forward if coroutine else forward_sync
        return forwards[name]

    def __setattr__(self, name: str, value: Any) -> None:
        self._bridge.call(setattr, self._target, name, value)

    def __repr__(self) -> str:
        return f"<bridged to trio: {self._bridge.call(repr, self._target)}>"

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@runtime_checkable
class _Worker(Protocol):
    """What the bridge knows of a worker: the loops sit below the workers, so a worker is
    recognised by its interface rather than by its class."""

    worker_id: int | None

    def send_action(self, action: Any) -> None: ...

    async def get_state(self) -> Any: ...


def _bridged(value: Any, bridge: _Bridge) -> Any:
    """What the trio side gets: a worker (alone or in a tuple) bridged, the rest as is."""
    if isinstance(value, _Worker):
        return _stand_in_class(_Forwarder, type(value))(value, bridge)
    if type(value) is tuple and value and isinstance(value[0], _Worker):
        return tuple(_stand_in_class(_Forwarder, type(w))(w, bridge) for w in value)
    return value


#: The stand-in class made for each class stood in for (see the module docstring).
_STAND_IN_CLASSES: weakref.WeakKeyDictionary[type, type[Any]] = weakref.WeakKeyDictionary()

F = TypeVar("F", bound=_Forwarder)


def _stand_in_class(base: type[F], target: type) -> type[F]:
    """``base`` (a pool's or a worker's stand-in), as a virtual subclass of ``target``."""
    made = _STAND_IN_CLASSES.get(target)
    if made is None or not issubclass(made, base):
        namespace = {"__module__": base.__module__, "__qualname__": base.__qualname__}
        made = cast("type[F]", type(base.__name__, (base,), namespace))
        if isinstance(target, abc.ABCMeta):
            target.register(made)
        _STAND_IN_CLASSES[target] = made
    return made


class TrioPool(_Forwarder):
    """What ``async with pool`` gives under trio (and what :func:`~aioenv.make_pool`
    returns when called in a trio run): the pool, with every method and attribute, run on
    a private asyncio loop in a background thread (``aioenv-trio-bridge``). Use it exactly
    as the pool; leaving ``async with`` (or ``await aclose()``) closes the pool as usual
    (close, ``cleanup_time``, terminate, kill), then ends the thread."""

    def __init__(self, pool: Any) -> None:
        bridge = _Bridge()
        super().__init__(pool, bridge)
        host: CoroutineHost = bridge  # coroutine envs run in the trio run
        for worker in pool.workers:
            worker._run_coroutines_in(host)
        close_at_exit(id(self), self._close_at_exit)

    def __len__(self) -> int:
        return len(self._target)  # fixed at construction

    async def __aiter__(self) -> AsyncIterator[Any]:
        iterator = self._target.__aiter__()  # created here, run on the bridge
        while True:
            try:  # each __anext__() is called, and awaited, on the bridge loop
                item = await self._bridge.run(iterator.__anext__)
            except StopAsyncIteration:
                return
            yield item

    async def __aenter__(self) -> TrioPool:
        self._bridge.call(self._target._check_open)
        return self

    async def aclose(self) -> None:
        """Close the pool (see :meth:`~aioenv.WorkerPool.aclose`), then stop the bridge's
        thread. Idempotent; runs to the end even if cancelled."""
        bridge = self._bridge
        with trio.CancelScope(shield=True):
            if bridge.closed:
                return
            try:
                await bridge.run(self._target.aclose)
            finally:
                close_at_exit(id(self), None)
                bridge.stop()

    def _close_at_exit(self) -> None:
        """At interpreter exit, a pool left open: close it on the bridge, then stop it."""
        try:
            self._bridge.background.call(self._target.aclose, timeout=60.0)
        finally:
            self._bridge.stop()

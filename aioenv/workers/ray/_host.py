"""The parent's side of a Ray actor serving env slots: start it, batch its messages into
actor calls, await the answers on the event loop, notice its death, kill it.

Like :class:`~aioenv.workers.process._host.Host` for a child process, an :class:`ActorHost` knows
nothing of workers: it is given plain data and, per slot, a ``deliver`` callback for each
answer and an ``on_exit`` callback (its death). Messages sent in one loop iteration travel together:
in one frame on the actor's direct connection once it is made
(:mod:`aioenv.workers.ray._channel`), else in one actor call. The two ways never carry
messages at once (a switch waits until the other way's are answered), so the actor answers
them in the order sent; control requests and rollouts, whose large values go through
Ray's object store, always go as calls.

No Ray call is made on the event loop: Ray's calls take the GIL for a while and, on busy
cores, tens of milliseconds. A host's actor calls are made in a thread of their own
(:mod:`aioenv.workers.ray._calls`), and their answers come back to the loop. Creating an
actor and killing one wait for Ray's control store
(tens of milliseconds, up to a second on busy cores): made from a thread that runs an
event loop (a restart, a step past its deadline, closing), they go to
:data:`_CONTROL_CALLS`, a thread of their own; messages for an actor still being created
wait in the host until it is. One call is made where it is asked for, once per process:
``ray.init`` (made from a thread that then ended, it left a driver that lost its
cluster). The pool's read of what the cluster has free runs on a thread of its own, with
a bound (:func:`aioenv.workers.ray._worker.free_resources`).

Which Ray the parent's side uses is said here too: the module, imported when the first Ray
worker is made (never by ``import aioenv``, :func:`import_ray`), and the cluster, joined or
started once per process (:func:`init_ray`).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any

from ...core._messages import Failure
from ...wire._ray_messages import CHANNEL_GROUP, Message, Pickled, Reply
from ...wire._requests import Request
from .._off_loop import OffLoopCalls
from .._replaceable import Replaceable, SlotRecipe
from ._calls import Call, add_outbox, send_off_loop
from ._channel import DirectConnection, first_line, goes_direct, loaded

__all__ = ["KILL_GRACE", "ActorHost", "ActorRecipe", "Deliver", "OnDeath", "import_ray", "init_ray"]

#: ``deliver(host, seq, result, borrowed)``: an answer for one slot; ``borrowed``: its
#: arrays are Ray's read-only views (it came as an actor call), else its own.
Deliver = Callable[["ActorHost", int, Any, bool], None]
#: ``on_exit(host, reason)``: the actor is gone (dead, lost with its node, or killed).
OnDeath = Callable[["ActorHost", str], None]

#: Seconds to wait for Ray to report a killed actor dead before warning.
KILL_GRACE = 10.0

#: ``ray.init`` defaults when aioenv starts Ray itself: a laptop, not a cluster.
LOCAL_RAY_DEFAULTS: dict[str, Any] = {
    "include_dashboard": False,
    "object_store_memory": 256 * 1024**2,
    "log_to_driver": True,
}


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError saying what to install."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ImportError(
            "Ray workers need Ray, which is not installed: pip install 'aioenv[ray]'"
        ) from exc


def init_ray(ray: Any) -> None:
    """Start a local Ray instance (:data:`LOCAL_RAY_DEFAULTS`, usage stats off) unless Ray
    is initialised already (``ray.init(address=...)``: that cluster is used) or
    ``RAY_ADDRESS`` names a cluster to join."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if os.environ.get("RAY_ADDRESS"):
        ray.init()  # joins that cluster, which has its own settings
    else:
        ray.init(**LOCAL_RAY_DEFAULTS)


#: The process's one queue of control calls, so that an actor is killed only after its
#: creation was asked for, whichever host asks.
_CONTROL_CALLS = OffLoopCalls("aioenv-ray-control")


@dataclasses.dataclass(frozen=True)
class ActorRecipe(SlotRecipe):
    """What starts an actor (see :class:`SlotRecipe`), kept so that a replacement can be
    started after a death: its Ray ``options``, per slot the ``deliver`` and ``on_exit``
    (its death) callbacks, and ``direct``: connect to the actor and send steps on that
    connection (:mod:`aioenv.workers.ray._channel`)."""

    options: dict[str, Any]
    deliver: Sequence[Deliver]
    on_exit: Sequence[OnDeath]
    direct: bool


@dataclasses.dataclass
class _ActorCall:
    """One actor call in flight: the messages it carries and its answer's future."""

    messages: list[Message]
    reply: asyncio.Future[Any]


class ActorHost(Replaceable["ActorHost", ActorRecipe]):
    """One Ray actor serving the env slots of ``recipe``. ``build``: every slot's env is
    built at once (a replacement builds each slot when its worker asks for a REBUILD)."""

    def __init__(self, recipe: ActorRecipe, build: bool = True) -> None:
        super().__init__(recipe, build)
        self._ray = ray = import_ray()
        init_ray(ray)
        actor_class = _actor_class(ray).options(**recipe.options)  # bad options fail here, at once
        create = functools.partial(actor_class.remote, *recipe.slots())
        #: The actor's handle once it is created (None until then).
        self._actor: Any = None
        #: Its creation, asked of Ray off the event loop when made on one.
        self._created: concurrent.futures.Future[Any] = _CONTROL_CALLS.run(create)
        #: Why the actor is gone (set once), or None while it serves.
        self.death: str | None = None
        #: The slot whose failure killed the actor, for the other slots' messages.
        self.killed_for: int | None = None
        #: The actor answered a call: it has started.
        self.answered = False
        self._queued: list[Message] = (
            [(slot, 0, Request.BUILD, None) for slot in range(self.size)] if build else []
        )
        self._calls: collections.deque[_ActorCall] = collections.deque()
        self._flush_scheduled = False
        #: The direct connection (None: every message goes as an actor call).
        self._direct = DirectConnection(self._ray, self) if recipe.direct else None
        # Last, once every attribute is set (a creation made here is done already).
        self._created.add_done_callback(self._start_done)

    @property
    def alive(self) -> bool:
        return self.death is None

    @property
    def actor_id(self) -> str:
        """The actor's id in the cluster (hex); waits for the actor's creation if it was
        asked for from an event loop and is not made yet."""
        return str(self._created.result()._actor_id.hex())

    @property
    def label(self) -> str:
        """The actor's id, short, or that it is being created (without waiting): ``actor
        0f3a…``."""
        return "actor being created" if self._handle() is None else f"actor {self.actor_id[:8]}"

    def _handle(self) -> Any:
        """The actor's handle, or None while it is being created (or could not be)."""
        if self._actor is None and self._created.done() and self._created.exception() is None:
            self._actor = self._created.result()
        return self._actor

    def _on_started(self) -> None:
        """On the loop that watches this host, once Ray has created the actor (or failed
        to): send what waits, and open the direct connection. Called once or twice (the
        creation's callback, :meth:`~aioenv.workers._replaceable.Replaceable._start_done`,
        and :meth:`watch` may both see it done)."""
        error = self._created.exception()
        if error is not None:
            self._die(f"its Ray actor could not be created ({first_line(error)})")
            return
        self.flush_soon()
        if self._direct is not None and self._loop is not None and self._handle() is not None:
            self._direct.begin(self._loop, self._handle())

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send and await from ``loop`` (once; again from a later loop once the first is
        closed, with a new direct connection); messages queued before go now."""
        if self._loop is not None and self._loop is not loop and self._loop.is_closed():
            self._close_direct()  # the closed loop took its reader and its calls' futures
            self._loop, self._flush_scheduled, self._calls = None, False, collections.deque()
            self._direct = DirectConnection(self._ray, self) if self._recipe.direct else None
        if self._loop is not None:
            return
        self._loop = loop
        if self._created.done():
            loop.call_soon(self._on_started)  # a failed creation is reported as a death is

    # Sending -------------------------------------------------------------------------
    def send(self, message: Message) -> None:
        """Queue ``message``; everything queued in this loop iteration goes in one call."""
        if not self.alive:
            return  # its death is (or was) reported to every slot
        self._queued.append(message)
        self.flush_soon()

    def flush_soon(self) -> None:
        """Have what is queued flushed as this loop iteration ends (once a loop watches)."""
        if self._queued and self._loop is not None and not self._flush_scheduled:
            self._flush_scheduled = True
            add_outbox(self._loop, self._flush)

    def _flush(self) -> Call | None:
        """Send what is queued, as a frame on the direct connection, or as the call
        returned (on the loop, as the iteration ends)."""
        self._flush_scheduled = False
        actor = self._handle()
        if actor is None:
            return None  # still being created: sent once it is (_on_started)
        if not self._queued or not self.alive:
            self._queued.clear()
            return None
        direct = self._direct
        if direct is not None and direct.open and all(map(goes_direct, self._queued)):
            if self._calls:
                return None  # sent once the calls are answered (_on_reply), in order
            messages, self._queued = self._queued, []
            failed = direct.send(messages)
            if failed:
                self._deliver(failed, borrowed=False)
            return None
        if direct is not None and direct.unanswered:
            return None  # sent once the connection's are answered (on_replies), in order
        messages, self._queued = self._queued, []
        assert self._loop is not None
        reply = self._loop.create_future()
        self._calls.append(_ActorCall(messages, reply))
        reply.add_done_callback(self._on_reply)
        return (actor.serve, (messages,), reply, True)

    # The direct connection (its ChannelHost) -----------------------------------------
    def on_replies(self, replies: list[Reply]) -> None:
        """Replies that came on the direct connection (a CLOSE_SLOT's is empty)."""
        self.answered = True
        self._deliver([reply for reply in replies if reply[1:] != (0, None)], borrowed=False)
        if self._direct is not None and not self._direct.unanswered:
            self.flush_soon()  # what waited for these answers

    def on_lost(self, reason: str) -> None:
        """The direct connection found the actor gone (``reason`` says how)."""
        self._die(f"its Ray actor is gone ({reason})")

    # Answers -------------------------------------------------------------------------
    def _on_reply(self, _: object) -> None:
        calls, ray_errors = self._calls, self._ray.exceptions
        while calls and calls[0].reply.done():  # in call order: the actor ran them so
            call = calls.popleft()
            if call.reply.cancelled():
                continue
            error = call.reply.exception()
            if error is None:
                self.answered = True
                self._deliver(call.reply.result(), borrowed=True)
            elif isinstance(error, ray_errors.RayTaskError) or not isinstance(
                error, ray_errors.RayError
            ):
                self._fail_call(call, error)  # failed on the actor, or never made (won't pickle)
            else:
                self._die(f"its Ray actor is gone ({first_line(error)})")
        if not calls:
            self.flush_soon()  # what waited for the other way's answers

    def _deliver(self, replies: list[Reply], borrowed: bool) -> None:
        deliver = self._recipe.deliver
        for slot, seq, result in replies:
            if not self.alive:
                return
            if type(result) is Pickled:
                result = loaded(result.data)
            deliver[slot](self, seq, result, borrowed)

    def _fail_call(self, call: _ActorCall, error: BaseException) -> None:
        """The actor lives; only this call failed: its requests that wait get the Failure
        (the caller's where the call was never made, its request would not pickle, or its
        request would not load on the actor: Ray's system error there)."""
        errors = self._ray.exceptions
        caller = not isinstance(error, errors.RayError) or isinstance(error, errors.RaySystemError)
        failure = Failure(
            exception_type=type(error).__name__,
            message=first_line(error),
            traceback=str(error),
            during="a Ray actor call (its request or reply may not have pickled)",
            blame="the request sent" if caller else "the env",
        )
        deliver = self._recipe.deliver
        for slot, seq, op, _payload in call.messages:
            if seq and op in (Request.STEP, Request.CONTROL) and self.alive:
                deliver[slot](self, seq, failure, False)

    def _die(self, reason: str, killed_for: int | None = None) -> None:
        """The actor is gone, or is killed because the env in slot ``killed_for`` failed:
        tell every slot still in use, once (after a kill, in the next loop iteration)."""
        if self.death is not None:
            return
        self.killed_for = killed_for
        self.death = reason
        self._queued.clear()
        self._close_direct()
        self._kill_actor()  # merely unreachable, it might come back: make sure it won't
        if killed_for is None:
            self._report_death()
        elif self._loop is not None:
            self._loop.call_soon(self._report_death)

    def _close_direct(self) -> None:
        if self._direct is not None:
            self._direct.close()

    def _report_death(self) -> None:
        assert self.death is not None
        on_exit = self._recipe.on_exit
        for slot in sorted(self._open_slots):
            on_exit[slot](self, self.death)

    # Ending ----------------------------------------------------------------------------
    def kill(self, slot: int, reason: str) -> None:
        """Kill the actor at once because the env in ``slot`` failed, or its worker was
        abandoned (``reason`` says how); the other slots hear of it in the next loop
        iteration (none where no loop watches it)."""
        self._die(f"its Ray actor was killed because {reason}", killed_for=slot)

    def release(self, slot: int) -> None:
        """The env in ``slot`` is done: close it now, the last one too (a worker closed by
        ``CLOSE`` alone may never be awaited; :meth:`end` kills the actor)."""
        self._open_slots.discard(slot)
        self.send((slot, 0, Request.CLOSE_SLOT, None))

    async def end(self, cleanup_time: float) -> bool:
        """Let the actor close its envs for up to ``cleanup_time`` seconds, then kill it
        and wait (up to :data:`KILL_GRACE` seconds) until Ray reports it dead. Returns
        whether it did."""
        self._queued.clear()  # requests not sent yet: nobody waits for their answers now
        self._close_direct()  # the actor's end stops answering; its close then runs
        try:
            await asyncio.wrap_future(self._created)
        except Exception:
            return True  # never created: nothing to end
        if self.alive:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._call("close"), cleanup_time)
        self.death = self.death or "closed"
        self._kill_actor()
        # ray.kill only asks: a call made now fails once the kill has taken effect.
        try:
            await asyncio.wait_for(self._call("linger", KILL_GRACE), KILL_GRACE + 1)
        except Exception as exc:
            return isinstance(exc, self._ray.exceptions.RayActorError)
        return False

    def _call(self, method: str, *args: Any) -> asyncio.Future[Any]:
        reply = asyncio.get_running_loop().create_future()
        send_off_loop([(getattr(self._handle(), method), args, reply, False)])
        return reply

    def _kill_actor(self) -> None:
        """Ask Ray to kill the actor: off the event loop when called on one (after its
        creation, which was asked for first)."""
        ray, created = self._ray, self._created

        def kill() -> None:
            with contextlib.suppress(Exception):  # never created, or already gone
                ray.kill(created.result(), no_restart=True)

        _CONTROL_CALLS.run(kill)


@functools.cache
def _actor_class(ray: Any) -> Any:
    """The env side's :class:`~aioenv.workers.ray._actor.EnvActor` as a Ray actor class,
    made once (Ray exports it on first use). Imported here only: the parent's side leans
    on nothing of the env's side but this class to name."""
    from ._actor import EnvActor

    # The calls run one at a time, in order; the direct connection's in a group beside.
    return ray.remote(concurrency_groups={CHANNEL_GROUP: 1})(EnvActor)

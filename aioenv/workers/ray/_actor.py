"""The env side of a Ray worker: the actor that serves one or more env slots.

It is what a child process is to a process worker (:mod:`aioenv.workers.process._child`), with a
Ray actor call in place of the socket: each call carries a batch of messages (one per slot
that had something to send in one loop iteration of the parent) and returns the answers
in the same order. Each env is driven by the same :class:`~aioenv.env_side._runner.EnvRunner` as
every other kind, and each message means what it means to a child: both serve through
:class:`~aioenv.env_side._serving.Slots`. This module imports nothing from the parent's
side, and not ray itself: the parent wraps :class:`EnvActor` with ``ray.remote`` (and
imports this module only then). The messages are in :mod:`aioenv.wire._ray_messages`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import cloudpickle

from ...core._messages import ControlRequest, EpisodeOptions, Failure
from ...env_side._serving import Slots
from ...env_side._thread_caps import ThreadCaps
from ...wire._ray_messages import Message, Pickled, Ready, Reply
from ...wire._requests import Request

__all__ = ["EnvActor"]


class EnvActor:
    """Serves one env per payload (cloudpickled env sources); slot ``i`` is seeded with
    ``seeds[i]`` at its first reset. Envs are built when a BUILD or REBUILD message asks,
    once the parent's gymnasium ids (``registry``, :func:`aioenv.core._registry.snapshot`) are
    added to this process's and its native thread pools capped (``thread_caps``, see
    :mod:`aioenv.env_side._thread_caps`). What each message does is
    :class:`~aioenv.env_side._serving.Slots`'s, as in a process worker's child."""

    def __init__(
        self,
        payloads: list[bytes],
        seeds: list[int | None],
        episode: EpisodeOptions,
        registry: bytes,
        thread_caps: ThreadCaps | None,
    ) -> None:
        self._slots = Slots(payloads, seeds, episode, registry, thread_caps)

    def serve(self, messages: list[Message]) -> list[Reply]:
        """Answer ``messages`` in order; messages that need no answer get none."""
        replies: list[Reply] = []
        for slot, seq, request, payload in messages:
            if request == Request.CONTROL:
                payload = _resolved(payload)
            answer = self._slots.serve(slot, request, payload)
            if request == Request.STEP:
                replies.append((slot, seq, _portable(answer)))
            elif request == Request.CONTROL:
                replies.append((slot, seq, _pickled(_portable(answer))))
            elif request != Request.CLOSE_SLOT:
                replies.append((slot, 0, _ready(answer)))  # BUILD, REBUILD: the spaces
        return replies

    def close(self) -> None:
        """Close every env (the parent then kills the actor)."""
        self._slots.close()

    def linger(self, seconds: float) -> None:
        """Wait here: a call the parent makes after killing the actor, which fails as soon
        as the kill has taken effect (and returns only if it never does)."""
        time.sleep(seconds)


def _ready(spaces: tuple[Any, Any]) -> Ready | Pickled:
    ready = _pickled(Ready(*spaces))
    return Ready(None, None) if isinstance(ready, Ready) else ready  # spaces are informative


def _pickled(result: Any) -> Any:
    """``result`` as :class:`Pickled` bytes, or as it is where cloudpickle cannot take it
    (Ray's serializer then says why)."""
    try:
        return Pickled(cloudpickle.dumps(result, protocol=5))
    except Exception:
        return result


def _portable(result: Any) -> Any:
    """A :class:`Failure` whose exception cannot travel loses it (its text stays)."""
    if isinstance(result, Failure) and result.exception is not None:
        try:
            cloudpickle.dumps(result.exception)
        except Exception:
            return result.without_exception()
    return result


def _resolved(request: ControlRequest) -> ControlRequest:
    """The request with the arguments the parent put in the object store fetched here.
    (Ray resolves only an actor call's top-level arguments, and these are nested.)"""
    if not any(_is_ref(value) for value in (*request.args, *request.kwargs.values())):
        return request
    import ray  # only reached inside a Ray actor, where ray is importable

    args = tuple(ray.get(value) if _is_ref(value) else value for value in request.args)
    kwargs = {k: ray.get(v) if _is_ref(v) else v for k, v in request.kwargs.items()}
    return dataclasses.replace(request, args=args, kwargs=kwargs)


def _is_ref(value: Any) -> bool:
    return type(value).__name__ == "ObjectRef" and type(value).__module__.startswith("ray")

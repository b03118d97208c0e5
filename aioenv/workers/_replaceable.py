"""What a host (a process worker's child, a Ray actor) keeps of its slots and does to be
replaced after a death: its recipe starts another like itself, once, whose slots' envs are
built only as their workers ask."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ..core._messages import EpisodeOptions
from ..core._seeds import GroupSeed
from ..env_side._thread_caps import ThreadCaps
from ._off_loop import call_soon_threadsafe

__all__ = ["Replaceable", "SlotRecipe"]

_Host = TypeVar("_Host")


@dataclasses.dataclass(frozen=True)
class SlotRecipe:
    """What starts a host serving ``len(payloads)`` env slots, as each kind's recipe starts
    it: slot ``i`` runs the env pickled in ``payloads[i]``, seeded with ``seeds[i]``.
    ``registry``: the gymnasium ids the host adds to its own before it builds any env
    (:func:`aioenv.core._registry.snapshot`). ``thread_caps``: how the host caps its native
    thread pools before it builds any env (None: it leaves them as they are)."""

    payloads: Sequence[bytes]
    seeds: Sequence[GroupSeed]
    episode: EpisodeOptions
    registry: bytes
    thread_caps: ThreadCaps | None

    def slots(self) -> list[Any]:
        """The arguments of the host's :class:`~aioenv.env_side._serving.Slots` (made in the
        child or the actor), as the host is handed them first: the fields above, which
        :class:`SlotRecipe` declares in the order ``Slots`` takes them."""
        return [getattr(self, field.name) for field in dataclasses.fields(SlotRecipe)]


_Recipe = TypeVar("_Recipe", bound=SlotRecipe)


class Replaceable(Generic[_Host, _Recipe]):
    """A host started from ``recipe``, kept so that its replacement starts the same way.
    ``build``: every slot's env is built at once, and every slot is in use (a replacement
    builds each slot's env when its worker asks for a REBUILD, and gains the slot as that
    worker moves over: :meth:`open_slot`)."""

    #: The host that took over from this one (None until :meth:`replacement` is called).
    successor: _Host | None = None
    #: The event loop that watches this host (None until a kind's ``watch`` is called).
    _loop: asyncio.AbstractEventLoop | None = None

    def __init__(self, recipe: _Recipe, build: bool) -> None:
        self._recipe = recipe
        #: How many slots it serves.
        self.size = len(recipe.payloads)
        # Slots in use; a replacement gains them as their workers move over.
        self._open_slots = set(range(self.size)) if build else set()

    @property
    def in_use(self) -> bool:
        """Some slot still uses this host (it has not been released by every worker)."""
        return bool(self._open_slots)

    def open_slot(self, slot: int) -> None:
        self._open_slots.add(slot)

    def replacement(self) -> _Host:
        """The host that takes over after this one died or was killed: started once,
        shared by every slot, each slot's env built when its worker asks (REBUILD)."""
        if self.successor is None:
            start: Callable[..., Any] = type(self)  # a host of this one's class
            self.successor = start(self._recipe, build=False)
        return self.successor

    def _start_done(self, _: object) -> None:
        """In the thread that started the host (a process host's child, a Ray actor's
        creation), once its start is done: tell the loop that watches this host. Not the
        loop the host was made on: a vector env made in a running loop builds its workers
        there and drives them from a loop of its own, in another thread, while its calls
        hold up the first (which may not run again before the host is closed). None
        watches yet: the kind's ``watch`` finds the start done."""
        loop = self._loop
        if loop is not None:
            call_soon_threadsafe(loop, self._on_started)

    def _on_started(self) -> None:
        """On the loop that watches this host, once its start is done (or failed): each
        kind's own. Called once or twice (the start's callback and the kind's ``watch``
        may both see it done)."""
        raise NotImplementedError

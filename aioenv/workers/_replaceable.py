"""What a host (a process worker's child, a Ray actor) does to be replaced after a death:
start another like itself, once, whose slots' envs are built only as their workers ask."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Replaceable"]

_Host = TypeVar("_Host")


class Replaceable(Generic[_Host]):
    """A host whose ``_recipe`` (a dataclass) holds the arguments that started it, each
    field named as the host's own parameter, so that its replacement starts the same way."""

    #: The host that took over from this one (None until :meth:`replacement` is called).
    successor: _Host | None = None
    _recipe: Any

    def replacement(self) -> _Host:
        """The host that takes over after this one died or was killed: started once,
        shared by every slot, each slot's env built when its worker asks (REBUILD)."""
        if self.successor is None:
            start: Callable[..., Any] = type(self)  # a host of this one's class
            self.successor = start(**vars(self._recipe), build=False)  # its fields, by name
        return self.successor

"""Typed commands that can be sent to a worker in place of an action."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

__all__ = ["CLOSE", "RESET", "Command", "Reset"]


class Command(enum.Enum):
    """A command for a worker. Workers test for these by identity, never with ``==``,
    so any action (an int, a numpy array, a dict) can be sent safely."""

    RESET = "reset"
    CLOSE = "close"

    def __repr__(self) -> str:
        return f"aioenv.{self.name}"


RESET = Command.RESET
CLOSE = Command.CLOSE


@dataclasses.dataclass(frozen=True)
class Reset:
    """``RESET`` with arguments: ``seed`` for this reset only (later resets continue the
    env's RNG) and ``options`` for gymnasium's ``reset(options=...)``."""

    seed: int | None = None
    options: dict[str, Any] | None = None


def is_reset(action: object) -> bool:
    """True for ``RESET`` and ``Reset(...)``; never compares the action with ``==``."""
    return (isinstance(action, Command) and action is RESET) or isinstance(action, Reset)

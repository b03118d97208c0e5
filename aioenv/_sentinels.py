"""Typed commands that can be sent to a worker in place of an action."""

from __future__ import annotations

import enum

__all__ = ["CLOSE", "RESET", "Command"]


class Command(enum.Enum):
    """A command for a worker. Workers test for these by identity, never with ``==``,
    so any action (an int, a numpy array, a dict) can be sent safely."""

    RESET = "reset"
    CLOSE = "close"

    def __repr__(self) -> str:
        return f"aioenv.{self.name}"


RESET = Command.RESET
CLOSE = Command.CLOSE

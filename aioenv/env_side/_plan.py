"""The env side's plans and their two drivers.

A *plan* is a generator that makes an env's calls itself and yields each call's result to
its driver, which sends back the settled value: :func:`drive` sends a plain env's result
back as it is, :func:`drive_async` awaits a coroutine env's result first (and throws what
the await raised into the plan, where the plan's own ``except`` reports it). What happens
around the calls (seeds, autoreset, time limits, failures, a rollout's rows) is written
once, in the plan, so a plain env and a coroutine env cannot be answered differently.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator
from types import CoroutineType
from typing import Any, TypeVar

__all__ = ["Plan", "drive", "drive_async"]

T = TypeVar("T")

#: Yields each env call's result; is sent it back settled; returns the answer.
Plan = Generator[Any, Any, T]


def drive(plan: Plan[T]) -> T:
    """Run ``plan`` in line (a plain env: its calls' results are already settled)."""
    try:
        value = next(plan)
        while True:
            value = plan.send(value)
    except StopIteration as stop:
        answer: T = stop.value
        return answer


async def drive_async(plan: Plan[T]) -> T:
    """Run ``plan`` on the running loop, awaiting each call's result that is awaitable."""
    try:
        value = next(plan)
        while True:
            # A coroutine env's call returns a coroutine: checked first, as a type test
            # costs a fraction of isawaitable's call.
            if type(value) is CoroutineType or inspect.isawaitable(value):
                try:
                    value = await value
                except Exception as exc:
                    value = plan.throw(exc)
                    continue
            value = plan.send(value)
    except StopIteration as stop:
        answer: T = stop.value
        return answer

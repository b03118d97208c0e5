"""Where :class:`~aioenv.AioVectorEnv`'s envs step by default (``mode="auto"``): in the
calling thread, or in child processes, and how many.

A lockstep vector step waits for its slowest part. In line, ``N`` envs cost ``N`` steps of
one env, ``t`` each. In ``W`` child processes of ``k = N / W`` envs, they cost ``k`` steps
plus the hand-off: the actions out and the states back, which costs the parent and a child
about :data:`HAND_OFF` for the first child and :data:`PER_CHILD` more for each other one
(the parent reads and writes them one after the other). The probe env the vector env
builds anyway is stepped for ``t``; children are chosen when their estimate beats stepping
in line by :data:`MARGIN`, with at most one child per core (a lockstep script waits while
they step, so its own core is free for one of them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ._probe import Probe
from ._vector_inline import INLINE_OPTIONS
from ._vector_layout import usable_cores

__all__ = ["AUTO", "HAND_OFF", "MARGIN", "PER_CHILD", "ModeChoice", "choose_mode"]

AUTO = "auto"
#: Seconds a lockstep step through one child process costs beyond its envs' own work
#: (parent and child together; ``benchmarks/run.py --only W4``, and an ``AioVectorEnv``
#: of one CartPole in one child, measured on 2 and 16 cores).
HAND_OFF = 150e-6
#: What each further child adds to a lockstep step (the parent handles them in turn).
PER_CHILD = 60e-6
#: Children must be estimated this much faster than stepping in line to be chosen: the
#: estimate is rough, and in line there is nothing to start, nothing to lose.
MARGIN = 1.25


@dataclasses.dataclass(frozen=True)
class ModeChoice:
    """A vector env's mode, its envs per worker (0: the pool's own default) and why."""

    mode: str | Sequence[str]
    envs_per_worker: int
    reason: str


def choose_mode(
    mode: str | Sequence[str],
    probe: Probe,
    num_envs: int,
    batch_size: int | None,
    options: dict[str, Any],
    cores: int | None = None,
) -> ModeChoice:
    """The mode ``mode`` stands for: itself, unless it is ``"auto"``."""
    if mode != AUTO:
        return ModeChoice(mode, 0, "given")
    if probe.is_async:
        return ModeChoice("coroutine", 0, "auto: the env's reset and step are async def")
    if batch_size is not None and batch_size < num_envs:
        pipelined = f"auto: batch_size={batch_size} < num_envs, envs step while the script computes"
        return ModeChoice("process", 0, pipelined)
    pool_only = sorted(set(options) - INLINE_OPTIONS)
    if pool_only:
        return ModeChoice("process", 0, f"auto: {', '.join(pool_only)} configure child processes")
    step = probe.step_seconds
    if step is None:
        return ModeChoice("process", 0, "auto: the probe env could not be stepped to time it")
    return _by_cost(step, num_envs, usable_cores() if cores is None else cores)


def _by_cost(step: float, num_envs: int, cores: int) -> ModeChoice:
    inline = num_envs * step
    per_worker, children = min(
        ((k, num_envs // k) for k in range(1, num_envs + 1) if not num_envs % k),
        key=lambda group: _children_cost(step, *group) if group[1] <= cores else float("inf"),
    )
    estimate = _children_cost(step, per_worker, children)
    figures = (
        f"a step takes {step * 1e6:.0f} µs: {num_envs} in line ~{inline * 1e3:.2f} ms, "
        f"{children} child process{'es' if children > 1 else ''} of {per_worker} "
        f"~{estimate * 1e3:.2f} ms"
    )
    if estimate * MARGIN < inline:
        return ModeChoice("process", per_worker, f"auto (process): {figures}")
    return ModeChoice("inline", num_envs, f"auto (inline): {figures}")


def _children_cost(step: float, per_worker: int, children: int) -> float:
    return per_worker * step + HAND_OFF + PER_CHILD * (children - 1)

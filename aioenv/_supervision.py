"""How a worker is supervised: step deadlines, restarts and failure reports."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

import numpy as np

from ._errors import WorkerError

__all__ = ["DEFAULT_START_TIMEOUT", "Supervision", "restart_seed"]

#: The deadline for building an env and its first reset when only ``step_timeout`` is
#: set: simulators can take far longer to start than to step.
DEFAULT_START_TIMEOUT = 60.0

_MAX_BACKOFF = 10.0


@dataclasses.dataclass(frozen=True)
class Supervision:
    """``step_timeout``: seconds a step (or reset) may take, None for no deadline.
    ``start_timeout``: the same for construction plus the first reset after a (re)start;
    None means ``max(step_timeout, 60)`` when ``step_timeout`` is set, else no deadline.
    ``restart``: ``"never"`` or ``"on_failure"`` (env exception, death, timeout), at most
    ``max_restarts`` times per worker, waiting ``restart_backoff`` seconds before the
    first, doubling for back-to-back failures (capped at 10 s).
    ``on_failure``: called with every failure, restarted or not."""

    step_timeout: float | None = None
    start_timeout: float | None = None
    restart: Literal["never", "on_failure"] = "never"
    max_restarts: int = 3
    restart_backoff: float = 0.0
    on_failure: Callable[[WorkerError], None] | None = None

    def __post_init__(self) -> None:
        for name in ("step_timeout", "start_timeout"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{name} must be None or a number > 0, got {value!r}")
        if self.restart not in ("never", "on_failure"):
            raise ValueError(f"restart must be 'never' or 'on_failure', got {self.restart!r}")
        if not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise ValueError(f"max_restarts must be an int >= 0, got {self.max_restarts!r}")
        if not (isinstance(self.restart_backoff, (int, float)) and self.restart_backoff >= 0):
            raise ValueError(f"restart_backoff must be a number >= 0, got {self.restart_backoff!r}")

    @property
    def has_deadlines(self) -> bool:
        return self.step_timeout is not None or self.start_timeout is not None

    def deadline(self, starting: bool) -> float | None:
        if not starting:
            return self.step_timeout
        if self.start_timeout is not None:
            return self.start_timeout
        if self.step_timeout is not None:
            return max(self.step_timeout, DEFAULT_START_TIMEOUT)
        return None

    def backoff(self, consecutive_failures: int) -> float:
        if self.restart_backoff <= 0:
            return 0.0
        return float(
            min(self.restart_backoff * 2 ** max(consecutive_failures - 1, 0), _MAX_BACKOFF)
        )


def restart_seed(seed: int | None, restart: int) -> int | None:
    """The seed for a worker's ``restart``-th restart: child ``restart`` of the worker's
    ``SeedSequence``, so restarts are deterministic and differ from the first start."""
    if seed is None:
        return None
    child = np.random.SeedSequence(seed, spawn_key=(restart,))
    return int(child.generate_state(1, dtype=np.uint32)[0])

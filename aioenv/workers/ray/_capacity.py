"""What a pool's Ray actors ask of the cluster, against what it has available.

Ray starts an actor once the resources it reserves are free, and keeps the others waiting
in silence, for ever on a cluster that never grows. So when a pool starts its actors, what
they ask for is compared with what the cluster has free: a shortfall is a warning at once
and, if the actors are still waiting at ``start_timeout``, the reason their workers give.

What the cluster has free is read through Ray's state API (``ray.available_resources``),
which answers in tens of milliseconds, and which can also never answer: Ray 2.60's first
read in a process can block for good in ``GlobalState.available_resources_per_node``,
whichever thread makes it. So the read runs on a thread of its own, and the pool goes on
without it, with no warning, after :data:`READ_PATIENCE` (:func:`free_resources`).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["READ_PATIENCE", "Shortage", "free_resources", "shortage"]

#: How long making a pool waits for Ray's answer to what the cluster has free (seconds).
READ_PATIENCE = 5.0

#: Ray's names for the resources that ``num_cpus`` and ``num_gpus`` reserve.
_BUILT_IN = (("num_cpus", "CPU"), ("num_gpus", "GPU"))


@dataclasses.dataclass(frozen=True)
class Shortage:
    """``actors`` actors that reserve ``per_actor`` of ``resource`` each (the actor option
    ``option`` asks for it) where the cluster has ``available``: ``waiting`` of them wait."""

    actors: int
    option: str
    resource: str
    per_actor: float
    available: float
    waiting: int

    def __str__(self) -> str:
        wanted = self.actors * self.per_actor
        return (
            f"{_count(self.actors, 'actor')} x {self.option}={self.per_actor:g} = "
            f"{_amount(wanted, self.resource)}, the Ray cluster has "
            f"{_amount(self.available, self.resource)} available: "
            f"{_count(self.waiting, 'actor')} will wait"
        )

    @property
    def advice(self) -> str:
        """What to do about it."""
        return (
            f"ask for fewer actors (more envs_per_actor), a smaller {self.option}, or a "
            "bigger cluster"
        )


def shortage(
    actors: int, options: Mapping[str, Any], available: Mapping[str, float]
) -> Shortage | None:
    """The resource that keeps the most of ``actors`` actors (each started with Ray actor
    ``options``) waiting, given the cluster's ``available`` resources
    (``ray.available_resources()``); None if they all fit. Actors placed by a scheduling
    strategy object (a placement group, a node) are not judged: what they may use is not
    what the cluster has free."""
    strategy = options.get("scheduling_strategy")
    if strategy is not None and not isinstance(strategy, str):
        return None
    demands = [(option, resource, options.get(option)) for option, resource in _BUILT_IN]
    demands += [
        (f"resources[{name!r}]", name, amount)
        for name, amount in (options.get("resources") or {}).items()
    ]
    worst: Shortage | None = None
    for option, resource, per_actor in demands:
        if not isinstance(per_actor, (int, float)) or per_actor <= 0:
            continue
        have = float(available.get(resource, 0.0))
        # A hair of slack: Ray keeps fractional resources in fixed point, so 2 CPUs over
        # num_cpus=0.1 may read as 19.999... actors.
        fit = math.floor(have / per_actor + 1e-9)
        waiting = actors - fit
        if waiting > 0 and (worst is None or waiting > worst.waiting):
            worst = Shortage(actors, option, resource, float(per_actor), have, waiting)
    return worst


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _amount(value: float, resource: str) -> str:
    if resource in ("CPU", "GPU"):
        return f"{value:g} {resource}" if value == 1 else f"{value:g} {resource}s"
    return f"{value:g} of {resource!r}"


def free_resources(ray: Any, patience: float = READ_PATIENCE) -> dict[str, float] | None:
    """What the cluster has free (``ray.available_resources()``), read on a thread of its
    own; None if the read failed or had not answered after ``patience`` seconds (the
    thread is then left to Ray: a daemon, it ends when the read does, or with the
    process)."""
    answer: list[dict[str, float]] = []
    answered = threading.Event()

    def read() -> None:
        try:
            answer.append(ray.available_resources())
        except Exception:  # no reading, no warning: the pool goes on
            pass
        finally:
            answered.set()

    threading.Thread(target=read, name="aioenv-ray-resources", daemon=True).start()
    return answer[0] if answered.wait(patience) and answer else None

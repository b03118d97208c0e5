"""Seeds: one independent seed per env from a base seed, and deterministic seeds for
restarts. Drawn from ``numpy.random.SeedSequence`` without touching any global RNG; a leaf
module that both the parent's side and the env's side use."""

from __future__ import annotations

import numpy as np

__all__ = ["restart_seed", "worker_seeds"]


def worker_seeds(seed: int | None, num_workers: int) -> list[int | None]:
    """One independent seed per worker, drawn from ``numpy.random.SeedSequence(seed)``
    without touching any global RNG. ``None`` gives ``None`` for every worker (each env
    then seeds itself from OS entropy)."""
    if seed is None:
        return [None] * num_workers
    children = np.random.SeedSequence(seed).spawn(num_workers)
    return [int(child.generate_state(1, dtype=np.uint32)[0]) for child in children]


def restart_seed(seed: int | None, restart: int) -> int | None:
    """The seed for a worker's ``restart``-th restart: child ``restart`` of the worker's
    ``SeedSequence``, so restarts are deterministic and differ from the first start."""
    if seed is None:
        return None
    child = np.random.SeedSequence(seed, spawn_key=(restart,))
    return int(child.generate_state(1, dtype=np.uint32)[0])

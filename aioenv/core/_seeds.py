"""Seeds: one independent seed per env from a base seed, and deterministic seeds for
restarts, drawn from ``numpy.random.SeedSequence`` without touching any global RNG; and
gymnasium's reading of a vector reset's seeds and reset mask. The checks of a seed and of
a count option (:func:`checked_seed`, :func:`checked_count`: numpy's integers taken as
ints, a bool refused), one rule for every option of each. A leaf module that both the
parent's side (a vector env's reset) and the env's side (a worker of several envs) use."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._commands import Reset

__all__ = [
    "GroupSeed",
    "checked_count",
    "checked_seed",
    "env_seeds",
    "per_env_seeds",
    "reset_mask",
    "restart_seed",
    "seeded_reset",
    "worker_seeds",
]


def checked_seed(seed: Any, call: str = "") -> int | None:
    """A seed (a worker's, or a pool call's) as a Python int (numpy's ints too), or None;
    ValueError, naming ``call`` where given, for anything else (a bool, a negative int),
    before any env sees it."""
    if seed is not None and (
        type(seed) is bool or not isinstance(seed, (int, np.integer)) or seed < 0
    ):
        named = f"{call} seed" if call else "seed"
        raise ValueError(f"{named} must be a non-negative int or None, got {seed!r}")
    return None if seed is None else int(seed)


def checked_count(
    value: Any, name: str, least: int = 1, *, or_none: bool = False, meaning: str = ""
) -> int:
    """The count option ``name``'s ``value`` as a Python int (numpy's integers too, as RL
    code passes counts drawn from arrays); for anything else (a bool, a float, a count
    below ``least``) ValueError ``{name} must be an int >= {least}, got {value!r}``, before
    it is used. ``or_none``: the option also takes None (which its caller handles), and the
    message says so (``must be None or an int``); ``meaning``: what the count is, said in
    the message after the bound."""
    if type(value) is bool or not isinstance(value, (int, np.integer)) or value < least:
        takes = "None or an int" if or_none else "an int"
        raise ValueError(f"{name} must be {takes} >= {least}{meaning}, got {value!r}")
    return int(value)


def seeded_reset(reset: Any, seed: int) -> Reset:
    """The reset request (``RESET`` or a ``Reset``) with ``seed``, unless it names its own."""
    request = reset if isinstance(reset, Reset) else Reset()
    return request if request.seed is not None else dataclasses.replace(request, seed=seed)


def worker_seeds(seed: int | None, num_workers: int) -> list[int | None]:
    """One independent seed per worker, drawn from ``numpy.random.SeedSequence(seed)``
    without touching any global RNG. ``None`` gives ``None`` for every worker (each env
    then seeds itself from OS entropy). ValueError for a ``seed`` a worker refuses."""
    seed = checked_seed(seed)
    # Worker i's seed is child i of the sequence, as SeedSequence.spawn makes it: the
    # seed restart_seed gives restart i.
    return [restart_seed(seed, child) for child in range(num_workers)]


#: The seed of a group of envs: one seed theirs are drawn from, or one seed per env.
GroupSeed = int | None | Sequence[int | None]


def env_seeds(seed: GroupSeed, num_envs: int) -> list[int | None]:
    """Each env's seed in a group seeded ``seed``: drawn from one seed
    (:func:`worker_seeds`), or given env by env (an engine child's: the seeds its envs
    have wherever they are grouped)."""
    if seed is None or isinstance(seed, int):
        return worker_seeds(seed, num_envs)
    return list(seed)


def restart_seed(seed: int | None, restart: int) -> int | None:
    """The seed for a worker's ``restart``-th restart: child ``restart`` of the worker's
    ``SeedSequence``, so restarts are deterministic and differ from the first start."""
    if seed is None:
        return None
    child = np.random.SeedSequence(seed, spawn_key=(restart,))
    return int(child.generate_state(1, dtype=np.uint32)[0])


def per_env_seeds(seed: Any, num_envs: int, call: str) -> list[int | None]:
    """gymnasium's seeds of a vector reset: None for every env, env ``i`` gets ``seed + i``,
    or one seed per env (ValueError, naming ``call``, for any other number)."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, (int, np.integer)):
        return [int(seed) + i for i in range(num_envs)]
    takes = (
        f"{call}'s seed must be None, an int (env i gets seed + i) or a sequence of "
        f"{num_envs} ints or Nones, one per env"
    )
    if isinstance(seed, (str, bytes)) or not isinstance(seed, (Sequence, np.ndarray)):
        raise TypeError(f"{takes}; got the {type(seed).__name__} {seed!r}")
    seeds: list[int | None] = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"{takes}; got {len(seeds)} seeds for {num_envs} envs")
    for index, one in enumerate(seeds):
        if one is not None and not isinstance(one, (int, np.integer)):
            raise TypeError(f"{takes}; got seed[{index}]={one!r}, a {type(one).__name__}")
    return seeds


def reset_mask(
    options: dict[str, Any] | None, num_envs: int
) -> tuple[npt.NDArray[np.bool_] | None, dict[str, Any] | None]:
    """``options["reset_mask"]`` (None where there is none), checked as gymnasium checks
    it, with its exception types and texts, and a copy of the other options."""
    if options is None:
        return None, None
    options = dict(options)
    if "reset_mask" not in options:
        return None, options
    mask = options.pop("reset_mask")
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (num_envs,):
        raise ValueError(
            f"`options['reset_mask']` must have shape `({num_envs},)`, got {mask.shape}"
        )
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise ValueError(
            "`options['reset_mask']` must contain a boolean array with at least one True "
            f"value, got reset_mask={mask}"
        )
    return mask, options

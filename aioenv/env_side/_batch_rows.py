"""A :class:`~aioenv.env_side._vector_runner.VectorRunner`'s rows made one batch.

The envs of a worker answer a row each: an observation, a reward, two flags and an info.
These functions turn those rows into the batch a :class:`~aioenv.core._environment.BatchStep`
carries: the batched space of the envs' spaces, the observations stacked (into the
worker's shared memory where every row fits it exactly), the flags as bool arrays, and
the columns of rows that are not all ``step_row`` tuples. They keep no state: the runner
holds the envs' last observations and hands them in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Box, Tuple
from gymnasium.vector.utils import (
    batch_differing_spaces,
    batch_space,
    concatenate,
    create_empty_array,
    iterate,
)

from ._infos import final_entry

__all__ = ["batched_space", "columns_of", "fits", "flag_array", "misfit", "stack_rows", "zero_rows"]


def stack_rows(
    space: Any,
    rows: list[Any],
    every: list[Any],
    into: np.ndarray[Any, Any] | None,
    cast: bool = False,
) -> Any:
    """``rows`` (observations of ``space``) as one batch. ``every`` is every env's last
    observation (``rows`` itself when every env answered): a Box batch is stacked into
    ``into`` (the worker's shared memory, or None) when ``every`` fits it exactly; with
    ``cast``, in the space's dtype, as gymnasium's ``concatenate`` casts it (same_kind)."""
    if isinstance(space, Box):
        if into is not None and fits(every, into):
            return np.stack(every, out=into)
        try:
            # np.array of same-shape arrays is np.stack, three times faster
            stacked = np.array(rows)
        except ValueError:
            return np.stack(rows)  # its error names the mismatch
        return stacked.astype(space.dtype, copy=False, casting="same_kind") if cast else stacked
    out = create_empty_array(space, len(rows))
    return concatenate(space, rows, out)  # type: ignore[arg-type]


def misfit(space: Any, rows: list[Any]) -> int | None:
    """The first of ``rows`` that gymnasium cannot batch as an observation of ``space``
    (what to name when stacking them failed); None if each can be."""
    for index, row in enumerate(rows):
        try:
            concatenate(space, [row], create_empty_array(space, 1))  # type: ignore[arg-type]
        except Exception:
            return index
    return None


def zero_rows(spaces: Iterable[Any]) -> list[Any]:
    """An observation of each of ``spaces`` for an env not observed yet, which a masked
    first reset leaves out: zeros, as gymnasium's ``AsyncVectorEnv`` has them (None for a
    space gymnasium cannot batch)."""
    rows = []
    for space in spaces:
        try:
            rows.append(next(iter(iterate(batch_space(space, 1), create_empty_array(space, 1)))))
        except Exception:
            rows.append(None)
    return rows


def flag_array(flags: Sequence[bool], size: int) -> np.ndarray[Any, Any]:
    """``flags`` as a bool array (most steps end no episode: zeros are made faster)."""
    return np.array(flags, np.bool_) if any(flags) else np.zeros(size, np.bool_)


def fits(rows: list[Any], out: np.ndarray[Any, Any]) -> bool:
    """Whether ``rows`` are arrays of exactly ``out``'s row dtype and shape (one that is
    not travels as it is, never converted)."""
    dtype, shape = out.dtype, out.shape[1:]
    return len(rows) == len(out) and all(
        type(row) is np.ndarray and row.dtype == dtype and row.shape == shape for row in rows
    )


def batched_space(spaces: list[Any]) -> Any:
    """The batched space of a worker's envs. Envs whose spaces differ are not refused
    here: the caller checks them per env with gymnasium's rules (``AioVectorEnv``'s
    ``observation_mode``), so the batch is gymnasium's batch of differing spaces where
    one exists, else a Tuple of the envs' own spaces, which no other worker's batch
    equals (a pool of such workers reports a :class:`~aioenv.SpaceMismatch`)."""
    if spaces[0] is None:
        return None
    if all(space == spaces[0] for space in spaces[1:]):
        return batch_space(spaces[0], len(spaces))
    try:
        return batch_differing_spaces(spaces)
    except Exception:  # gymnasium cannot batch them: shapes or types differ
        return Tuple(spaces)


def columns_of(
    states: Iterable[tuple[int, Any]],
    infos: dict[int, dict[str, Any]],
    finals: dict[int, Any],
    final_infos: dict[int, dict[str, Any]],
    entries: list[tuple[int, dict[str, Any]]],
) -> tuple[list[Any], list[float], list[bool], list[bool]]:
    """The observations, rewards and flags of ``states`` (``(row, state)`` pairs, each
    state a Step or a ``step_row`` tuple), one each; their infos, final observations and
    final infos put by row into ``infos``, ``finals`` and ``final_infos``, and each row's
    entries to join into vector infos (a final one first) appended to ``entries``."""
    rows: list[tuple[Any, ...]] = []
    for index, state in states:
        if type(state) is not tuple:
            if state.final_info is not None:
                finals[index] = state.final_observation
                final_infos[index] = state.final_info
                entries.append((index, final_entry(state)))
            state = (state.observation, state.reward, state.terminated, state.truncated, state.info)
        rows.append(state)
        info = state[4]
        if info:
            infos[index] = info
            entries.append((index, info))
    if not rows:
        return [], [], [], []
    observations, rewards, terminated, truncated, _ = map(list, zip(*rows, strict=True))
    return observations, rewards, terminated, truncated

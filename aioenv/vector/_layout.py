"""Which envs of an :class:`~aioenv.AioVectorEnv` each worker steps, and moving a vector
step's actions, seeds and results between per-env and per-worker form.

A worker steps ``k`` consecutive envs (``envs_per_worker=k``; 1 otherwise). With every
``k`` equal to 1 the vector env exchanges one state per env; otherwise one
:class:`~aioenv.BatchStep` per worker, whose rows land in the vector env's arrays with a
slice each, never a Python object per env.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.spaces import (
    Box,
    Dict,
    Discrete,
    Graph,
    MultiBinary,
    MultiDiscrete,
    OneOf,
    Space,
    Text,
    Tuple,
)
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from ..core._commands import RESET, Reset
from ..core._environment import BatchStep
from ..core._messages import PerEnv
from ..core._seeds import per_env_seeds, reset_mask
from ._infos import AddInfo, MergeInfos, joined_flat, joined_infos

__all__ = ["EnvLayout"]


class EnvLayout:
    """Worker ``w`` steps envs ``starts[w]`` to ``starts[w] + sizes[w] - 1``. ``by_env``:
    the envs are one group stepped in line, sent to by the pipelined calls env by env (see
    ``Envs.by_env``), with no worker to name."""

    def __init__(self, sizes: list[int], *, batched: bool = False, by_env: bool = False) -> None:
        self.sizes = sizes
        self.starts = [0, *itertools.accumulate(sizes)][:-1]
        #: Each worker's envs, as the slice of the vector env's rows they are.
        self.parts = [slice(lo, lo + k) for lo, k in zip(self.starts, sizes, strict=True)]
        self.num_envs = sum(sizes)
        #: Some worker steps several envs (or ``batched``, envs stepped in line, even one):
        #: the vector env exchanges BatchSteps.
        self.batched = batched or any(size > 1 for size in sizes)
        self._lists = batched  # even a worker of one env answers controls with a list
        self.by_env = by_env
        self.all_workers = list(range(len(sizes)))

    def env_of(self, worker_id: int | None, in_batch: int | None) -> tuple[int | None, str]:
        """The env of the vector env that a worker's env ``in_batch`` is (None when the
        worker is not known), and where that is, for messages."""
        if worker_id is None:
            return None, "an env"
        lo, size = self.starts[worker_id], self.sizes[worker_id]
        env = lo + (in_batch or 0)
        if size == 1 or self.by_env:  # inline envs have no worker to name
            return env, f"env {env}"
        return env, f"env {env}, one of envs {lo}-{lo + size - 1} (worker {worker_id})"

    def actions(self, single_space: Any, actions: Any, per_env: list[Any]) -> list[Any]:
        """One batch of actions per worker, in the form of the batched space of its envs
        (what gymnasium's ``iterate`` over that space splits into the same per-env
        actions). ``per_env`` is ``actions`` split by the vector env's batched space.

        The batched space decides, never the Python type of ``actions``, following
        ``batch_space``'s own dispatch: an array space (Box, Discrete, MultiDiscrete,
        MultiBinary) is batched as rows, a Dict or Tuple space key by key, the other
        spaces gymnasium ships (Text, Graph, Sequence, OneOf) and custom spaces as a
        tuple with an item per env. So each env receives exactly the object gymnasium's
        ``iterate`` gives it. A space with a ``batch_space`` of its own (registered by
        its author) is split by ``iterate`` and joined again by ``concatenate``."""
        try:
            return [_part(single_space, actions, part) for part in self.parts]
        except _OwnBatching:
            return [_stacked(single_space, per_env[part]) for part in self.parts]

    def sends(
        self, single_space: Any, actions: Any, per_env: list[Any], env_ids: list[int]
    ) -> tuple[list[int], list[Any]]:
        """The workers that step the envs ``env_ids`` and their batches of actions, from
        ``actions`` (``per_env[k]``, split by gymnasium's ``iterate``, is env
        ``env_ids[k]``'s). A worker steps all its envs or none: ValueError otherwise."""
        if not self.batched or self.by_env:
            return list(env_ids), per_env
        row_of = {env: row for row, env in enumerate(env_ids)}
        worker_ids: list[int] = []
        requests: list[Any] = []
        for worker_id, part in enumerate(self.parts):
            rows = [row_of.get(env) for env in range(part.start, part.stop)]
            if all(row is None for row in rows):
                continue
            if any(row is None for row in rows):
                raise ValueError(
                    f"envs {part.start}-{part.stop - 1} are stepped together by worker "
                    f"{worker_id} (envs_per_worker={part.stop - part.start}): send() needs "
                    f"actions for all of them or none, got env_id={env_ids}; nothing was sent"
                )
            worker_ids.append(worker_id)
            requests.append(_rows_of(single_space, actions, per_env, rows))  # type: ignore[arg-type]
        return worker_ids, requests

    def reset_requests(
        self,
        seed: int | list[int | None] | None,
        options: dict[str, Any] | None,
        call: str,
        pipelined: bool = False,
    ) -> tuple[list[int], list[Any]]:
        """The workers a vector env's reset goes to and their requests: gymnasium's seeds
        (env ``i`` gets ``seed + i``, or one seed per env) and ``options["reset_mask"]``;
        ``pipelined`` (``async_reset``) where the envs are sent to ``by_env``: the envs and
        a request each."""
        seeds = per_env_seeds(seed, self.num_envs, call)
        mask, options = reset_mask(options, self.num_envs)
        if mask is None:
            mask = np.ones(self.num_envs, dtype=np.bool_)
        if not self.batched or (pipelined and self.by_env):
            ids = np.flatnonzero(mask).tolist()
            return ids, [
                RESET if seeds[i] is None and options is None else Reset(seeds[i], options)
                for i in ids
            ]
        # A request for each worker with envs to reset: their seeds, and a mask of its
        # own where only some of its envs are reset.
        worker_ids: list[int] = []
        requests: list[Any] = []
        for worker_id, part in enumerate(self.parts):
            sub_mask = mask[part]
            if not sub_mask.any():
                continue
            sub_options = options
            if not sub_mask.all():
                sub_options = {**(options or {}), "reset_mask": np.array(sub_mask)}
            sub_seeds = seeds[part]
            if all(seed is None for seed in sub_seeds) and sub_options is None:
                requests.append(RESET)
            else:
                requests.append(Reset(list(sub_seeds), sub_options))  # type: ignore[arg-type]
            worker_ids.append(worker_id)
        return worker_ids, requests

    def values(self, values: Any) -> Any:
        """``set_attr`` values for the workers: one per env becomes a :class:`PerEnv`
        per worker; a single value stays as it is (it goes to every env)."""
        if not isinstance(values, (list, tuple)):
            return values
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr() got {len(values)} values for {self.num_envs} envs")
        return [PerEnv(tuple(values[part])) for part in self.parts]

    def functions(self, function: Any, env_ids: list[int]) -> list[Any]:
        """What ``apply_envs`` sends each worker for ``function`` to run on ``env_ids``
        alone: None for a worker with none of them, else the function (a :class:`PerEnv`
        of it and Nones for a worker that steps several envs)."""
        wanted = set(env_ids)
        out: list[Any] = []
        for part in self.parts:
            chosen = [function if env in wanted else None for env in range(part.start, part.stop)]
            if not any(item is not None for item in chosen):
                out.append(None)
            elif len(chosen) > 1 or self._lists:
                out.append(PerEnv(tuple(chosen)))
            else:
                out.append(function)
        return out

    def flatten(self, results: list[Any]) -> list[Any]:
        """Per-worker answers (a list per env for workers stepping several) as per env;
        a worker whose answer is None was not asked (``apply_envs``): None for each of its
        envs. (A worker that answers for several envs, or in a list as envs in line and the
        engine's children do, answers a list when asked: VectorRunner.control's; a worker
        of one env that answered None gives that None either way.)"""
        out: list[Any] = []
        for size, result in zip(self.sizes, results, strict=True):
            if result is None:
                out.extend([None] * size)
            else:
                out.extend(result if size > 1 or self._lists else [result])
        return out

    @staticmethod
    def joined_rows(batches: list[BatchStep[Any]]) -> dict[str, Any] | None:
        """The infos of these workers' batches over their own rows alone, one worker's
        after another (a ``recv``'s rows): their vector forms joined, which is what
        merging them into the vector env's infos and taking those rows gives; None where
        they do not join (then merge, and take the rows). Every worker's batches, in order,
        joined likewise are the vector env's infos (:meth:`infos_of`)."""
        packed = [batch.packed_infos for batch in batches]
        if None not in packed:
            joined = joined_flat(packed)  # type: ignore[arg-type]
            if joined is not None:
                return joined
        groups = [(batch.vector_infos, batch.info_types or {}) for batch in batches]
        if any(infos is None for infos, _ in groups):
            return None
        return joined_infos(groups)  # type: ignore[arg-type]

    def infos_of(
        self, worker_ids: list[int], batches: list[BatchStep[Any]], add_info: AddInfo
    ) -> dict[str, Any]:
        """The infos of the workers ``worker_ids``' batches, in gymnasium's vector form:
        every worker's vector forms joined where they allow it (see
        :func:`~aioenv.vector._infos.joined_infos`), else merged worker by worker with a
        slice per key (see :class:`~aioenv.vector._infos.MergeInfos`), or added env by env
        with ``add_info`` for a worker that sent its infos per row."""
        if worker_ids == self.all_workers:
            joined = self.joined_rows(batches)
            if joined is not None:
                return joined
        infos: dict[str, Any] = {}
        for worker_id, batch in zip(worker_ids, batches, strict=True):
            lo = self.starts[worker_id]
            if batch.vector_infos is not None:
                kinds = batch.info_types or {}
                merge = MergeInfos(infos, kinds, lo, self.num_envs, add_info)
                merge.level(infos, batch.vector_infos, ())
                continue
            for row in sorted(batch.infos.keys() | batch.final_infos.keys()):
                if row in batch.final_infos:
                    final = {
                        "final_obs": batch.final_observations[row],
                        "final_info": batch.final_infos[row],
                    }
                    infos = add_info(infos, final, lo + row)
                if row in batch.infos:
                    infos = add_info(infos, batch.infos[row], lo + row)
        return infos


class _OwnBatching(Exception):
    """A space whose batching gymnasium does not define (its author registered one)."""


def _rows_of(single_space: Any, actions: Any, per_env: list[Any], rows: list[int]) -> Any:
    """The rows ``rows`` of a batch of actions, as a batch of their own: sliced where they
    follow each other in order (what :meth:`EnvLayout.actions` does), else joined."""
    first = rows[0]
    if rows == list(range(first, first + len(rows))):
        with contextlib.suppress(_OwnBatching):
            return _part(single_space, actions, slice(first, first + len(rows)))
    return _stacked(single_space, [per_env[row] for row in rows])


def _stacked(space: Any, items: list[Any]) -> Any:
    """``items``, one per env, joined into a batch of ``space`` by gymnasium's
    ``concatenate``."""
    return concatenate(space, items, create_empty_array(space, len(items)))  # type: ignore[arg-type]


def _part(space: Any, batch: Any, part: slice) -> Any:
    """The envs ``part`` of ``batch`` (a batch of ``space``), in the batched space's form."""
    batching = batch_space.dispatch(type(space))
    if batching in _BATCHED_AS_ROWS:
        # a list of rows stays a list: each env gets its item as given, as in gymnasium
        return batch[part] if isinstance(batch, np.ndarray) else list(batch)[part]
    if batching is _BATCHED_BY_KEY:
        return {key: _part(sub, batch[key], part) for key, sub in space.spaces.items()}
    if batching is _BATCHED_BY_POSITION:
        return tuple(
            _part(sub, items, part) for sub, items in zip(space.spaces, batch, strict=True)
        )
    if batching in _BATCHED_AS_TUPLE:
        return tuple(batch)[part]
    raise _OwnBatching


_BATCHED_AS_ROWS = frozenset(
    batch_space.dispatch(space) for space in (Box, Discrete, MultiDiscrete, MultiBinary)
)
_BATCHED_BY_KEY = batch_space.dispatch(Dict)
_BATCHED_BY_POSITION = batch_space.dispatch(Tuple)
#: gymnasium batches these (and any space it knows nothing of) as a Tuple of copies.
_BATCHED_AS_TUPLE = frozenset(
    batch_space.dispatch(space) for space in (Text, Graph, spaces.Sequence, OneOf, Space)
)

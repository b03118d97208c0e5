"""Workers' infos merged into the vector env's, in gymnasium's vector form.

Each worker sends its envs' infos as gymnasium's vector envs give them for those envs
alone (built by :mod:`aioenv.env_side._infos`); the vector env merges them into its own
infos with a slice per key, or joins them whole where every worker's have the same keys.

Gymnasium builds a key's array from the first env (in index order) that has the key and
casts the later values into it. A slice gives the same result where the worker's array has
the vector env's dtype and row shape; anywhere else, and for a key whose values in one
worker are not all of one type, the rows are replayed through gymnasium's rule of adding
one env's info (:func:`aioenv.env_side._infos.add_info`) with the values they had, so the
infos are always exactly gymnasium's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core._infos import FlatInfos, Kinds, Mixed, flat_columns, record_dtype, row_value

__all__ = ["AddInfo", "MergeInfos", "joined_flat", "joined_infos"]

#: :func:`~aioenv.env_side._infos.add_info` for the vector env's size: adds one env's info to
#: the vector infos, gymnasium's way.
AddInfo = Callable[[dict[str, Any], dict[str, Any], int], dict[str, Any]]

_MISSING: Any = object()


class MergeInfos:
    """Merges a group's vector infos into the vector env's ``top`` (the group's row 0 is
    env ``first``), as adding each env's info with ``add_info`` would:
    ``MergeInfos(top, kinds, first, num_envs, add_info).level(top, group, ())``."""

    def __init__(
        self, top: dict[str, Any], kinds: Kinds, first: int, num_envs: int, add_info: AddInfo
    ) -> None:
        self.top, self.kinds, self.first, self.num_envs = top, kinds, first, num_envs
        self.add_info = add_info

    def level(self, into: dict[Any, Any], group: dict[Any, Any], path: tuple[Any, ...]) -> None:
        """Merge ``group`` (the level ``path`` of the group's infos) into ``into`` (that
        level of the vector env's)."""
        items = iter(group.items())
        for key, values in items:
            mask_key, mask = next(items)
            key_path = (*path, key)
            kind = self.kinds.get(key_path)
            target = into.get(key, _MISSING)
            if type(kind) is Mixed:
                self.replay(key_path, zip(kind.rows, kind.values, strict=True))
                continue
            flags = into.get(mask_key)
            if flags is not None and not (
                type(flags) is np.ndarray and flags.shape[:1] == (self.num_envs,)
            ):  # an env's own ``_key`` info, not a mask: gymnasium sets its items itself
                self.replay(key_path, self.originals(values, kind, mask, key_path))
                continue
            if type(values) is dict:
                if target is _MISSING:
                    target = into[key] = {}
                elif type(target) is not dict:
                    self.replay(key_path, self.originals(values, None, mask, key_path))
                    continue
                self.level(target, values, key_path)
            else:
                # A key first seen in this group: the vector env's array, as gymnasium
                # makes it.
                if target is _MISSING and kind is None:
                    target = np.full(self.num_envs, None, dtype=object)
                elif target is _MISSING:
                    target = np.zeros((self.num_envs, *values.shape[1:]), values.dtype)
                elif not (
                    type(target) is np.ndarray
                    and target.dtype == values.dtype
                    and target.shape[1:] == values.shape[1:]
                ):  # gymnasium would cast or convert each value: it does so itself
                    self.replay(key_path, self.originals(values, kind, mask, key_path))
                    continue
                _put(target, self.first, values, mask)
            into[key] = target
            if flags is None:
                flags = np.zeros(self.num_envs, np.bool_)
            _put(flags, self.first, True, mask)
            into[mask_key] = flags

    def originals(
        self, values: Any, kind: Any, mask: Any, path: tuple[Any, ...]
    ) -> list[tuple[int, Any]]:
        return [
            (row, row_value(values, kind, row, self.kinds, path))
            for row in np.flatnonzero(mask).tolist()
        ]

    def replay(self, path: tuple[Any, ...], rows: Any) -> None:
        """Add each ``(row, value)`` of the key at ``path`` with the vector env's own
        ``add_info`` (it mutates the vector env's infos in place, as gymnasium's does)."""
        for row, value in rows:
            info: dict[Any, Any] = {path[-1]: value}
            for key in reversed(path[:-1]):
                info = {key: info}
            self.add_info(self.top, info, self.first + row)


def _put(target: Any, first: int, values: Any, mask: Any) -> None:
    part = target[first : first + len(mask)]
    if mask.all():
        part[...] = values
    elif type(values) is np.ndarray:
        part[mask] = values[mask]
    else:
        part[mask] = values


def joined_infos(groups: Sequence[tuple[dict[Any, Any], Kinds]]) -> dict[Any, Any] | None:
    """The vector infos of groups that follow each other and together are every env of the
    vector env, when they have the same keys in the same order and each key one kind,
    dtype and row shape in all of them (most steps): each key's arrays concatenated, which
    is what merging them one by one gives. None otherwise."""
    first_kinds = groups[0][1]
    if any(type(kind) is Mixed for kind in first_kinds.values()):
        return None
    if len(groups) == 1:
        return groups[0][0]  # already the vector env's infos
    if any(kinds != first_kinds for _, kinds in groups[1:]):
        return None
    return _joined([group for group, _ in groups])


def _joined(groups: list[dict[Any, Any]]) -> dict[Any, Any] | None:
    keys = list(groups[0])
    if any(list(group) != keys for group in groups[1:]):
        return None
    out: dict[Any, Any] = {}
    for key in keys:
        values = [group[key] for group in groups]
        first = values[0]
        if type(first) is dict:
            if any(type(value) is not dict for value in values):
                return None
            nested = _joined(values)
            if nested is None:
                return None
            out[key] = nested
            continue
        dtype, shape = first.dtype, first.shape[1:]
        if any(
            type(value) is not np.ndarray or value.dtype != dtype or value.shape[1:] != shape
            for value in values
        ):
            return None
        out[key] = np.concatenate(values)
    return out


def joined_flat(groups: Sequence[FlatInfos]) -> dict[str, Any] | None:
    """The vector infos of flat groups that follow each other and together are every env,
    when they have the same keys and codes: one buffer, a copy per key. None otherwise."""
    first = groups[0]
    if any(group.keys != first.keys or group.codes != first.codes for group in groups[1:]):
        return None
    data = first.data if len(groups) == 1 else b"".join(group.data for group in groups)
    records = np.frombuffer(data, record_dtype(first.keys, first.codes))
    return flat_columns(records, first.keys, len(records))

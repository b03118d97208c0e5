"""A group's infos in gymnasium's vector form, built where the envs run.

A worker that steps ``k`` envs turns their info dicts into what gymnasium's vector envs
give for those ``k`` envs alone (per key an array of ``k`` and its ``_key`` mask, nested
dicts recursively, ``final_obs``/``final_info`` for the envs that ended an episode under
same-step autoreset), with a column per key instead of a Python call per env and key; or,
where every env gave the same flat scalar keys (most steps of most envs), packs them as
one record per env (:class:`~aioenv.core._infos.FlatInfos`). The vector env merges them
into its own infos in the parent (:mod:`aioenv.vector._infos`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core._environment import Step
from ..core._infos import PYTHON_SCALARS, FlatInfos, Kinds, Mixed, record_dtype, scalar_code

__all__ = [
    "add_info",
    "add_info_of",
    "batch_vector_infos",
    "final_entry",
    "flat_infos",
    "group_infos",
]


class _Ungroupable(Exception):
    """Infos that only the per-env path gets exactly right (see :func:`group_infos`)."""


def add_info(
    num_envs: int, infos: dict[Any, Any], info: dict[Any, Any], row: int
) -> dict[Any, Any]:
    """Add env ``row``'s ``info`` to the vector ``infos`` of ``num_envs`` envs the way
    gymnasium's vector envs do (its ``VectorEnv._add_info``, which is private:
    ``tests/test_properties_vector.py`` checks that the two agree). Per key, a column of
    ``num_envs`` made from the first value seen (a Python ``int``/``float``/``bool`` or a
    numpy scalar: zeros of its type; an array: zeros of its dtype and shape, one row per
    env; anything else: an object array of None) and its ``_key`` mask; a nested dict
    recursively; ``final_obs`` always in an object array, so each env's final
    observation stays whole. Returns ``infos``, changed in place (a new dict for a
    nested key seen first)."""
    for key, value in info.items():
        if key == "final_obs":
            column = infos[key] if key in infos else np.full(num_envs, None, dtype=object)
            column[row] = value
        elif isinstance(value, dict):
            column = add_info(num_envs, infos.get(key, {}), value, row)
        else:
            if key in infos:
                column = infos[key]
            elif type(value) in PYTHON_SCALARS or isinstance(value, np.number):
                column = np.zeros(num_envs, dtype=type(value))
            elif isinstance(value, np.ndarray):
                column = np.zeros((num_envs, *value.shape), dtype=value.dtype)
            else:
                column = np.full(num_envs, None, dtype=object)
            column[row] = value
        mask_key = f"_{key}"
        mask = infos.get(mask_key)  # (an env's own nested info may sit where a mask goes)
        if mask is None:
            mask = np.zeros(num_envs, np.bool_)
        mask[row] = True
        infos[key], infos[mask_key] = column, mask
    return infos


def add_info_of(num_envs: int) -> Any:
    """:func:`add_info` for a vector env of ``num_envs`` envs."""
    return functools.partial(add_info, num_envs)


def batch_vector_infos(
    entries: list[tuple[int, dict[str, Any]]], infos: dict[int, dict[str, Any]], size: int
) -> tuple[dict[str, Any] | None, Kinds | None]:
    """A batch's infos in gymnasium's vector form, and their kinds (see
    :func:`group_infos`): what crosses to the parent, cheaper to send than a dict per row
    and merged there with a slice per key. ``entries`` as :func:`group_infos` takes them,
    ``infos`` the rows' own infos. None for an info with a key of its own named
    ``final_obs`` or ``final_info``: the vector form mixes it with the autoreset's, so
    only the per-row form tells them apart. No entries: no infos (``{}, {}``)."""
    if any("final_obs" in info or "final_info" in info for info in infos.values()):
        return None, None
    grouped = group_infos(entries, size)
    return (None, None) if grouped is None else grouped


def final_entry(state: Step[Any]) -> dict[str, Any]:
    """What gymnasium adds for an env that ended an episode under same-step autoreset."""
    return {"final_obs": state.final_observation, "final_info": state.final_info}


def group_infos(
    entries: Sequence[tuple[int, dict[Any, Any]]], size: int
) -> tuple[dict[Any, Any], Kinds] | None:
    """The vector form of a group of ``size`` envs' infos, and the
    :data:`~aioenv.core._infos.Kinds` of its keys. ``entries`` are ``(row, info)`` in the
    order gymnasium adds them: rows in order, a row's ``{"final_obs": ..., "final_info":
    ...}`` before its info.

    None where the per-env path must be kept: a key that starts with ``_`` (it could be
    another key's mask), a key given twice for one row (an info's own ``final_info``
    next to the autoreset's), or values gymnasium itself cannot add (its error is then
    raised where the vector env adds them).
    """
    kinds: Kinds = {}
    try:
        return _group(entries, size, (), kinds), kinds
    except _Ungroupable:
        return None


def _group(
    entries: Sequence[tuple[int, dict[Any, Any]]], size: int, path: tuple[Any, ...], kinds: Kinds
) -> dict[Any, Any]:
    columns: dict[Any, list[tuple[int, Any]]] = {}
    for row, info in entries:
        for key, value in info.items():
            column = columns.get(key)
            if column is None:
                if type(key) is str and key[:1] == "_":
                    raise _Ungroupable
                columns[key] = [(row, value)]
            elif column[-1][0] == row:
                raise _Ungroupable
            else:
                column.append((row, value))
    out: dict[Any, Any] = {}
    for key, column in columns.items():
        rows = [row for row, _ in column]
        out[key] = _column(key, rows, [value for _, value in column], size, (*path, key), kinds)
        mask = np.zeros(size, np.bool_)
        mask[rows] = True
        out[f"_{key}"] = mask
    return out


def _column(
    key: Any, rows: list[int], values: list[Any], size: int, path: tuple[Any, ...], kinds: Kinds
) -> Any:
    """One key's values in gymnasium's vector form over ``size`` rows."""
    if key == "final_obs":  # gymnasium keeps final observations as objects, whatever they are
        return _objects(rows, values, size)
    kind = type(values[0])
    try:
        if any(type(value) is not kind for value in values):
            raise TypeError  # not one type: the values go one by one
        if kind is dict:
            return _group(list(zip(rows, values, strict=True)), size, path, kinds)
        if kind in PYTHON_SCALARS or issubclass(kind, np.number):
            filled = np.array(values, kind)  # each value converted as gymnasium's item does
        elif kind is np.ndarray:
            first = values[0]
            if any(value.shape != first.shape or value.dtype != first.dtype for value in values):
                raise TypeError  # not one shape and dtype: the values go one by one
            filled = np.stack(values)
        elif isinstance(values[0], (dict, np.ndarray)):  # subclasses: gymnasium's own rules
            raise TypeError
        else:
            return _objects(rows, values, size)
        # A column of numbers or of arrays: the rows not given are zeros.
        kinds[path] = kind
        if len(rows) == size:
            return filled
        array = np.zeros((size, *filled.shape[1:]), filled.dtype)
        array[rows] = filled
        return array
    except (ValueError, TypeError, OverflowError):
        kinds[path] = Mixed(tuple(rows), tuple(values))
        return _one_by_one(key, rows, values, size)


def _objects(rows: list[int], values: list[Any], size: int) -> Any:
    array = np.full(size, None, dtype=object)
    for row, value in zip(rows, values, strict=True):
        array[row] = value  # item by item: a list or an array is kept whole, as gymnasium does
    return array


def _one_by_one(key: Any, rows: list[int], values: list[Any], size: int) -> Any:
    """A key's column as :func:`add_info` builds it, value by value."""
    infos: dict[Any, Any] = {}
    try:
        for row, value in zip(rows, values, strict=True):
            infos = add_info(size, infos, {key: value}, row)
    except Exception:
        raise _Ungroupable from None
    return infos[key]


def flat_infos(infos: Sequence[dict[Any, Any]]) -> FlatInfos | None:
    """The :class:`~aioenv.core._infos.FlatInfos` of a group's infos (one per env, in
    order), or None where they are not all flat scalars with the same keys and types."""
    keys = tuple(infos[0])
    size = len(infos)
    if [tuple(info) for info in infos].count(keys) != size:
        return None
    rows = [tuple(info.values()) for info in infos]
    types = [tuple(map(type, row)) for row in rows]
    layout = _flat_layout(keys, types[0])
    if layout is None or types.count(types[0]) != size:
        return None
    codes, dtype = layout
    try:
        records = np.array(rows, dtype)
    except (ValueError, TypeError, OverflowError):  # e.g. an int beyond int64
        return None
    return FlatInfos(keys, codes, records.tobytes())


@functools.lru_cache(maxsize=256)
def _flat_layout(
    keys: tuple[Any, ...], types: tuple[type, ...]
) -> tuple[tuple[str, ...], np.dtype[Any]] | None:
    """The codes and record dtype of flat infos with these keys and types; None where
    they are not flat (a type that is no scalar, a key that is no name or starts with
    ``_``, which could be another key's mask)."""
    codes = tuple(code for code in map(scalar_code, types) if code is not None)
    if len(codes) != len(types) or not all(
        type(key) is str and key and key[0] != "_" for key in keys
    ):
        return None
    return codes, record_dtype(keys, codes)

"""A group's infos in gymnasium's vector form: built where the envs run, merged where the
vector env reads them.

A worker that steps ``k`` envs turns their info dicts into what gymnasium's vector envs
give for those ``k`` envs alone (per key an array of ``k`` and its ``_key`` mask, nested
dicts recursively, ``final_obs``/``final_info`` for the envs that ended an episode under
same-step autoreset), with a column per key instead of a Python call per env and key.
The vector env then merges each worker's arrays into its own infos with a slice per key.

Gymnasium builds a key's array from the first env (in index order) that has the key and
casts the later values into it. A slice gives the same result where the worker's array has
the vector env's dtype and row shape; anywhere else, and for a key whose values in one
worker are not all of one type, the rows are replayed through the vector env's own
``_add_info`` with the values they had, so the infos are always exactly gymnasium's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from gymnasium.vector import VectorEnv

__all__ = [
    "FlatInfos",
    "Kinds",
    "Mixed",
    "flat_infos",
    "group_infos",
    "joined_flat",
    "joined_infos",
    "merge_infos",
    "split_rows",
]

#: Per key path (the keys from the top): what its values were, so a row's value can be
#: given back as it was. A scalar type (``int``, ``float``, ``bool`` or a numpy scalar
#: type), ``np.ndarray``, or a :class:`Mixed`; absent for object columns (``final_obs``,
#: anything else gymnasium keeps in an object array), whose items are the values.
Kinds = dict[tuple[Any, ...], Any]
AddInfo = Callable[[dict[str, Any], dict[str, Any], int], dict[str, Any]]

#: The types gymnasium batches as a numeric array of that type (with numpy's scalars).
_SCALARS = (int, float, bool)
_PYTHON_SCALARS = frozenset(_SCALARS)
_MISSING: Any = object()


class Mixed(NamedTuple):
    """A key whose values in a group are not all of one type: each row's value as it was
    (the vector env adds them one by one, as gymnasium does)."""

    rows: tuple[int, ...]
    values: tuple[Any, ...]


class _Ungroupable(Exception):
    """Infos that only the per-env path gets exactly right (see :func:`group_infos`)."""


class _Envs:
    """Stands in for a vector env of ``num_envs`` envs: all of itself gymnasium's
    ``_add_info`` reads (itself, for nested dicts)."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def group_infos(
    entries: Sequence[tuple[int, dict[Any, Any]]], size: int
) -> tuple[dict[Any, Any], Kinds] | None:
    """The vector form of a group of ``size`` envs' infos, and the :data:`Kinds` of its
    keys. ``entries`` are ``(row, info)`` in the order gymnasium adds them: rows in order,
    a row's ``{"final_obs": ..., "final_info": ...}`` before its info.

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
            raise _NotOneType
        if kind is dict:
            return _group(list(zip(rows, values, strict=True)), size, path, kinds)
        if kind in _PYTHON_SCALARS or issubclass(kind, np.number):
            kinds[path] = kind
            filled = np.array(values, kind)  # each value converted as gymnasium's item does
            if len(rows) == size:
                return filled
            array = np.zeros(size, kind)
            array[rows] = filled
            return array
        if kind is np.ndarray:
            kinds[path] = kind
            return _arrays(rows, values, size)
        if isinstance(values[0], (dict, np.ndarray)):  # subclasses: gymnasium's own rules
            raise _NotOneType
        return _objects(rows, values, size)
    except (_NotOneType, ValueError, TypeError, OverflowError):
        kinds[path] = Mixed(tuple(rows), tuple(values))
        return _one_by_one(key, rows, values, size)


class _NotOneType(Exception):
    pass


def _arrays(rows: list[int], values: list[Any], size: int) -> Any:
    first = values[0]
    if any(value.shape != first.shape or value.dtype != first.dtype for value in values):
        raise _NotOneType
    stacked = np.stack(values)
    if len(rows) == size:
        return stacked
    array = np.zeros((size, *first.shape), first.dtype)
    array[rows] = stacked
    return array


def _objects(rows: list[int], values: list[Any], size: int) -> Any:
    array = np.full(size, None, dtype=object)
    for row, value in zip(rows, values, strict=True):
        array[row] = value  # item by item: a list or an array is kept whole, as gymnasium does
    return array


def _one_by_one(key: Any, rows: list[int], values: list[Any], size: int) -> Any:
    """A key's column as gymnasium's ``_add_info`` builds it, value by value."""
    envs: Any = _Envs(size)
    infos: dict[Any, Any] = {}
    try:
        for row, value in zip(rows, values, strict=True):
            infos = envs._add_info(infos, {key: value}, row)
    except Exception:
        raise _Ungroupable from None
    return infos[key]


def merge_infos(
    into: dict[str, Any],
    group: dict[Any, Any],
    kinds: Kinds,
    first: int,
    num_envs: int,
    add_info: AddInfo,
) -> dict[str, Any]:
    """Merge a group's vector infos (its row 0 is env ``first``) into the vector env's
    ``into``, as adding each env's info with ``add_info`` would; return ``into``."""
    _Merge(into, kinds, first, num_envs, add_info).level(into, group, ())
    return into


class _Merge:
    def __init__(
        self, top: dict[str, Any], kinds: Kinds, first: int, num_envs: int, add_info: AddInfo
    ) -> None:
        self.top, self.kinds, self.first, self.num_envs = top, kinds, first, num_envs
        self.add_info = add_info

    def level(self, into: dict[Any, Any], group: dict[Any, Any], path: tuple[Any, ...]) -> None:
        items = iter(group.items())
        for key, values in items:
            mask_key, mask = next(items)
            key_path = (*path, key)
            kind = self.kinds.get(key_path)
            target = into.get(key, _MISSING)
            if type(kind) is Mixed:
                self.replay(key_path, zip(kind.rows, kind.values, strict=True))
                continue
            if type(values) is dict:
                if target is _MISSING:
                    target = into[key] = {}
                elif type(target) is not dict:
                    self.replay(key_path, self.originals(values, None, mask, key_path))
                    continue
                self.level(target, values, key_path)
            else:
                if target is _MISSING:
                    target = _empty(values, kind, self.num_envs)
                elif not (
                    type(target) is np.ndarray
                    and target.dtype == values.dtype
                    and target.shape[1:] == values.shape[1:]
                ):  # gymnasium would cast or convert each value: it does so itself
                    self.replay(key_path, self.originals(values, kind, mask, key_path))
                    continue
                _put(target, self.first, values, mask)
            into[key] = target
            flags = into.get(mask_key)
            if flags is None:
                flags = np.zeros(self.num_envs, np.bool_)
            _put(flags, self.first, True, mask)
            into[mask_key] = flags

    def originals(
        self, values: Any, kind: Any, mask: Any, path: tuple[Any, ...]
    ) -> list[tuple[int, Any]]:
        return [
            (row, _original(values, kind, row, self.kinds, path))
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


def _empty(values: Any, kind: Any, num_envs: int) -> Any:
    """The vector env's array for a key first seen in this group, as gymnasium makes it."""
    if kind is None:
        return np.full(num_envs, None, dtype=object)
    return np.zeros((num_envs, *values.shape[1:]), values.dtype)


def _put(target: Any, first: int, values: Any, mask: Any) -> None:
    part = target[first : first + len(mask)]
    if mask.all():
        part[...] = values
    elif type(values) is np.ndarray:
        part[mask] = values[mask]
    else:
        part[mask] = values


def _original(values: Any, kind: Any, row: int, kinds: Kinds, path: tuple[Any, ...]) -> Any:
    """Row ``row``'s value of a column as the env gave it."""
    if type(kind) is Mixed:
        return kind.values[kind.rows.index(row)]
    if type(values) is dict:
        return _row_of(values, kinds, path, row)
    if kind is None:
        return values[row]
    if kind is np.ndarray:
        return values[row].copy()
    if kind in _PYTHON_SCALARS:
        return values[row].item()
    value = values[row]
    return value if type(value) is kind else kind(value)


def _row_of(group: dict[Any, Any], kinds: Kinds, path: tuple[Any, ...], row: int) -> dict[Any, Any]:
    info: dict[Any, Any] = {}
    items = iter(group.items())
    for key, values in items:
        _, mask = next(items)
        if mask[row]:
            key_path = (*path, key)
            info[key] = _original(values, kinds.get(key_path), row, kinds, key_path)
    return info


def split_rows(
    group: dict[Any, Any], kinds: Kinds
) -> tuple[dict[int, dict[Any, Any]], dict[int, Any], dict[int, dict[Any, Any]]]:
    """A group's infos per row: ``(infos, final_observations, final_infos)`` as a
    :class:`~aioenv.BatchStep` has them (a row's keys in the group's order)."""
    infos: dict[int, dict[Any, Any]] = {}
    finals: dict[int, Any] = {}
    final_infos: dict[int, dict[Any, Any]] = {}
    masks = [mask for key, mask in list(group.items())[1::2]]
    rows = np.flatnonzero(np.logical_or.reduce(masks)).tolist() if masks else []
    for row in rows:
        info = _row_of(group, kinds, (), row)
        if "final_obs" in info:
            finals[row] = info.pop("final_obs")
            final_infos[row] = info.pop("final_info", {})
        if info:
            infos[row] = info
    return infos, finals, final_infos


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


class FlatInfos(NamedTuple):
    """The infos of a group whose envs all gave the same keys in the same order, each a
    scalar of one type in every env (``float``, ``int``, ``bool``, numpy scalars): most
    steps of most envs. Packed as one record per env: ``keys``, a code per key (its type:
    ``"int"``, ``"float"``, ``"bool"`` or a numpy dtype string) and the records' bytes,
    which is one buffer to send and to join with the other groups'."""

    keys: tuple[str, ...]
    codes: tuple[str, ...]
    data: bytes

    def records(self) -> Any:
        return np.frombuffer(self.data, _record_dtype(self.keys, self.codes))

    def expanded(self) -> tuple[dict[str, Any], Kinds]:
        """The group's vector infos and kinds, as :func:`group_infos` gives them."""
        records = self.records()
        return _columns(records, self.keys, len(records)), {
            (key,): _CODE_TYPES[code] for key, code in zip(self.keys, self.codes, strict=True)
        }


def flat_infos(infos: Sequence[dict[Any, Any]]) -> FlatInfos | None:
    """The :class:`FlatInfos` of a group's infos (one per env, in order), or None where they
    are not all flat scalars with the same keys and types."""
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
    codes = tuple(map(_CODES.__getitem__, types))
    if None in codes or not all(type(key) is str and key and key[0] != "_" for key in keys):
        return None
    return codes, _record_dtype(keys, codes)


def joined_flat(groups: Sequence[FlatInfos]) -> dict[str, Any] | None:
    """The vector infos of flat groups that follow each other and together are every env,
    when they have the same keys and codes: one buffer, a copy per key. None otherwise."""
    first = groups[0]
    if any(group.keys != first.keys or group.codes != first.codes for group in groups[1:]):
        return None
    data = first.data if len(groups) == 1 else b"".join(group.data for group in groups)
    records = np.frombuffer(data, _record_dtype(first.keys, first.codes))
    return _columns(records, first.keys, len(records))


def _columns(records: Any, keys: tuple[str, ...], size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in keys:
        out[key] = records[key].copy()  # contiguous and writable, as gymnasium's arrays
        out[f"_{key}"] = np.ones(size, np.bool_)
    return out


@functools.cache
def _record_dtype(keys: tuple[str, ...], codes: tuple[str, ...]) -> np.dtype[Any]:
    return np.dtype([(key, _CODE_DTYPES[code]) for key, code in zip(keys, codes, strict=True)])


class _Codes(dict[type, str]):
    """The code of a scalar type: its name for Python's, its dtype string for numpy's
    (None for any other type)."""

    def __missing__(self, kind: type) -> Any:
        if not (isinstance(kind, type) and issubclass(kind, np.number)):
            return None
        code = self[kind] = np.dtype(kind).str
        return code


class _CodeDtypes(dict[str, Any]):
    def __missing__(self, code: str) -> Any:
        dtype = self[code] = np.dtype(code)
        return dtype


class _CodeTypes(dict[str, Any]):
    def __missing__(self, code: str) -> Any:
        kind = self[code] = np.dtype(code).type
        return kind


_CODES = _Codes({int: "int", float: "float", bool: "bool"})
_CODE_DTYPES = _CodeDtypes({"int": np.dtype(int), "float": np.dtype(float), "bool": np.dtype(bool)})
_CODE_TYPES = _CodeTypes({"int": int, "float": float, "bool": bool})

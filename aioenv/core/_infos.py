"""A group's infos in gymnasium's vector form: what both sides read of them.

A worker that steps ``k`` envs sends their infos as gymnasium's vector envs give them for
those ``k`` envs alone (per key an array of ``k`` and its ``_key`` mask, nested dicts
recursively, ``final_obs``/``final_info`` for the envs that ended an episode), built where
the envs run (:mod:`aioenv.env_side._infos`) and merged into the vector env's infos in the
parent (:mod:`aioenv.vector._infos`). This module holds what both read: the :data:`Kinds`
that give a row's value back as the env gave it, a batch's infos per row
(:func:`split_rows`), and :class:`FlatInfos`, the packed form of flat scalar infos (one
record per env) and its codes.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "PYTHON_SCALARS",
    "FlatInfos",
    "Kinds",
    "Mixed",
    "flat_columns",
    "record_dtype",
    "row_value",
    "scalar_code",
    "split_rows",
]

#: Per key path (the keys from the top): what its values were, so a row's value can be
#: given back as it was. A scalar type (``int``, ``float``, ``bool`` or a numpy scalar
#: type), ``np.ndarray``, or a :class:`Mixed`; absent for object columns (``final_obs``,
#: anything else gymnasium keeps in an object array), whose items are the values.
Kinds = dict[tuple[Any, ...], Any]

#: The Python types gymnasium batches as a numeric array of that type (numpy's scalar
#: types are batched so too).
PYTHON_SCALARS = frozenset((int, float, bool))


class Mixed(NamedTuple):
    """A key whose values in a group are not all of one type: each row's value as it was
    (the vector env adds them one by one, as gymnasium does)."""

    rows: tuple[int, ...]
    values: tuple[Any, ...]


def row_value(values: Any, kind: Any, row: int, kinds: Kinds, path: tuple[Any, ...]) -> Any:
    """Row ``row``'s value of a column (the key at ``path``, of ``kind``) as the env gave it."""
    if type(kind) is Mixed:
        return kind.values[kind.rows.index(row)]
    if type(values) is dict:
        return _row_of(values, kinds, path, row)
    if kind is None:
        return values[row]
    if kind is np.ndarray:
        return values[row, ...].copy()  # an array even where the env's was 0-d
    if kind in PYTHON_SCALARS:
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
            info[key] = row_value(values, kinds.get(key_path), row, kinds, key_path)
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


class FlatInfos(NamedTuple):
    """The infos of a group whose envs all gave the same keys in the same order, each a
    scalar of one type in every env (``float``, ``int``, ``bool``, numpy scalars): most
    steps of most envs. Packed as one record per env: ``keys``, a code per key (its type:
    ``"int"``, ``"float"``, ``"bool"`` or a numpy dtype string) and the records' bytes,
    which is one buffer to send and to join with the other groups'."""

    keys: tuple[str, ...]
    codes: tuple[str, ...]
    data: bytes

    def expanded(self) -> tuple[dict[str, Any], Kinds]:
        """The group's vector infos and kinds, as
        :func:`~aioenv.env_side._infos.group_infos` gives them."""
        records = np.frombuffer(self.data, record_dtype(self.keys, self.codes))
        types = _code_types(self.codes)
        return flat_columns(records, self.keys, len(records)), {
            (key,): kind for key, kind in zip(self.keys, types, strict=True)
        }


def flat_columns(records: Any, keys: tuple[str, ...], size: int) -> dict[str, Any]:
    """The vector infos of ``size`` records: each key's column and its mask (all set)."""
    out: dict[str, Any] = {}
    masks = np.ones((len(keys), size), np.bool_)  # one allocation: a row per key
    for index, key in enumerate(keys):
        out[key] = records[key].copy()  # contiguous and writable, as gymnasium's arrays
        out[f"_{key}"] = masks[index]
    return out


@functools.cache
def record_dtype(keys: tuple[str, ...], codes: tuple[str, ...]) -> np.dtype[Any]:
    """The numpy dtype of one record of :class:`FlatInfos` with these keys and codes (a
    Python type's name is numpy's name of its dtype too: ``np.dtype("int")``)."""
    return np.dtype([(key, np.dtype(code)) for key, code in zip(keys, codes, strict=True)])


def scalar_code(kind: type) -> str | None:
    """The code of a scalar type in a :class:`FlatInfos` record: its name for Python's,
    its dtype string for numpy's, None for any other type."""
    if kind in PYTHON_SCALARS:
        return kind.__name__
    if isinstance(kind, type) and issubclass(kind, np.number):
        code: str = np.dtype(kind).str
        return code
    return None


@functools.cache
def _code_types(codes: tuple[str, ...]) -> tuple[type, ...]:
    """The type of each code's values: the Python type a name codes, else the numpy
    scalar type of the dtype string."""
    python = {kind.__name__: kind for kind in PYTHON_SCALARS}
    return tuple(python.get(code) or np.dtype(code).type for code in codes)

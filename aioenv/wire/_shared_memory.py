"""Observations in shared memory: a layout computed from the observation space, the
child's writes into it and the parent's views of it.

When the observation space has a fixed layout (Box, Discrete, MultiBinary, MultiDiscrete,
and Dict or Tuple of those), a process worker's observations travel in memory both
processes map: its lane's observation row (:mod:`aioenv.engine._lane`), an anonymous
memory file (``memfd``) whose descriptor the parent passes to the child. The child
writes each observation in place and the answer carries only the rest. There is no name
to unlink and nothing in ``/dev/shm``: the memory is freed when the last mapping is gone
(in the parent, the last array viewing it), even if a process is killed.

An observation that does not fit the layout exactly (another dtype or shape, a numpy
scalar for a Discrete space) is sent through the socket instead, never converted.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = [
    "AUTO_THRESHOLD",
    "Layout",
    "SharedObservations",
    "available",
    "memory_file",
]

#: With ``shared_memory="auto"``, observations of at least this many bytes use shared memory.
AUTO_THRESHOLD = 8 * 1024
_ALIGN = 64


def available() -> bool:
    """Shared observations need ``memfd_create`` (Linux)."""
    return hasattr(os, "memfd_create")


@dataclasses.dataclass(frozen=True)
class _Leaf:
    offset: int
    dtype: str
    shape: tuple[int, ...]
    scalar: bool  # a Discrete value: a Python int in, a Python int out


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each array of an observation lives in one flat buffer."""

    tree: Any  # a _Leaf, or a dict / tuple of trees
    nbytes: int

    @classmethod
    def of(cls, space: Any) -> Layout | None:
        """The layout for ``space``, or None if it has no fixed one."""
        end = [0]  # of the leaves placed so far

        def place(dtype: np.dtype[Any], shape: tuple[int, ...], scalar: bool) -> _Leaf:
            offset = -(-end[0] // _ALIGN) * _ALIGN
            end[0] = offset + dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            return _Leaf(offset, dtype.str, shape, scalar)

        def build(node: Any) -> Any:
            if isinstance(node, spaces.Discrete):
                return place(np.dtype(np.int64), (), True)
            if isinstance(node, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
                if node.dtype is None or node.dtype.hasobject or node.shape is None:
                    raise _Unsupported
                return place(np.dtype(node.dtype), tuple(node.shape), False)
            if isinstance(node, spaces.Dict):
                return {key: build(sub) for key, sub in node.spaces.items()}
            if isinstance(node, spaces.Tuple):
                return tuple(build(sub) for sub in node.spaces)
            raise _Unsupported

        try:
            tree = build(space)
        except _Unsupported:
            return None
        if end[0] == 0:  # no leaf, or none with a byte
            return None
        return cls(tree, end[0])

    def views(self, buffer: Any) -> Any:
        """The tree of arrays viewing ``buffer`` (scalars as 0-d arrays)."""
        return _view(self.tree, buffer)

    def read(self, views: Any) -> Any:
        """The observation in ``views``: arrays are the views themselves (not copies)."""
        tree = self.tree
        if isinstance(tree, _Leaf) and not tree.scalar:
            return views  # the common case: one Box
        return _read(tree, views)


def memory_file(nbytes: int, name: str) -> int:
    """A new anonymous memory file of ``nbytes`` bytes, named ``name`` (what
    ``/proc/PID/maps`` shows); the caller closes the descriptor."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


class SharedObservations:
    """Observations laid out by ``layout`` in memory both processes map: ``views``, the
    layout's views of it (:meth:`Layout.views`), which keep the mapping alive while an
    array still uses them."""

    def __init__(self, layout: Layout, views: Any) -> None:
        self.layout, self.views = layout, views

    def read(self) -> Any:
        return self.layout.read(self.views)

    def write(self, observation: Any) -> bool:
        """Copy ``observation`` into the views if it fits the layout exactly."""
        if observation is self.views:
            return True  # stacked in place by the runner (see VectorRunner.stack_into)
        if not _fits(self.layout.tree, observation):
            return False
        _copy_into(self.layout.tree, observation, self.views)
        return True


class _Unsupported(Exception):
    pass


def _view(node: Any, buffer: Any) -> Any:
    # A plain function, not a closure: a recursive closure would hold the mapping in a
    # reference cycle, keeping its memory and descriptor until the garbage collector runs.
    if isinstance(node, _Leaf):
        return np.ndarray(node.shape, np.dtype(node.dtype), buffer, node.offset)
    if isinstance(node, dict):
        return {key: _view(sub, buffer) for key, sub in node.items()}
    return tuple(_view(sub, buffer) for sub in node)


def _fits(node: Any, value: Any) -> bool:
    if isinstance(node, _Leaf):
        if node.scalar:
            return type(value) is int and -(2**63) <= value < 2**63
        return (
            type(value) is np.ndarray
            and value.shape == node.shape
            and value.dtype.str == node.dtype
        )
    if isinstance(node, dict):
        return (
            type(value) is dict
            and value.keys() == node.keys()
            and all(_fits(sub, value[key]) for key, sub in node.items())
        )
    return (
        type(value) is tuple
        and len(value) == len(node)
        and all(_fits(sub, item) for sub, item in zip(node, value, strict=True))
    )


def _copy_into(node: Any, value: Any, views: Any) -> None:
    if isinstance(node, _Leaf):
        if node.scalar:
            views[()] = value
        else:
            np.copyto(views, value)
    elif isinstance(node, dict):
        for key, sub in node.items():
            _copy_into(sub, value[key], views[key])
    else:
        for sub, item, view in zip(node, value, views, strict=True):
            _copy_into(sub, item, view)


def _read(node: Any, views: Any) -> Any:
    if isinstance(node, _Leaf):
        return int(views) if node.scalar else views
    if isinstance(node, dict):
        return {key: _read(sub, views[key]) for key, sub in node.items()}
    return tuple(_read(sub, view) for sub, view in zip(node, views, strict=True))

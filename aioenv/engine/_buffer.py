"""One step's fixed-size data for a vector of envs, in one memory file that the parent and
its children map: the actions going in; each env's observation, reward and terminated and
truncated flags coming out.

Each part is laid out as its batched space (``gymnasium.vector.utils.batch_space``) would
be as an array, env ``i`` in row ``i``, by :class:`aioenv.wire._shared_memory.Layout`: a
child that steps envs ``first`` to ``last`` writes those rows in place, and the parent
reads every child's rows as one batch, viewing them (``copy=False``) or copying them once.
Nothing here passes through pickle. Who may touch which rows when is the wake's business
(:mod:`aioenv.engine._wake`): the parent writes the actions before it posts a child's
request and reads the results after the child's answer; a child the other way round.

Flat scalar infos in the buffer's info slots (:data:`INFO_SLOT` bytes per row) follow one
rule both sides keep (:class:`PackedInfos`).

Most envs give the same keys every step, each a scalar of one type (HalfCheetah's
positions and reward terms, Atari's lives and frame number): a child packs them as one
record per env (:class:`~aioenv.core._infos.FlatInfos`). The first time a child has
records of some keys and types, they go as a message, which tells the parent what they
are; while the next ones have the same, the child writes the records into its rows'
slots and notes :data:`INFOS_IN_BUFFER`, with no message and no pickle. Any other infos
(other keys, other types, arrays, nested dicts, finals) go as a message, as before. Both
sides read what was told from the same messages in the same order, so they agree on what
the records in the slots are.

Imports nothing from the parent's side.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
from typing import Any

import numpy as np
from gymnasium.vector.utils import batch_space

from ..core._environment import BatchStep, copy_arrays, take_rows
from ..core._infos import FlatInfos, record_dtype
from ..wire._shared_memory import Layout, memory_file

__all__ = [
    "INFOS_IN_BUFFER",
    "INFO_SLOT",
    "NEW_SPIN",
    "NoLayout",
    "PackedInfos",
    "StepBuffer",
    "rows_state",
    "write_rows",
]

_ALIGN = 64
#: Bytes of each row's infos slot: a record of flat scalar infos (sixteen float64s) fits.
INFO_SLOT = 128
#: A child's note that its rows' infos are in their slots, packed as the records of the
#: last packed infos it sent as a message (their keys and types).
INFOS_IN_BUFFER = 2
#: The parent's note that a child is to poll for its next request the seconds in its
#: ``spins`` row from now on (the hand-off has no message, its answer none).
NEW_SPIN = 3


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


class NoLayout(ValueError):
    """A space whose samples have no fixed layout in memory (Text, Graph, Sequence, ...):
    its envs cannot step through a step buffer."""


class StepBuffer:
    """The step data of ``n`` envs whose single spaces are ``observation_space`` and
    ``action_space``, in a new memory file, or in ``fd``'s (another process's buffer,
    sent here). Raises NoLayout (a ValueError) if either space has no fixed layout.

    ``actions`` and ``observations`` are trees of arrays (as the batched space's samples
    are: one array for a Box, a dict of them for a Dict); ``rewards`` (float64),
    ``terminated`` and ``truncated`` (bool) are arrays of ``n``. ``notes`` (uint8, one per
    row) says, in the first row of a child's envs, that this hand-off has a message on
    the socket beside the buffer (:mod:`aioenv.engine._child`): a request that is not a
    step, or an answer with infos or a failure; it is written before the post, like
    everything else here. ``marks`` (uint8, one per row) says, in the same row, that the
    child has answered this hand-off: it writes it just before its post, and the parent
    reads it only once a deadline has passed, to tell the children that are late from
    those whose post is on its way. ``infos`` (``info_slot`` bytes per row, by default
    :data:`INFO_SLOT`) holds a step's flat scalar infos (most envs': HalfCheetah's, Ant's,
    Atari's), packed as records, where its child's note is :data:`INFOS_IN_BUFFER`: once
    their keys and types went as a message, they need none while they stay the same.
    Either space may be given as its batch's :class:`~aioenv.wire._shared_memory.Layout`
    (:attr:`layouts`: a Box's bounds can weigh far more than a sample, for a child to be
    sent). ``seqs`` (uint64, one per row) numbers the request a row's data belongs to,
    where requests are numbered (a process worker's lane, :mod:`aioenv.engine._lane`: the
    request's number going in, the answer's coming out; its infos slot holds the step's
    pickled info). ``spins`` (float64, one per row) holds, in a child's first row, the
    seconds it is to poll for its next request, where its note is :data:`NEW_SPIN`. All
    view the mapping."""

    def __init__(
        self,
        observation_space: Any,
        action_space: Any,
        n: int,
        fd: int | None = None,
        info_slot: int = INFO_SLOT,
    ) -> None:
        layouts = []
        for name, space in (("observation", observation_space), ("action", action_space)):
            layout = space if isinstance(space, Layout) else Layout.of(batch_space(space, n))
            if layout is None:
                raise NoLayout(f"the {name} space {space} has no fixed layout in memory")
            layouts.append(layout)
        observations, actions = layouts
        #: The batched spaces' layouts, which another process can be sent in their place.
        self.layouts = (observations, actions)
        starts = [0]
        # Bytes per row of rewards, terminated, truncated, notes, marks, infos, seqs, spins.
        per_row = (8, 1, 1, 1, 1, info_slot, 8, 8)
        for size in (actions.nbytes, observations.nbytes, *(n * each for each in per_row)):
            starts.append(_aligned(starts[-1] + size))
        self.nbytes = starts[-1]
        self.fd = memory_file(self.nbytes, "aioenv-steps") if fd is None else fd
        self._mapping = mmap.mmap(self.fd, self.nbytes)
        self._memory = memory = memoryview(self._mapping)
        self.actions = actions.read(actions.views(memory[starts[0] :]))
        #: The observations' views as laid out (a Discrete leaf as a 0-d array, where
        #: :attr:`observations` reads it).
        self.observation_views = observations.views(memory[starts[1] :])
        self.observations = observations.read(self.observation_views)
        self.rewards = np.ndarray((n,), np.float64, memory, starts[2])
        self.terminated = np.ndarray((n,), np.bool_, memory, starts[3])
        self.truncated = np.ndarray((n,), np.bool_, memory, starts[4])
        self.notes = np.ndarray((n,), np.uint8, memory, starts[5])
        self.marks = np.ndarray((n,), np.uint8, memory, starts[6])
        self.infos = np.ndarray((n, info_slot), np.uint8, memory, starts[7])
        self.seqs = np.ndarray((n,), np.uint64, memory, starts[8])
        self.spins = np.ndarray((n,), np.float64, memory, starts[9])

    def close(self) -> None:
        """Close the memory file's descriptor, and the mapping (which holds a descriptor of
        its own) unless an array still views it: observations the caller kept from
        ``copy=False`` steps keep it until the last of them goes. The buffer's own arrays
        are gone."""
        os.close(self.fd)
        del self.actions, self.observations, self.observation_views, self.rewards, self.terminated
        del self.truncated, self.notes, self.marks, self.infos, self.seqs, self.spins
        with contextlib.suppress(BufferError):
            self._memory.release()
        # numpy's arrays hold the mapping itself, not an export of it, so closing it with
        # one alive would pull the memory from under it: closed only where none is (the
        # references are this attribute's and the call's).
        if sys.getrefcount(self._mapping) <= 2:
            self._mapping.close()


def write_rows(into: Any, tree: Any) -> None:
    """Write a tree of arrays (or of what converts to them) into ``into``'s. ValueError or
    TypeError unless it is alike exactly: the same keys, the same shapes (nothing is
    broadcast: one action is no batch of them), values of the same kind (a float is not
    cast to an int)."""
    if isinstance(into, dict):
        if not isinstance(tree, dict) or tree.keys() != into.keys():
            raise TypeError("not a dict of the same keys")
        for key, sub in into.items():
            write_rows(sub, tree[key])
    elif isinstance(into, tuple):
        for sub, part in zip(into, tree, strict=True):
            write_rows(sub, part)
    elif tree is not into:
        value = np.asarray(tree)
        if value.shape != into.shape:
            raise ValueError(f"shape {value.shape}, not {into.shape}")
        np.copyto(into, value, casting="same_kind")


def rows_state(buffer: StepBuffer, rows: slice) -> BatchStep[Any]:
    """``buffer``'s rows ``rows`` as a child left them: its envs' last state (copied; no
    infos, which travel beside the buffer)."""
    return BatchStep(
        copy_arrays(take_rows(buffer.observations, rows)),
        buffer.rewards[rows].copy(),
        buffer.terminated[rows].copy(),
        buffer.truncated[rows].copy(),
    )


class PackedInfos:
    """What each child (by id) last told of its packed infos: their keys and types."""

    def __init__(self) -> None:
        self.told: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}

    # The child's side ----------------------------------------------------------------------
    def written(self, w: int, packed: FlatInfos, slots: Any) -> bool:
        """Child ``w`` writes ``packed``'s records into ``slots`` (its rows') where the
        parent knows their keys and types: True; else False, and the message that carries
        them will tell it."""
        layout = (packed.keys, packed.codes)
        size = record_dtype(*layout).itemsize
        if self.told.get(w) == layout and size <= INFO_SLOT:
            slots[:, :size] = np.frombuffer(packed.data, np.uint8).reshape(-1, size)
            return True
        self.told[w] = layout
        return False

    # The parent's side ---------------------------------------------------------------------
    def learned(self, w: int, step: BatchStep[Any]) -> BatchStep[Any]:
        """``step``, child ``w``'s answer decoded from its message: where its infos are
        packed, their keys and types are what the records in its slots have from now on."""
        packed = step.packed_infos
        if packed is not None:
            self.told[w] = (packed.keys, packed.codes)
        return step

    def read(
        self, w: int, slots: Any, observations: Any, rewards: Any, terminated: Any, truncated: Any
    ) -> BatchStep[Any]:
        """Child ``w``'s rows, with the packed infos in ``slots`` (its rows')."""
        keys, codes = self.told[w]
        data = slots[:, : record_dtype(keys, codes).itemsize].tobytes()
        packed = FlatInfos(keys, codes, data)
        return BatchStep(observations, rewards, terminated, truncated, packed_infos=packed)

"""Flat scalar infos in the step buffer's info slots (:data:`~aioenv.engine._buffer.INFO_SLOT`
bytes per row), the rule both sides keep.

Most envs give the same keys every step, each a scalar of one type (HalfCheetah's
positions and reward terms, Atari's lives and frame number): a child packs them as one
record per env (:class:`~aioenv.core._infos.FlatInfos`). The first time a child has
records of some keys and types, they go as a message, which tells the parent what they
are; while the next ones have the same, the child writes the records into its rows'
slots and notes :data:`~aioenv.engine._buffer.INFOS_IN_BUFFER`, with no message and no
pickle. Any other infos (other keys, other types, arrays, nested dicts, finals) go as a
message, as before. Both sides read what was told from the same messages in the same
order, so they agree on what the records in the slots are. Imports nothing from the
parent's side.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core._environment import BatchStep
from ..core._infos import FlatInfos, record_dtype
from ._buffer import INFO_SLOT

__all__ = ["PackedInfos"]


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

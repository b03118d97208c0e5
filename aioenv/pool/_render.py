"""Tiling frames from several envs into one image."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["tile_images"]


def tile_images(frames: Sequence[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """Lay ``H x W x C`` frames out on a near-square grid, row by row (8 frames: 4 x 2);
    frames of different sizes are padded to the largest, and empty cells are black."""
    if not frames:
        raise ValueError("no frames to tile")
    height = max(frame.shape[0] for frame in frames)
    width = max(frame.shape[1] for frame in frames)
    channels = frames[0].shape[2] if frames[0].ndim == 3 else 1
    square = math.ceil(math.sqrt(len(frames)))
    columns = min((square, square + 1), key=lambda c: math.ceil(len(frames) / c) * c - len(frames))
    rows = math.ceil(len(frames) / columns)
    canvas = np.zeros((rows * height, columns * width, channels), dtype=frames[0].dtype)
    for index, frame in enumerate(frames):
        row, column = divmod(index, columns)
        image = frame if frame.ndim == 3 else frame[..., None]
        top, left = row * height, column * width
        canvas[top : top + image.shape[0], left : left + image.shape[1]] = image
    return canvas if channels > 1 or frames[0].ndim == 3 else canvas[..., 0]

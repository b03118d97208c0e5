"""Saying why an action is not in its space (for ``check_actions=True``): a pool's worker's,
or one env's of a batch (a vector env checks the whole batch before it sends any)."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

__all__ = ["explain_invalid_action"]


def explain_invalid_action(action: Any, space: gymnasium.Space[Any]) -> str:
    """Why ``action`` is not in ``space``: its dtype, shape or bounds, and the fix."""
    reason = ""
    if isinstance(space, gymnasium.spaces.Box):
        reason = _box_reason(action, space)
    elif isinstance(space, gymnasium.spaces.Discrete):
        reason = _discrete_reason(action, space)
    text = f"action {action!r} is not in its action space {space}"
    if reason:
        text += f": {reason}"
    return text + "; nothing was sent"


def _box_reason(action: Any, space: gymnasium.spaces.Box) -> str:
    try:
        array = action if isinstance(action, np.ndarray) else np.asarray(action, dtype=space.dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        return f"it cannot be made an array of {space.dtype} ({exc})"
    if array.shape != space.shape:
        return f"its shape is {array.shape}, the space's is {space.shape}"
    if not np.can_cast(array.dtype, space.dtype):
        return (
            f"its dtype is {array.dtype}, which numpy cannot cast safely to the space's "
            f"{space.dtype}; cast it first: action.astype(np.{space.dtype})"
        )
    outside = ~((array >= space.low) & (array <= space.high))  # NaN compares False
    if outside.any():
        where = np.flatnonzero(outside.ravel()).tolist()
        return (
            f"it is outside the bounds [low, high] (or NaN) at flat index {where}; clip it "
            "first: np.clip(action, space.low, space.high) (a NaN stays NaN: find where your "
            "policy makes it)"
        )
    return ""


def _discrete_reason(action: Any, space: gymnasium.spaces.Discrete) -> str:
    is_integer = isinstance(action, int) or (
        isinstance(action, (np.generic, np.ndarray))
        and np.issubdtype(action.dtype, np.integer)
        and action.shape == ()
    )
    if not is_integer:
        return (
            f"a Discrete space takes an int or a 0-d integer array, got {type(action).__name__}"
            f"{' of dtype ' + str(action.dtype) if hasattr(action, 'dtype') else ''}; "
            "convert it first: int(action)"
        )
    start = int(space.start)
    return f"it is outside [{start}, {start + int(space.n) - 1}]"

"""A vector env's spaces from its first env's, by gymnasium's ``observation_mode``, and
every env's spaces checked against them with gymnasium's rules and texts."""

from __future__ import annotations

from typing import Any

import gymnasium
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector.utils import batch_differing_spaces, batch_space

__all__ = ["ObservationMode", "check_env_spaces", "observation_spaces"]

#: gymnasium's ``observation_mode``: ``"same"``, ``"different"`` or ``(batched, single)``.
ObservationMode = str | tuple[gymnasium.Space[Any], gymnasium.Space[Any]]


def observation_spaces(mode: ObservationMode, single: Any, num_envs: int) -> tuple[Any, Any]:
    """The batched and single observation spaces for ``mode``; the batched one is None for
    ``"different"`` (known once every env's space is: :func:`check_env_spaces`)."""
    if isinstance(mode, tuple) and len(mode) == 2:
        if not all(isinstance(space, gymnasium.Space) for space in mode):
            raise TypeError(f"observation_mode must hold two Spaces, got {mode}")
        return mode
    if mode == "same":
        return batch_space(single, num_envs), single
    if mode != "different":
        # gymnasium's own text: code written against its vector envs matches on it
        raise ValueError(
            "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of "
            f"single and batch observation space, actual got {mode}"
        )
    return None, single


def check_env_spaces(
    mode: ObservationMode,
    single_observation: Any,
    single_action: Any,
    observations: list[Any],
    actions: list[Any],
) -> Any:
    """Check each env's spaces against the vector env's (``RuntimeError`` naming the env);
    the batched observation space of ``"different"`` envs, else None."""
    for index, (observation, action) in enumerate(zip(observations, actions, strict=True)):
        if mode == "same" and observation != single_observation:
            raise RuntimeError(
                "the sub-environments observation spaces are not equivalent. "
                f"env {index}'s observation space {observation} differs from the first "
                f"env's {single_observation}. If this is intentional, use "
                "`observation_mode='different'` instead."
            )
        if mode != "same" and not is_space_dtype_shape_equiv(observation, single_observation):
            raise RuntimeError(
                f"env {index}'s observation space {observation} does not share the shape "
                f"and dtype of {single_observation}"
            )
        if action != single_action:
            raise RuntimeError(
                f"env {index}'s action space {action} is not equal to the vector env's "
                f"single_action_space {single_action}: every env needs the same action "
                "space (spaces compare with ==; a space class of your own needs an __eq__, "
                "since the spaces of envs in other processes are copies)"
            )
    return batch_differing_spaces(observations) if mode == "different" else None

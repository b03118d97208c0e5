"""A package that registers a gymnasium id when it is imported, as env packages do: the
tests name it ``registered_pkg:Thing-v0``, which imports it first."""

from __future__ import annotations

import gymnasium
from envs import Walk

#: The id this package registers (without the ``registered_pkg:`` prefix).
THING = "Thing-v0"

gymnasium.register(THING, entry_point=Walk, max_episode_steps=3)

"""Which of :class:`~aioenv.AioVectorEnv`'s placements step through the engine's children
(:mod:`aioenv.engine`) rather than a pool of process workers, and in which groups."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gymnasium.vector.utils import batch_space

from ..core._environment import EnvSource, VectorSource
from ..engine._buffer import NoLayout
from ..engine._children import ENGINE_OPTIONS, EngineChildren
from ._probe import Probe

__all__ = ["engine_envs"]


def engine_envs(
    mode: str | Sequence[str],
    batch_size: int | None,
    grouping: EnvSource | list[EnvSource],
    sources: list[EnvSource],
    probe: Probe,
    autoreset: object,
    options: dict[str, Any],
    copy: bool = True,
) -> EngineChildren | None:
    """The envs in child processes, stepped through the engine (:mod:`aioenv.engine`), a
    child per group of ``grouping`` (each env a child of its own where it is not grouped);
    None where they do not go there: ``mode`` is not ``"process"``, or the pool must step
    them: a pool option beyond the engine's
    (:data:`~aioenv.engine._children.ENGINE_OPTIONS`: deadlines, restarts and episode
    budgets are the engine's), or spaces with no fixed layout in memory. ``batch_size``:
    the pipelined calls' (their envs grouped to fit it by then). Parallel envs' lanes step
    as the envs they make up (:class:`~aioenv.core._agents.AgentLanesEnv`), whose spaces
    are a batch of one agent's per lane."""
    if mode != "process" or set(options) - ENGINE_OPTIONS:
        return None
    if isinstance(grouping, list) and len(grouping) < len(sources):  # k envs to a child
        groups = [group for group in grouping if isinstance(group, VectorSource)]
    else:
        groups = [VectorSource((source,)) for source in sources]
    sizes = [len(group.sources) for group in groups]
    observation_space, action_space = probe.observation_space, probe.action_space
    if probe.agents is not None:  # an env of parallel envs' lanes: a batch of one per agent
        lanes = len(probe.agents)
        observation_space = batch_space(observation_space, lanes)
        action_space = batch_space(action_space, lanes)
    try:
        return EngineChildren(
            groups,
            sizes,
            observation_space,
            action_space,
            autoreset=autoreset,
            copy=copy,
            **options,
        )
    except NoLayout:
        return None

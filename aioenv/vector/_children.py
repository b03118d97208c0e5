"""Which of :class:`~aioenv.AioVectorEnv`'s placements step through the engine's children
(:mod:`aioenv.engine`) rather than a pool of process workers, and in which groups."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gymnasium.vector.utils import batch_space

from ..core._environment import EnvSource, VectorSource
from ..engine._buffer import NoLayout
from ..engine._children import ENGINE_OPTIONS, EngineChildren
from ._grouping import groups_of
from ._probe import Probe

__all__ = ["SHARED_BY_THE_ENGINE", "engine_envs"]

#: The ``shared_memory`` values the engine fulfils: its buffer is shared memory, so every
#: observation of a fixed layout travels there. (False, never through shared memory, is a
#: pool's process workers'.)
SHARED_BY_THE_ENGINE = (True, "auto")


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
    budgets are the engine's; so are ``shared_memory``, but False, and
    ``envs_per_process=k``, ``k`` envs to a child where whole children make up the envs
    and each pipelined batch), or spaces with no fixed layout in memory. ``batch_size``:
    the pipelined calls' (their envs grouped to fit it by then). Parallel envs' lanes step
    as the envs they make up (:class:`~aioenv.core._agents.AgentLanesEnv`), whose spaces
    are a batch of one agent's per lane."""
    options = dict(options)  # the pool's, untouched, where the engine does not take them
    per_process = options.pop("envs_per_process", 1)
    if (
        mode != "process"
        or options.pop("shared_memory", True) not in SHARED_BY_THE_ENGINE
        or set(options) - ENGINE_OPTIONS
    ):
        return None
    if isinstance(grouping, list) and len(grouping) < len(sources):  # k envs to a child
        if per_process != 1:
            return None  # workers of several envs, several to a process: the pool's
        groups = [group for group in grouping if isinstance(group, VectorSource)]
    elif per_process == 1 or _whole_groups(per_process, len(sources), batch_size):
        groups = groups_of(sources, int(per_process))  # an env to a child, or k
    else:
        return None  # the pool's, which says what is wrong where something is
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


def _whole_groups(per_process: Any, num_envs: int, batch_size: int | None) -> bool:
    """Whether ``envs_per_process`` makes whole children of the envs for the engine: ``k``
    envs each, and whole children in each pipelined batch."""
    return (
        type(per_process) is int
        and per_process >= 1
        and num_envs % per_process == 0
        and (batch_size is None or batch_size % per_process == 0)
    )

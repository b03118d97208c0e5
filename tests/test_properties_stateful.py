"""A stateful property: any sequence of steps, resets, seeded resets and masked resets
(``reset(options={"reset_mask": ...})``) gives from an ``AioVectorEnv`` exactly what a
``SyncVectorEnv`` of the same seeded envs gives, in every autoreset mode, inline and with
workers of several envs (in this process, and in child processes for a few short runs)."""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from space_envs import echo
from test_properties_vector import same_value

import aioenv

AUTORESET = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}
SEEDS = st.one_of(st.none(), st.integers(0, 2**31))


class AgainstSyncVectorEnv(RuleBasedStateMachine):
    """Drives an AioVectorEnv and a SyncVectorEnv of the same envs side by side."""

    modes: tuple[str, ...] = ("inline", "sync", "thread")
    pool_options: dict[str, Any] = {}  # noqa: RUF012 (read only)
    #: The mode as a list, a mode per worker: a pool of those workers, whatever the mode.
    mode_per_worker = False

    def __init__(self) -> None:
        super().__init__()
        self.ours: Any = None
        self.theirs: Any = None

    @initialize(
        data=st.data(),
        space=st.sampled_from(["Box", "Dict", "Discrete", "Tuple", "MultiBinary"]),
        autoreset=st.sampled_from(list(AUTORESET)),
        seed=st.integers(0, 2**31),
    )
    def build(self, data: st.DataObject, space: str, autoreset: str, seed: int) -> None:
        mode = data.draw(st.sampled_from(self.modes), label="mode")
        num_envs = data.draw(st.integers(1, 4), label="num_envs")
        per_worker = data.draw(
            st.sampled_from([k for k in range(1, num_envs + 1) if num_envs % k == 0]),
            label="envs_per_worker",
        )
        fns = [functools.partial(echo, space, i) for i in range(num_envs)]
        self.theirs = SyncVectorEnv(fns, autoreset_mode=AUTORESET[autoreset])
        options = {} if mode == "inline" else {"envs_per_worker": per_worker, **self.pool_options}
        modes = [mode] * (num_envs // per_worker) if self.mode_per_worker else mode
        self.ours = aioenv.AioVectorEnv(fns, mode=modes, autoreset_mode=autoreset, **options)
        self.autoreset = autoreset
        self.num_envs = num_envs
        self.ended = np.zeros(num_envs, np.bool_)  # envs whose episode ended at the last step
        self.action_space = self.theirs.action_space
        self.compare(self.ours.reset(seed=seed), self.theirs.reset(seed=seed), "first reset")

    def compare(self, mine: Any, theirs: Any, what: str) -> None:
        same_value(mine[0], theirs[0], f"{what}: observations")
        for index in range(1, len(theirs) - 1):  # rewards, terminations, truncations
            same_value(mine[index], theirs[index], f"{what}: [{index}]")
        same_value(mine[-1], theirs[-1], f"{what}: infos")

    @precondition(lambda self: self.autoreset != "disabled" or not self.ended.any())
    @rule(seed=st.integers(0, 2**31))
    def step(self, seed: int) -> None:
        self.action_space.seed(seed)
        actions = self.action_space.sample()
        mine, theirs = self.ours.step(actions), self.theirs.step(actions)
        self.compare(mine, theirs, "step")
        self.ended = theirs[2] | theirs[3]

    @rule(seed=SEEDS)
    def reset(self, seed: int | None) -> None:
        self.compare(self.ours.reset(seed=seed), self.theirs.reset(seed=seed), "reset")
        self.ended[:] = False

    @rule(data=st.data(), seed=SEEDS)
    def masked_reset(self, data: st.DataObject, seed: int | None) -> None:
        mask = np.array(
            data.draw(st.lists(st.booleans(), min_size=self.num_envs, max_size=self.num_envs)),
            np.bool_,
        )
        if not mask.any():
            mask[data.draw(st.integers(0, self.num_envs - 1))] = True
        mine = self.ours.reset(seed=seed, options={"reset_mask": mask.copy()})
        theirs = self.theirs.reset(seed=seed, options={"reset_mask": mask.copy()})
        self.compare(mine, theirs, f"reset of {mask.tolist()}")
        self.ended[mask] = False

    @precondition(lambda self: self.ended.any())
    @rule()
    def reset_the_ended(self) -> None:
        """What a loop under autoreset "disabled" does after each step."""
        mask = self.ended.copy()
        mine = self.ours.reset(options={"reset_mask": mask.copy()})
        theirs = self.theirs.reset(options={"reset_mask": mask.copy()})
        self.compare(mine, theirs, f"reset of the ended {mask.tolist()}")
        self.ended[:] = False

    @invariant()
    def same_shape(self) -> None:
        if self.ours is not None:
            assert self.ours.num_envs == self.theirs.num_envs

    def teardown(self) -> None:
        if self.ours is not None:
            self.ours.close()
        if self.theirs is not None:
            self.theirs.close()


# A run builds a vector env: a third of the profile's examples in this process, a few with
# child processes (each starts its workers).
AgainstSyncVectorEnv.TestCase.settings = settings(
    max_examples=max(5, settings.default.max_examples // 3), stateful_step_count=12
)
TestAioVectorEnvAgainstSyncVectorEnv = AgainstSyncVectorEnv.TestCase


class InProcesses(AgainstSyncVectorEnv):
    # A pool of process workers (not the engine's children), their observations through
    # shared memory where they fit its layout, else the socket.
    modes = ("process",)
    mode_per_worker = True
    pool_options = {"shared_memory": True} if hasattr(os, "memfd_create") else {}


InProcesses.TestCase.settings = settings(
    max_examples=max(2, settings.default.max_examples // 20), stateful_step_count=8
)
TestAioVectorEnvInProcessesAgainstSyncVectorEnv = InProcesses.TestCase

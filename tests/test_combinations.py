"""The combination matrix: ``AioVectorEnv`` against gymnasium's ``SyncVectorEnv``, step by
step, over worker kinds x spaces x autoreset modes.

Every space gymnasium ships, nested ones and a custom space, in every worker kind aioenv
has, gives gymnasium's answers: observations, rewards, flags, infos, final observations
and final infos, through resets, masked resets and episode ends. The envs observe the
action they were given (``space_envs.Echo``), so an action that reaches an env in another
form shows at once.

The full product is 8 x 11 x 3 vector envs; every pair of dimensions is covered by the
88 kind x space cases, each in the autoreset mode ``(kind + space) % 3``: for a kind the
spaces run through all three modes, and for a space the kinds do. ``make test`` runs 24 of
them (tests/matrix.py): each space once, and each kind in each autoreset mode.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import cloudpickle
import gymnasium
import numpy as np
import pytest
import space_envs
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from space_envs import SPACES, AsyncEcho, echo

import aioenv

cloudpickle.register_pickle_by_value(space_envs)

N = 4
STEPS = 14
AUTORESET = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}
#: Each worker kind: its AioVectorEnv options.
KINDS: dict[str, dict[str, Any]] = {
    "inline": {"mode": "inline"},
    "sync": {"mode": "sync"},
    "thread": {"mode": "thread"},
    "process": {"mode": "process", "envs_per_worker": 1},
    "process-grouped": {"mode": "process", "envs_per_worker": 2},
    "coroutine": {"mode": "coroutine"},
    "ray": {"mode": "ray", "num_cpus": 0},
    # One vector env over kinds that send and answer differently: a sync worker listed
    # first is sent its action last (it steps inside the send).
    "mixed": {"mode": ["sync", "process", "thread", "process"]},
}


def _cases() -> list[Any]:
    cases = []
    modes = list(AUTORESET)
    for k, kind in enumerate(KINDS):
        for s, space in enumerate(SPACES):
            autoreset = modes[(k + s) % len(modes)]
            marks = [pytest.mark.ray] if kind == "ray" else []
            cases.append(
                pytest.param(kind, space, autoreset, id=f"{kind}-{space}-{autoreset}", marks=marks)
            )
    return cases


def canonical(value: Any) -> str:
    """A text that two values share exactly when they hold the same data of the same
    types, shapes and dtypes (dict keys in any order)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{canonical(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, (tuple, list)):
        kind = "t" if isinstance(value, tuple) else "l"
        return kind + "(" + ",".join(canonical(item) for item in value) + ")"
    if isinstance(value, gymnasium.spaces.GraphInstance):
        return "G" + canonical((value.nodes, value.edges, value.edge_links))
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return f"O{value.shape}" + canonical(list(value.ravel()))
        return f"{value.dtype}{value.shape}{value.tolist()}"
    if isinstance(value, (np.generic,)):
        return f"{type(value).__name__}:{value.item()!r}"
    return f"{type(value).__name__}:{value!r}"


def assert_same(ours: Any, theirs: Any, what: str) -> None:
    assert canonical(ours) == canonical(theirs), f"{what}:\n ours   {ours!r}\n theirs {theirs!r}"


def _factories(kind: str, space: str) -> list[Callable[[], Any]]:
    env = AsyncEcho if kind == "coroutine" else echo
    return [functools.partial(env, space, index) for index in range(N)]


@pytest.mark.parametrize(("kind", "space", "autoreset"), _cases())
def test_aio_vector_env_gives_gymnasium_answers(
    kind: str, space: str, autoreset: str, request: pytest.FixtureRequest
) -> None:
    if kind == "ray":
        request.getfixturevalue("ray_local")
    reference = SyncVectorEnv(_factories("sync", space), autoreset_mode=AUTORESET[autoreset])
    ours = aioenv.AioVectorEnv(_factories(kind, space), autoreset=autoreset, **KINDS[kind])
    with ours, contextlib.closing(reference):
        assert ours.single_action_space == reference.single_action_space
        assert ours.single_observation_space == reference.single_observation_space
        assert_same(ours.reset(seed=11), reference.reset(seed=11), "reset")
        reference.action_space.seed(5)
        for t in range(STEPS):
            actions = reference.action_space.sample()
            theirs = reference.step(actions)
            mine = ours.step(actions)
            for name, a, b in zip(
                ("obs", "rewards", "terminated", "truncated", "infos"), mine, theirs, strict=True
            ):
                assert_same(a, b, f"step {t}: {name}")
            ended = theirs[2] | theirs[3]
            if autoreset == "disabled" and ended.any():
                options = {"reset_mask": ended}
                assert_same(
                    ours.reset(options=options),
                    reference.reset(options=options),
                    f"masked reset after step {t}",
                )
        assert_same(ours.reset(seed=3), reference.reset(seed=3), "reset again")

"""TorchRL over ``AioVectorEnv``: its ``GymWrapper`` (which takes a gymnasium vector env as
a batched env) passes TorchRL's own ``check_env_specs``, rolls out step for step as over
gymnasium's ``SyncVectorEnv`` with the same seed and policy, and feeds a TorchRL
collector; TorchRL takes the autoreset modes ``"disabled"`` and ``"same_step"``, and
refuses ``"next_step"`` (the docs' TorchRL page says so)."""

from __future__ import annotations

from typing import Any

import gymnasium
import pytest

pytest.importorskip("torchrl")

import torch
from torchrl.collectors import Collector
from torchrl.envs import GymWrapper
from torchrl.envs.utils import check_env_specs

import aioenv

NUM_ENVS = 4
STEPS = 60  # CartPole episodes end within it under the policy below: resets are covered


def lean(tensordict: Any) -> Any:
    """A policy of the observation alone: push the cart toward where the pole leans."""
    observation = tensordict["observation"]
    tensordict["action"] = torch.nn.functional.one_hot((observation[..., 2] > 0).long(), 2).to(
        torch.int64
    )
    return tensordict


def rollout(vector_env: gymnasium.vector.VectorEnv) -> Any:
    env = GymWrapper(vector_env)
    env.set_seed(3)
    return env.rollout(STEPS, policy=lean, break_when_any_done=False)


@pytest.mark.parametrize("autoreset", ["disabled", "same_step"])
def test_torchrl_rolls_out_over_aioenv_as_over_gymnasiums_sync_vector_env(autoreset: str) -> None:
    mode = gymnasium.vector.AutoresetMode[autoreset.upper()]
    with aioenv.AioVectorEnv("CartPole-v1", NUM_ENVS, mode="process", autoreset=autoreset) as ours:
        # Held: a torchrl wrapper closes the env it wraps when it is collected, which for
        # one in a reference cycle is whenever the garbage collector runs (mid-rollout).
        checked = GymWrapper(ours)
        check_env_specs(checked)
        got = rollout(ours)
        del checked
    theirs = gymnasium.vector.SyncVectorEnv(
        [lambda: gymnasium.make("CartPole-v1")] * NUM_ENVS, autoreset_mode=mode
    )
    try:
        expected = rollout(theirs)
    finally:
        theirs.close()
    assert got.shape == expected.shape == torch.Size([NUM_ENVS, STEPS])
    assert int(expected["next", "done"].sum()) > 0, "no episode ended: resets untested"
    for key in [
        "observation",
        "action",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "terminated"),
        ("next", "truncated"),
        ("next", "done"),
    ]:
        assert torch.equal(got[key], expected[key]), key


def test_a_torchrl_collector_gathers_its_frames_from_aioenv() -> None:
    with aioenv.AioVectorEnv("CartPole-v1", NUM_ENVS, mode="thread", autoreset="disabled") as ours:
        env = GymWrapper(ours)
        env.set_seed(0)
        collector = Collector(env, policy=lean, frames_per_batch=64, total_frames=256)
        try:
            batches = list(collector)
        finally:
            collector.shutdown()
    assert [batch.numel() for batch in batches] == [64] * 4
    frames = torch.cat([batch.reshape(-1) for batch in batches])
    assert int(frames["next", "done"].sum()) > 0
    # Every step's observation follows from the one before (nothing lost or repeated):
    # within each env's frames, a step not after an episode's end starts where the last
    # one ended.
    for batch in batches:
        for row in batch.unbind(0):
            ended = row["next", "done"].squeeze(-1)[:-1]
            follows = torch.equal(
                row["observation"][1:][~ended], row["next", "observation"][:-1][~ended]
            )
            assert follows


def test_torchrl_refuses_next_step_autoreset_saying_which_modes_it_takes() -> None:
    with (
        aioenv.AioVectorEnv("CartPole-v1", 2, mode="inline", autoreset="next_step") as ours,
        pytest.raises(RuntimeError, match="SAME_STEP or DISABLED"),
    ):
        GymWrapper(ours)

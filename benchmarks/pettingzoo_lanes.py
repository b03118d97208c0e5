"""PettingZoo parallel envs as agent lanes: AioVectorEnv against SuperSuit's vectorization.

Both vectorize the same envs the same way (one lane per agent, env-major), and a
lockstep loop steps every lane with seeded random actions. SuperSuit needs every agent
present at every step, so its envs are wrapped in ``black_death_v3`` (a fallen agent's lane
stays, zeroed); AioVectorEnv's lanes do that themselves. Rows: SuperSuit's
``concat_vec_envs_v1`` in line (``num_cpus=0``) and in processes, AioVectorEnv
``mode="inline"`` and ``mode="process"``.

    python benchmarks/pettingzoo_lanes.py                      # multiwalker, 4 envs
    python benchmarks/pettingzoo_lanes.py --env pistonball --envs 2 --steps 100

Figures are lane steps per second: the median of ``--reps`` windows of ``--steps`` lockstep
steps each, after a warm-up, the rows taking turns window by window.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import aioenv


def multiwalker() -> Any:
    from pettingzoo.sisl import multiwalker_v9

    return multiwalker_v9.parallel_env(n_walkers=3, max_cycles=500)


def pistonball() -> Any:
    from pettingzoo.butterfly import pistonball_v6

    return pistonball_v6.parallel_env(n_pistons=8, max_cycles=125)


ENVS: dict[str, Callable[[], Any]] = {"multiwalker": multiwalker, "pistonball": pistonball}


def supersuit_vec(factory: Callable[[], Any], envs: int, cpus: int) -> Any:
    import supersuit

    vec = supersuit.pettingzoo_env_to_vec_env_v1(supersuit.black_death_v3(factory()))
    return supersuit.concat_vec_envs_v1(vec, envs, num_cpus=cpus, base_class="gymnasium")


def lane_actions(venv: Any, steps: int) -> list[Any]:
    # SuperSuit's action_space is one lane's (SB3's convention), AioVectorEnv's the batch's
    space = getattr(venv, "single_action_space", venv.action_space)
    space.seed(0)
    return [np.stack([space.sample() for _ in range(venv.num_envs)]) for _ in range(steps)]


def window(venv: Any, actions: list[Any]) -> float:
    """Lane steps per second over one window of lockstep steps."""
    started = time.perf_counter()
    for action in actions:
        venv.step(action)
    return len(actions) * venv.num_envs / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(ENVS), default="multiwalker")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2, help="SuperSuit's processes")
    args = parser.parse_args()
    factory = ENVS[args.env]
    rows: list[tuple[str, Callable[[], Any]]] = [
        ("supersuit concat_vec_envs_v1, num_cpus=0", lambda: supersuit_vec(factory, args.envs, 0)),
        (
            f"supersuit concat_vec_envs_v1, num_cpus={args.cpus}",
            lambda: supersuit_vec(factory, args.envs, args.cpus),
        ),
        (
            "AioVectorEnv mode='inline'",
            lambda: aioenv.AioVectorEnv([factory] * args.envs, mode="inline"),
        ),
        (
            "AioVectorEnv mode='process'",
            lambda: aioenv.AioVectorEnv([factory] * args.envs, mode="process"),
        ),
    ]
    print(f"{args.env}, {args.envs} envs, {args.steps} steps x {args.reps}: lane steps/s")
    venvs = [build() for _, build in rows]
    try:
        actions = []
        for venv in venvs:
            actions.append(lane_actions(venv, args.steps))
            venv.reset(seed=0)
            window(venv, actions[-1][: max(1, args.steps // 10)])  # warm-up
        rates: list[list[float]] = [[] for _ in rows]
        for _ in range(args.reps):  # the rows take turns: a busy spell hits them all
            for venv, steps, row_rates in zip(venvs, actions, rates, strict=True):
                row_rates.append(window(venv, steps))
    finally:
        for venv in venvs:
            venv.close()
    for (label, _), venv, row_rates in zip(rows, venvs, rates, strict=True):
        rate = statistics.median(row_rates)
        print(f"  {label:<44} {venv.num_envs:>3} lanes  {rate:>10,.0f}")


if __name__ == "__main__":
    main()

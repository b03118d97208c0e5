"""PettingZoo parallel envs as agent lanes: AioVectorEnv against SuperSuit's vectorization.

Both vectorize the same envs the same way (one lane per agent, env-major), and a
lockstep loop steps every lane with seeded random actions. SuperSuit needs every agent
present at every step, so its envs are wrapped in ``black_death_v3`` (a fallen agent's lane
stays, zeroed); AioVectorEnv's lanes do that themselves. Rows: SuperSuit's
``concat_vec_envs_v1`` in line (``num_cpus=0``) and in processes, AioVectorEnv
``mode="inline"`` and ``mode="process"``.

    python benchmarks/pettingzoo_lanes.py                      # multiwalker, 4 envs
    python benchmarks/pettingzoo_lanes.py --env pistonball --envs 2 --steps 100

Figures are lane steps per second (median of ``--reps`` windows of ``--steps`` lockstep
steps each, after a warm-up).
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


def steps_per_second(venv: Any, steps: int, reps: int) -> float:
    # SuperSuit's action_space is one lane's (SB3's convention), AioVectorEnv's the batch's
    space = getattr(venv, "single_action_space", venv.action_space)
    space.seed(0)
    actions = [np.stack([space.sample() for _ in range(venv.num_envs)]) for _ in range(steps)]
    venv.reset(seed=0)
    for action in actions[: max(1, steps // 10)]:  # warm-up
        venv.step(action)
    rates = []
    for _ in range(reps):
        started = time.perf_counter()
        for action in actions:
            venv.step(action)
        rates.append(steps * venv.num_envs / (time.perf_counter() - started))
    return statistics.median(rates)


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
    for label, build in rows:
        venv = build()
        try:
            rate = steps_per_second(venv, args.steps, args.reps)
            print(f"  {label:<44} {venv.num_envs:>3} lanes  {rate:>10,.0f}")
        finally:
            venv.close()


if __name__ == "__main__":
    main()

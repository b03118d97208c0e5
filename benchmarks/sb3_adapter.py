"""Stable-Baselines3's vec envs against aioenv's adapter: env steps per second of
``DummyVecEnv``, ``SubprocVecEnv`` and ``aioenv.sb3.AioVecEnv`` (its default mode, and
process workers) on the same envs, stepped with random actions drawn beforehand.

CartPole-v1 always; Atari Pong (``ALE/Pong-v5``) where ale-py is installed (the ``bench``
extra), else its rows are left out, saying so. Needs the ``sb3`` extra.

Run::

    python benchmarks/sb3_adapter.py [--envs 8,16] [--seconds 1] [--rounds 3]
        [--env-ids CartPole-v1]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
from machine import host_info
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from aioenv.sb3 import AioVecEnv

PONG = "ALE/Pong-v5"


def _has_ale() -> bool:
    try:
        import ale_py
    except ImportError:
        return False
    gymnasium.register_envs(ale_py)
    return True


def candidates() -> dict[str, tuple[type[VecEnv], dict[str, Any]]]:
    """The vec envs compared: a name, its class and its ``vec_env_kwargs``."""
    return {
        "DummyVecEnv": (DummyVecEnv, {}),
        "SubprocVecEnv": (SubprocVecEnv, {}),
        "AioVecEnv (auto)": (AioVecEnv, {}),
        "AioVecEnv (process)": (AioVecEnv, {"mode": "process"}),
    }


def steps_per_second(make: Callable[[], VecEnv], seconds: float) -> tuple[float, str]:
    """Env steps per second of a lockstep loop over ``make()``'s envs for about
    ``seconds`` (after a warm-up), and where an AioVecEnv chose to step them."""
    venv = make()
    try:
        rng = np.random.default_rng(0)
        space = venv.action_space
        n = space.n if hasattr(space, "n") else 2
        actions = rng.integers(0, n, size=(256, venv.num_envs))
        venv.seed(0)
        venv.reset()
        for row in actions[:16]:
            venv.step(row)
        steps = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            venv.step(actions[steps % len(actions)])
            steps += 1
        elapsed = time.perf_counter() - started
        where = venv.venv.mode_choice.reason if isinstance(venv, AioVecEnv) else ""
        return steps * venv.num_envs / elapsed, where
    finally:
        venv.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="8,16", help="numbers of envs, comma separated")
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per vec env")
    parser.add_argument("--env-ids", default=f"CartPole-v1,{PONG}", help="envs to step")
    args = parser.parse_args()
    host = host_info()
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"# {host['cpus_usable']} usable CPUs ({host['cpu_model']}), load {load}")
    env_ids = args.env_ids.split(",")
    if PONG in env_ids and not _has_ale():
        print(f"# {PONG}: left out, ale-py is not installed (pip install '.[bench]')")
        env_ids.remove(PONG)
    print(f"{'env':<14} {'N':>3} {'vec env':<20} {'env steps/s (median, min-max)':>30}  where")
    for env_id in env_ids:
        for num_envs in (int(n) for n in args.envs.split(",")):
            rates: dict[str, list[float]] = {name: [] for name in candidates()}
            chosen: dict[str, str] = {}
            # Rounds in turn, each vec env built afresh: a machine whose load changes
            # during the run weighs on every candidate alike.
            for _ in range(args.rounds):
                for name, (cls, kwargs) in candidates().items():
                    make = functools.partial(
                        make_vec_env,
                        # "ale_py:" imports ale-py (registering its envs) in each process
                        # that makes the env, workers and SB3's subprocesses alike.
                        f"ale_py:{env_id}" if env_id == PONG else env_id,
                        n_envs=num_envs,
                        seed=0,
                        vec_env_cls=cls,
                        vec_env_kwargs=kwargs,
                    )
                    rate, chosen[name] = steps_per_second(make, args.seconds)
                    rates[name].append(rate)
            for name, measured in rates.items():
                low, high = min(measured), max(measured)
                figures = f"{statistics.median(measured):,.0f} ({low:,.0f}-{high:,.0f})"
                print(f"{env_id:<14} {num_envs:>3} {name:<20} {figures:>30}  {chosen[name]}")


if __name__ == "__main__":
    main()

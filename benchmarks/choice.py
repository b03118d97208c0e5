"""The figures behind ``AioVectorEnv``'s default (``mode="auto"``, ``aioenv/vector/_choice.py``).

A lockstep loop over envs whose step burns a fixed amount of CPU (``--steps-us``, a busy
wait, so the cost is the same in a child as in the parent), for each placement the rule
chooses between: every env inline, and process workers a child per core with the envs split
evenly (and one child of all of them). It prints the wall time per vector step of each and,
for each process placement, what it costs beyond its envs' own work (``k`` steps of one
child): the hand-off the rule's ``HAND_OFF`` and ``PER_CHILD`` stand for. Then, for each
cost, which placement was fastest, and what the rule chooses for it.

Run::

    python benchmarks/choice.py [--envs 8] [--steps-us 10,50,100,200,400,800] [--seconds 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import gymnasium
import numpy as np
from machine import git_state, host_info

import aioenv
from aioenv.vector import _choice
from aioenv.vector._grouping import usable_cores
from aioenv.vector._probe import Probe


class Burn(gymnasium.Env[np.ndarray, int]):
    """A step that busy-waits ``micros`` microseconds: CPU work, as a simulator's."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (17,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, micros: float = 100.0) -> None:
        self.seconds = micros / 1e6

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(17), {}

    def step(self, action: int) -> Any:
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        return np.zeros(17), 0.0, False, False, {}


def _per_step(envs: Any, n: int, seconds: float) -> float:
    """Median wall seconds of a lockstep step over ``seconds`` (after a warm-up)."""
    actions = np.zeros(n, np.int64)
    envs.reset(seed=0)
    for _ in range(20):
        envs.step(actions)
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        envs.step(actions)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _placements(n: int, cores: int) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {"inline": {"mode": "inline"}}
    for children in sorted({min(n, cores), 1}):
        rows[f"{children} child x {n // children}"] = {
            "mode": "process",
            "envs_per_worker": n // children,
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps-us", default="10,50,100,200,400,800")
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    n, cores = args.envs, usable_cores()
    host, commit = host_info(), git_state(".")["commit"]
    print(
        f"{host['cpus_usable']} cores ({host['cpu_model']}), {host['platform']}, "
        f"Python {host['python']}; aioenv at {commit}; "
        f"python benchmarks/choice.py --envs {n} --steps-us {args.steps_us}"
    )
    print(
        f"N={n} envs, {cores} cores; rule: HAND_OFF={_choice.HAND_OFF * 1e6:.0f} µs, "
        f"PER_CHILD={_choice.PER_CHILD * 1e6:.0f} µs, MARGIN={_choice.MARGIN}"
    )
    for micros in (float(text) for text in args.steps_us.split(",")):
        measured: dict[str, float] = {}
        for label, options in _placements(n, cores).items():
            with aioenv.AioVectorEnv([lambda m=micros: Burn(m)] * n, **options) as envs:
                measured[label] = _per_step(envs, n, args.seconds)
        probe = Probe({}, None, None, None, micros / 1e6)
        chosen = _choice.choose_mode("auto", probe, n, None, {}, cores)
        cells = []
        for label, seconds in measured.items():
            cell = f"{label} {seconds * 1e6:,.0f} µs"
            if label != "inline":
                per_worker = int(label.rsplit("x", 1)[1])
                cell += f" (+{(seconds - per_worker * micros / 1e6) * 1e6:,.0f})"
            cells.append(cell)
        fastest = min(measured, key=measured.__getitem__)
        print(f"step {micros:>5.0f} µs: " + "; ".join(cells))
        print(f"    fastest: {fastest}; the rule chooses {chosen.mode} x {chosen.envs_per_worker}")


if __name__ == "__main__":
    main()

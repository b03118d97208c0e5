"""The examples run and do what they say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RANDOM_POLICY_RETURN = 22  # CartPole-v1's mean return under uniformly random actions


@pytest.mark.timeout(180)
def test_train_cartpole_learns_within_a_short_budget() -> None:
    # Seeded and independent of the order workers answer in: the same figures every run;
    # the time budget is only a safety net far above what six generations need.
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "train_cartpole.py"),
            "--max-iterations=6",
            "--max-seconds=120",
        ],
        capture_output=True,
        text=True,
        timeout=160,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    generations = re.findall(r"generation +(\d+): mean return +([\d.]+)", result.stdout)
    assert [int(number) for number, _ in generations] == list(range(1, 7)), result.stdout
    first, last = float(generations[0][1]), float(generations[-1][1])
    assert first < 2 * RANDOM_POLICY_RETURN, result.stdout  # it starts near random
    assert last > 4 * RANDOM_POLICY_RETURN, result.stdout  # and learns


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_ray_pool_example_mixes_ray_and_local_workers() -> None:
    # Its own Ray instance, in its own process: what a user running it gets.
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ray_pool.py"), "--steps=600"],
        capture_output=True,
        text=True,
        timeout=100,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled",
        },
    )
    assert result.returncode == 0, result.stderr
    assert "600 states in" in result.stdout
    per_worker = re.findall(r"worker \d+ \((\w+)\): (\d+) states", result.stdout)
    assert [kind for kind, _ in per_worker] == ["ray"] * 4 + ["process", "thread"]
    assert sum(int(count) for _, count in per_worker) == 600


@pytest.mark.timeout(120)
def test_grpo_groups_compares_first_ready_groups_with_lockstep_and_per_env_calls() -> None:
    # A small, sped-up run: the figures' shape, not their values (no speed is asserted).
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "grpo_groups.py"),
            "--envs=8",
            "--tasks=4",
            "--group-size=3",
            "--max-turns=5",
            "--time-scale=0.25",
        ],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    assert "4 tasks x 3 rollouts (12 rollouts" in result.stdout
    [order] = re.findall(r"groups out in the order they ended: ([\d ]+)\n", result.stdout)
    assert sorted(map(int, order.split())) == [0, 1, 2, 3]
    runs = re.findall(
        r"^(.+?): [\d.]+ s, ([\d.]+) steps/s, ([\d.]+) rollouts/s, policy server idle (\d+)%",
        result.stdout,
        re.MULTILINE,
    )
    assert [name for name, *_ in runs] == [
        "first-ready (aioenv.collect_groups)",
        "lockstep (every env waits for the slowest)",
        "one policy call per env",
    ], result.stdout
    for _, steps, rollouts, idle in runs:
        assert float(steps) > 0 and float(rollouts) > 0 and 0 <= int(idle) <= 100
    assert "incomplete" not in result.stdout

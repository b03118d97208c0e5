"""The ``aioenv`` command line, run as a user runs it: in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium
import numpy
import pytest

import aioenv

SCRIPT = Path(sys.executable).parent / "aioenv"  # the console script pyproject.toml installs


def run_cli(*arguments: str, timeout: float = 50) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aioenv", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_info_prints_versions_loop_kinds_and_support() -> None:
    result = run_cli("info")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"aioenv {aioenv.__version__}" in lines
    assert f"numpy {numpy.__version__}" in lines
    assert f"gymnasium {gymnasium.__version__}" in lines
    assert any(line.startswith(f"python {sys.version.split()[0]}") for line in lines)
    for name in ("anyio", "uvloop", "tqdm"):
        assert any(line.startswith(f"{name} ") for line in lines)
    assert "event loop (aioenv.run): uvloop.Loop" in lines
    assert "worker kinds: sync, thread, process, coroutine, ray" in lines
    assert any(line.startswith("ray: ") for line in lines)
    assert (
        "trio: importable (pools run under trio on a private asyncio loop: "
        "pip install 'aioenv[trio]')"
    ) in lines
    assert "process start method: forkserver" in lines
    assert "shared-memory observations: yes (memfd)" in lines


@pytest.mark.timeout(120)
def test_bench_json_has_every_mode_and_positive_rates() -> None:
    result = run_cli(
        "bench",
        "CartPole-v1",
        "--workers",
        "2",
        "--envs-per-process",
        "2",
        "--seconds",
        "0.2",
        "--json",
        timeout=100,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["env"] == "CartPole-v1" and report["workers"] == 2
    rates = report["steps_per_s"]
    expected = ["sync", "thread", "process", "coroutine"]
    assert list(rates) == [*expected, "gymnasium SyncVectorEnv", "gymnasium AsyncVectorEnv"]
    assert all(rate > 0 for rate in rates.values()), rates
    assert all(steps > 0 for steps in report["steps"].values())


@pytest.mark.timeout(120)
def test_bench_table_and_no_progress_bar_when_not_a_terminal() -> None:
    result = run_cli(
        "bench",
        "CartPole-v1",
        "--workers",
        "1",
        "--modes",
        "sync,async",
        "--seconds",
        "0.1",
        timeout=100,
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split()[:2] for line in result.stdout.splitlines()[2:]]
    assert [row[0] for row in rows] == ["aioenv", "aioenv", "gymnasium", "gymnasium"]
    assert result.stdout.splitlines()[-1].endswith("1.00x")  # AsyncVectorEnv is the reference
    assert "row/s" not in result.stderr and "%|" not in result.stderr  # tqdm stays quiet


def test_bench_rejects_an_unknown_mode() -> None:
    result = run_cli("bench", "CartPole-v1", "--modes", "sync,fiber")
    assert result.returncode == 2
    assert "unknown mode(s) fiber" in result.stderr


def test_console_script_is_installed() -> None:
    result = subprocess.run(
        [str(SCRIPT), "info"], capture_output=True, text=True, timeout=50, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"aioenv {aioenv.__version__}\n")

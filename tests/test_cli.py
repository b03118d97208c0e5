"""The ``aioenv`` command line, run as a user runs it: in a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium
import numpy
import pytest

import aioenv
from aioenv import _bench, _cli

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
    expected = ["sync", "thread", "process", "coroutine", "process grouped", "AioVectorEnv"]
    assert list(rates) == [*expected, "gymnasium SyncVectorEnv", "gymnasium AsyncVectorEnv"]
    assert all(rate > 0 for rate in rates.values()), rates
    assert all(steps > 0 for steps in report["steps"].values())
    assert report["recommendation"].startswith("for CartPole-v1 with 2 envs on this machine (")


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
    *table, advice = result.stdout.splitlines()[2:]
    labels = [line.rsplit(maxsplit=2)[0] for line in table]
    assert labels == [
        "aioenv sync",
        "aioenv coroutine",
        "aioenv process, 1 env per worker",
        "aioenv AioVectorEnv",
        "gymnasium SyncVectorEnv",
        "gymnasium AsyncVectorEnv",
    ]
    assert table[-1].endswith("1.00x")  # AsyncVectorEnv is the reference
    fastest_aioenv = max(table[:4], key=lambda line: float(line.split()[-2].replace(",", "")))
    assert advice.startswith("for CartPole-v1 with 1 envs on this machine (")
    assert f": use {fastest_aioenv.rsplit(maxsplit=2)[0]} (" in advice
    assert "row/s" not in result.stderr and "%|" not in result.stderr  # tqdm stays quiet


@pytest.mark.timeout(120)
def test_bench_measures_a_mode_named_twice_once() -> None:
    # "async" is "coroutine"'s old spelling: the same row, measured and printed once.
    result = run_cli(
        "bench",
        "CartPole-v1",
        "--workers",
        "1",
        "--modes",
        "sync,async,coroutine,sync",
        "--seconds",
        "0.1",
        timeout=100,
    )
    assert result.returncode == 0, result.stderr
    labels = [line.rsplit(maxsplit=2)[0] for line in result.stdout.splitlines()[2:-1]]
    assert labels[:3] == ["aioenv sync", "aioenv coroutine", "aioenv process, 1 env per worker"]
    assert len(labels) == len(set(labels)) == 6, labels


@pytest.mark.timeout(120)
def test_bench_takes_a_module_id_whose_module_registers_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # registered_pkg (in tests/) registers Thing-v0 when imported; the CLI imports it first.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    result = run_cli(
        "bench",
        "registered_pkg:Thing-v0",
        "--workers",
        "2",
        "--modes",
        "sync,process",
        "--envs-per-process",
        "2",
        "--seconds",
        "0.1",
        "--json",
        timeout=100,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["env"] == "registered_pkg:Thing-v0"
    assert all(steps > 0 for steps in report["steps"].values()), report["steps"]
    assert set(report["steps"]) == {
        "sync",
        "process",
        "process grouped",
        "AioVectorEnv",
        "gymnasium SyncVectorEnv",
        "gymnasium AsyncVectorEnv",
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("space", ["Sequence", "custom"])
def test_bench_measures_an_env_whose_observations_shared_memory_cannot_hold(
    space: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gymnasium's AsyncVectorEnv(shared_memory=True) refuses these spaces: the row steps
    # them without shared memory, and the bench prints its table as for any other env.
    (tmp_path / "echo_ids.py").write_text(
        "import gymnasium\n"
        f"gymnasium.register('Echo-v0', entry_point='space_envs:echo', kwargs={{'space': {space!r}}})\n"
    )
    tests = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests, str(tmp_path), *sys.path]))
    result = run_cli(
        "bench",
        "echo_ids:Echo-v0",
        "--workers",
        "2",
        "--modes",
        "sync",
        "--seconds",
        "0.1",
        timeout=100,
    )
    assert result.returncode == 0, result.stderr
    *table, advice = result.stdout.splitlines()[2:]
    assert table[-1].startswith("gymnasium AsyncVectorEnv") and table[-1].endswith("1.00x")
    assert advice.startswith("for echo_ids:Echo-v0 with 2 envs on this machine (")


@pytest.mark.ray
@pytest.mark.timeout(120)
@pytest.mark.usefixtures("ray_local")
def test_bench_ray_row_steps_more_envs_than_the_cluster_has_cpus() -> None:
    """Ray reserves a CPU per actor by default, and the shared instance has 2: the row
    measures the hand-off on this machine, so each of its 4 actors starts and steps."""
    arguments = _cli._parser().parse_args(
        ["bench", "CartPole-v1", "--modes", "ray", "--workers", "4", "--seconds", "0.2"]
    )
    assert _bench.measure("ray", arguments).steps > 0


def test_bench_rejects_an_unknown_mode() -> None:
    result = run_cli("bench", "CartPole-v1", "--modes", "sync,fiber")
    assert result.returncode == 2
    assert "unknown mode(s) fiber" in result.stderr


def assert_one_line_error(result: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for part in parts:
        assert part in result.stderr


def test_bench_of_an_unknown_id_is_a_one_line_error() -> None:
    result = run_cli("bench", "NoSuchEnv-v0", "--seconds", "0.1")
    assert_one_line_error(result, "aioenv bench: error: unknown env id 'NoSuchEnv-v0'", "MODULE:ID")


@pytest.mark.parametrize("seconds", ["-1", "0", "nan", "soon"])
def test_bench_refuses_seconds_that_measure_nothing(seconds: str) -> None:
    result = run_cli("bench", "CartPole-v1", "--seconds", seconds)
    assert_one_line_error(result, f"--seconds: must be a number of seconds > 0, got {seconds}")


def test_bench_refuses_a_negative_seed_in_one_line() -> None:
    # numpy's seeds (the pools' and the action space's) are non-negative.
    result = run_cli("bench", "CartPole-v1", "--seed", "-1", "--seconds", "0.1")
    assert_one_line_error(result, "--seed: must be an int >= 0, got -1")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["bench", "CartPole-v1", "--modes", "fiber"], "unknown mode(s) fiber"),
        (["bench", "CartPole-v1", "--workers", "two"], "must be an int >= 1, got two"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_arguments_are_one_line_errors(arguments: list[str], message: str) -> None:
    assert_one_line_error(run_cli(*arguments), message)


def test_no_arguments_prints_the_help_and_exits_0() -> None:
    result = run_cli()
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: aioenv ")
    assert "info" in result.stdout and "bench" in result.stdout


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"aioenv {aioenv.__version__}\n"


@pytest.mark.parametrize("command", [[], ["info"], ["bench"]])
def test_help_is_plain_text(command: list[str]) -> None:
    result = run_cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    for markup in ("``", ":mod:", ":class:", ":func:"):
        assert markup not in result.stdout


def test_console_script_is_installed() -> None:
    result = subprocess.run(
        [str(SCRIPT), "info"], capture_output=True, text=True, timeout=50, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"aioenv {aioenv.__version__}\n")


def test_console_script_finds_a_module_id_in_the_current_directory(tmp_path: Path) -> None:
    # As python -m aioenv does: MODULE:ID imports MODULE from where the command runs.
    (tmp_path / "my_envs.py").write_text(
        "import gymnasium\n"
        "gymnasium.register('Mine-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv')\n"
    )
    result = subprocess.run(
        [str(SCRIPT), "info", "my_envs:Mine-v0", "--num-envs", "1"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},  # this aioenv
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("env: my_envs:Mine-v0\nobservation space: Box(")


def test_info_of_an_env_prints_its_spaces_step_time_and_the_default_mode() -> None:
    result = run_cli("info", "CartPole-v1", "--num-envs", "3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == [
        "env: CartPole-v1",
        f"observation space: {gymnasium.make('CartPole-v1').observation_space}",
        "action space: Discrete(2)",
    ]
    assert re.fullmatch(r"step time: \d+ µs \(median of the probe env's steps\)", lines[3])
    assert re.fullmatch(r"mode='auto' for 3 envs: (inline|process)", lines[4])
    assert lines[5].startswith("reason: auto (") and "3 in line ~" in lines[5]
    # N defaults to the number of CPUs
    default = run_cli("info", "CartPole-v1")
    assert default.returncode == 0, default.stderr
    assert f"mode='auto' for {os.cpu_count()} env" in default.stdout


def test_info_of_an_unknown_env_is_a_one_line_error() -> None:
    result = run_cli("info", "NoSuchEnv-v0")
    assert_one_line_error(result, "aioenv info: error: unknown env id 'NoSuchEnv-v0'", "MODULE:ID")
    assert_one_line_error(run_cli("info", "--num-envs", "2"), "--num-envs needs an ENV_ID")


def test_the_cli_guide_shows_the_commands_options_and_rows_the_cli_has() -> None:
    guide = (Path(__file__).parents[1] / "docs" / "guides" / "cli.md").read_text()
    synopses = re.findall(r"`(aioenv (info|bench|serve) [^`]*)`", guide)
    assert {command for _, command in synopses} == {"info", "bench", "serve"}
    assert "`aioenv info ENV_ID [--num-envs N]`" in guide
    for synopsis, command in synopses:
        usage = run_cli(command, "--help").stdout
        for option in re.findall(r"--[a-z-]+", synopsis):
            assert option in usage, (command, option)
    bench = _cli._parser().parse_args(["bench", "CartPole-v1"])
    assert f"[--modes {','.join(bench.modes)}]" in " ".join(guide.split())
    table = guide[guide.index("```text\naioenv bench CartPole-v1") :]
    table = table[: table.index("```", 3)]
    labels = [line[:34].rstrip() for line in table.splitlines()[3:-1]]
    rows = [*bench.modes, _bench.GROUPED_ROW, _bench.VECTOR_ROW, *_bench.GYMNASIUM_ROWS]
    assert labels == [_bench.row_label(row, bench.workers) for row in rows]

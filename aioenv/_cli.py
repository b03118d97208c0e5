"""The ``aioenv`` command line (also ``python -m aioenv``).

``aioenv info``: versions, the event loop ``aioenv.run`` uses, the worker kinds, the process
start method and shared-memory support. ``aioenv bench ENV_ID``: steps/s per worker mode
next to gymnasium's vector envs on the same env (see :mod:`aioenv._bench`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import importlib.util
import json
import platform
import sys
from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

from . import _shared_memory
from ._bench import GYMNASIUM_ROWS, Measurement, measure_gymnasium, measure_pool
from ._factory import canonical_mode, worker_modes
from ._loop import run
from .workers import default_context

__all__ = ["main"]

_PACKAGES = ("aioenv", "numpy", "gymnasium", "anyio", "uvloop", "cloudpickle", "tqdm")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    arguments = _parser().parse_args(argv)
    if arguments.command == "info":
        print("\n".join(info_lines()))
        return 0
    return _bench(arguments)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aioenv", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="versions, event loop, worker kinds, start method")
    bench = commands.add_parser(
        "bench", help="steps/s per worker mode next to gymnasium's vector envs"
    )
    bench.add_argument("env_id", metavar="ENV_ID", help="a gymnasium id, e.g. CartPole-v1")
    bench.add_argument("--workers", type=_positive, default=4, help="envs (default 4)")
    bench.add_argument(
        "--modes",
        type=_modes,
        default=["sync", "thread", "process", "coroutine"],
        help="comma-separated worker modes (default sync,thread,process,coroutine)",
    )
    bench.add_argument(
        "--envs-per-process",
        type=_positive,
        default=1,
        help="envs per child process in the process mode (default 1)",
    )
    bench.add_argument(
        "--seconds", type=float, default=8.0, help="measured seconds per row (default 8)"
    )
    bench.add_argument("--seed", type=int, default=0, help="envs' and actions' seed (default 0)")
    bench.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, got {text}")
    return value


def _modes(text: str) -> list[str]:
    modes = [canonical_mode(mode.strip()) for mode in text.split(",") if mode.strip()]
    unknown = [mode for mode in modes if mode not in worker_modes()]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(
            f"unknown mode(s) {', '.join(unknown) or '(none given)'}; choose among "
            + ",".join(worker_modes())
        )
    return modes


# info ------------------------------------------------------------------------------------
def info_lines() -> list[str]:
    """What ``aioenv info`` prints, one line each."""
    lines = [f"{name} {_version(name)}" for name in _PACKAGES]
    lines.insert(1, f"python {platform.python_version()} ({platform.python_implementation()})")
    lines.append(f"event loop (aioenv.run): {run(_loop_name())}")
    lines.append(f"worker kinds: {', '.join(worker_modes())}")
    for module, note in (
        ("ray", "mode='ray' needs it: pip install 'aioenv[ray]'"),
        ("trio", "pools run under trio on a private asyncio loop: pip install 'aioenv[trio]'"),
    ):
        found = importlib.util.find_spec(module) is not None
        lines.append(f"{module}: {'importable' if found else 'not installed'} ({note})")
    lines.append(f"process start method: {default_context().get_start_method()}")
    shared = "yes (memfd)" if _shared_memory.available() else "no (needs memfd_create, Linux)"
    lines.append(f"shared-memory observations: {shared}")
    return lines


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


async def _loop_name() -> str:
    loop = type(asyncio.get_running_loop())
    return f"{loop.__module__}.{loop.__qualname__}"


# bench -----------------------------------------------------------------------------------
def _bench(arguments: argparse.Namespace) -> int:
    rows: list[str] = [*arguments.modes, *GYMNASIUM_ROWS]
    results: list[Measurement] = []
    quiet = arguments.json or not sys.stdout.isatty()
    with tqdm(total=len(rows), unit="row", disable=quiet, leave=False) as progress:
        for row in rows:
            progress.set_description(row)
            results.append(_measure(row, arguments))
            progress.update()
    if arguments.json:
        print(json.dumps(_report(arguments, results), indent=2))
    else:
        print("\n".join(_table(arguments, results)))
    return 0


def _measure(row: str, arguments: argparse.Namespace) -> Measurement:
    if row in GYMNASIUM_ROWS:
        return measure_gymnasium(
            row, arguments.env_id, arguments.workers, arguments.seconds, arguments.seed
        )
    return measure_pool(
        arguments.env_id,
        arguments.workers,
        row,
        arguments.seconds,
        arguments.envs_per_process,
        arguments.seed,
    )


def _report(arguments: argparse.Namespace, results: list[Measurement]) -> dict[str, Any]:
    return {
        "env": arguments.env_id,
        "workers": arguments.workers,
        "envs_per_process": arguments.envs_per_process,
        "seconds": arguments.seconds,
        "seed": arguments.seed,
        "steps_per_s": {result.label: result.steps_per_s for result in results},
        "steps": {result.label: result.steps for result in results},
    }


def _table(arguments: argparse.Namespace, results: list[Measurement]) -> list[str]:
    reference = results[-1].steps_per_s  # gymnasium's AsyncVectorEnv
    lines = [
        f"aioenv bench {arguments.env_id}: {arguments.workers} envs, "
        f"{arguments.seconds:g} s per row (process mode: {arguments.envs_per_process} "
        "env(s) per process)",
        f"{'row':<28}{'steps/s':>12}{'vs AsyncVectorEnv':>20}",
    ]
    for result in results:
        label = result.label if result.label in GYMNASIUM_ROWS else f"aioenv {result.label}"
        ratio = f"{result.steps_per_s / reference:.2f}x" if reference > 0 else "-"
        lines.append(f"{label:<28}{result.steps_per_s:>12,.0f}{ratio:>20}")
    return lines

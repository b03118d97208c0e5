"""The ``aioenv`` command line (also ``python -m aioenv``).

``aioenv info``: versions, the event loop ``aioenv.run`` uses, the worker kinds, the process
start method and shared-memory support; ``aioenv info ENV_ID``: the env's spaces, its step
time and the mode ``AioVectorEnv``'s default would choose for it. ``aioenv bench ENV_ID``:
steps/s per worker mode next to gymnasium's vector envs on the same env (see
:mod:`aioenv._bench`). With no command it prints its help and exits 0, as pip does; a bad
argument or an unknown env id is one line on stderr and exit status 2, argparse's
convention.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import gymnasium

from . import __version__
from ._bench import bench
from .core._gymnasium import resolve_spec
from .loops import run
from .pool._factory import canonical_mode, worker_modes
from .vector._choice import AUTO, auto_choice
from .wire import _shared_memory
from .workers import default_context

__all__ = ["main"]

N = TypeVar("N", int, float)

_PACKAGES = ("aioenv", "numpy", "gymnasium", "anyio", "uvloop", "cloudpickle", "tqdm")
_DESCRIPTION = (
    "aioenv: an asyncio-native environment worker pool for reinforcement learning. "
    "Commands: info (what this installation runs on), bench (which worker mode suits an env), "
    "serve (an env server speaking OpenEnv's protocol)."
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser with a one-line error: the problem and where to read more."""

    def error(self, message: str) -> NoReturn:
        _fail(self.prog, message)


def _fail(prog: str, message: str) -> NoReturn:
    sys.stderr.write(f"{prog}: error: {message} (see {prog} --help)\n")
    raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = _parser()
    arguments = parser.parse_args(argv)
    if arguments.command is None:
        parser.print_help()
        return 0
    if os.getcwd() not in sys.path:  # as python -m: MODULE:ID's MODULE found where it runs
        sys.path.insert(0, os.getcwd())
    if arguments.command == "info":
        if arguments.env_id is None:
            if arguments.num_envs is not None:
                _fail("aioenv info", "--num-envs needs an ENV_ID")
            print("\n".join(info_lines()))
            return 0
        _check_env_id("aioenv info", arguments.env_id)
        num_envs = arguments.num_envs or os.cpu_count() or 1
        print("\n".join(env_info_lines(arguments.env_id, num_envs)))
        return 0
    if arguments.command == "serve":
        return _serve(arguments)
    _check_env_id("aioenv bench", arguments.env_id)
    return bench(arguments)


def _check_env_id(prog: str, env_id: str) -> None:
    """A one-line error and exit status 2 for an env id that cannot be looked up."""
    try:
        resolve_spec(env_id)
    except (gymnasium.error.Error, ImportError) as exc:
        _fail(
            prog,
            f"unknown env id {env_id!r} ({exc}): register it first, or pass "
            "MODULE:ID to import the module that registers it",
        )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="aioenv", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"aioenv {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = commands.add_parser(
        "info",
        help="versions, event loop, worker kinds, start method; an env's spaces and mode",
        description="Versions, the event loop aioenv.run uses, the worker kinds, the "
        "process start method and shared-memory support. With ENV_ID: the env's "
        "observation and action spaces, its measured step time, and the mode "
        "AioVectorEnv's default (mode='auto') would choose for N envs, with its reason.",
    )
    _add_env_id(info, nargs="?")
    info.add_argument(
        "--num-envs",
        type=_positive,
        default=None,
        metavar="N",
        help="envs to choose the mode for (default: the number of CPUs, os.cpu_count())",
    )
    bench = commands.add_parser(
        "bench",
        help="steps/s per worker mode next to gymnasium's vector envs",
        description="Steps/s of one gymnasium env under each worker mode, grouped process "
        "workers and AioVectorEnv, then under gymnasium's SyncVectorEnv and AsyncVectorEnv, "
        "with a recommendation for this env on this machine.",
    )
    _add_env_id(bench)
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
        "--seconds",
        type=_positive_seconds,
        default=8.0,
        help="measured seconds per row (default 8)",
    )
    bench.add_argument("--seed", type=_seed, default=0, help="envs' and actions' seed (default 0)")
    bench.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_serve(commands)
    return parser


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="an env server speaking OpenEnv's protocol (pip install 'aioenv[serve]')",
        description="Serve an env over OpenEnv's protocol: a WebSocket session per client at "
        "/ws (its own worker), and stateless HTTP /reset, /step, /state. Stops on Ctrl-C or "
        "SIGTERM, closing every worker.",
    )
    _add_env_id(serve, nargs="?")
    serve.add_argument(
        "--factory",
        metavar="MODULE:FUNCTION",
        help="build each session's env by calling FUNCTION of MODULE (instead of ENV_ID)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="port (default 8000)")
    serve.add_argument(
        "--max-sessions",
        type=_positive,
        default=8,
        help="sessions served at once; one more is refused (default 8)",
    )
    serve.add_argument(
        "--mode",
        type=_mode,
        default="process",
        help="worker mode of each session's env (default process)",
    )
    serve.add_argument(
        "--idle-timeout",
        type=_positive_seconds,
        default=300.0,
        help="seconds a session may stay silent before it is closed (default 300)",
    )
    serve.add_argument(
        "--keepalive",
        type=_positive_seconds,
        default=argparse.SUPPRESS,  # ServeOptions' default
        help="seconds between pings of each client, and the most a pong may take: a client "
        "whose link is cut is dropped within twice this (default 20)",
    )
    for phase in ("step", "reset", "start"):
        serve.add_argument(
            f"--{phase}-timeout",
            type=_positive_seconds,
            default=None,
            help=f"the pool's {phase}_timeout: seconds a {phase} may take (default none)",
        )
    serve.add_argument(
        "--cleanup-time",
        type=_positive_seconds,
        default=argparse.SUPPRESS,  # ServeOptions' default
        help="seconds a session's env gets to close when its client leaves (default 5)",
    )


def _add_env_id(parser: argparse.ArgumentParser, nargs: str | None = None) -> None:
    parser.add_argument(
        "env_id",
        metavar="ENV_ID",
        nargs=nargs,
        help="a gymnasium id, e.g. CartPole-v1 (MODULE:ID imports MODULE first)",
    )


def _checked(
    convert: Callable[[str], N], valid: Callable[[N], bool], wanted: str
) -> Callable[[str], N]:
    """An argparse type: the text converted where it is valid, else the error "must be
    WANTED, got TEXT"."""

    def parse(text: str) -> N:
        with contextlib.suppress(ValueError):
            value = convert(text)
            if valid(value):
                return value
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")

    return parse


_port = _checked(int, lambda value: 0 <= value <= 65535, "a port number 0-65535")
_positive = _checked(int, lambda value: value >= 1, "an int >= 1")
_seed = _checked(int, lambda value: value >= 0, "an int >= 0")  # as numpy seeds
# `value > 0` also refuses nan.
_positive_seconds = _checked(float, lambda value: value > 0, "a number of seconds > 0")


def _mode(text: str) -> str:
    mode = canonical_mode(text.strip())
    if mode not in worker_modes():
        raise argparse.ArgumentTypeError(
            f"unknown mode {text}; choose among {', '.join(worker_modes())}"
        )
    return mode


def _modes(text: str) -> list[str]:
    modes = list(dict.fromkeys(canonical_mode(m.strip()) for m in text.split(",") if m.strip()))
    unknown = [mode for mode in modes if mode not in worker_modes()]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(
            f"unknown mode(s) {', '.join(unknown) or '(none given)'}; choose among "
            + ",".join(worker_modes())
        )
    return modes


# serve -----------------------------------------------------------------------------------
def _serve(arguments: argparse.Namespace) -> int:
    prog = "aioenv serve"
    if (arguments.env_id is None) == (arguments.factory is None):
        _fail(prog, "give either ENV_ID or --factory MODULE:FUNCTION")
    try:
        from .serve import ServeOptions, serve
    except ImportError as exc:
        _fail(prog, f"{exc}; install the server's dependencies: pip install 'aioenv[serve]'")
    source: Any
    if arguments.factory is not None:
        source = _factory(prog, arguments.factory)
        name = arguments.factory
    else:
        _check_env_id(prog, arguments.env_id)
        source = name = arguments.env_id
    # The options are named as ServeOptions' fields (the ones not given keep its defaults).
    fields = {field.name for field in dataclasses.fields(ServeOptions)}
    given = {key: value for key, value in vars(arguments).items() if key in fields}
    serve(source, ServeOptions(name=name, **given), arguments.host, arguments.port)
    return 0


def _factory(prog: str, text: str) -> Any:
    module_name, _, function_name = text.partition(":")
    if not module_name or not function_name:
        _fail(prog, f"--factory takes MODULE:FUNCTION, got {text!r}")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        _fail(prog, f"cannot find the factory {text!r}: {exc}")
    if not callable(function):
        _fail(prog, f"the factory {text!r} is a {type(function).__name__}, not a callable")
    return function


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


def env_info_lines(env_id: str, num_envs: int) -> list[str]:
    """What ``aioenv info ENV_ID --num-envs N`` prints: the env's spaces, its step time
    and the mode ``AioVectorEnv(ENV_ID, N)`` would choose, as the vector env finds them
    (its probe env, built and timed in a child process, and the same rule)."""
    probe, choice = auto_choice(env_id, num_envs)
    step = probe.step_seconds
    if step is not None:
        timed = f"{step * 1e6:.0f} µs (median of the probe env's steps)"
    elif probe.is_async:
        timed = "not measured (the env's reset and step are async def)"
    else:
        timed = "not measured (the probe env could not be stepped)"
    lines = [f"env: {env_id}"]
    if probe.agents is not None:
        lines.append(f"agents: {', '.join(map(str, probe.agents))} (spaces below: one agent's)")
    mode = choice.mode if isinstance(choice.mode, str) else ", ".join(choice.mode)
    lines += [
        f"observation space: {probe.observation_space}",
        f"action space: {probe.action_space}",
        f"step time: {timed}",
        f"mode={AUTO!r} for {num_envs} env{'s' if num_envs != 1 else ''}: {mode}",
        f"reason: {choice.reason}",
    ]
    return lines


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


async def _loop_name() -> str:
    loop = type(asyncio.get_running_loop())
    return f"{loop.__module__}.{loop.__qualname__}"

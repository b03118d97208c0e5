from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import cloudpickle
import envs
import pytest
import ray_groups
import trio
import uvloop
from hypothesis import settings
from matrix import cover
from support import POOL_MODES, wait_until, worker_processes, worker_threads

from aioenv.engine._wake import WAKE_ENVIRONMENT

try:
    import ray  # noqa: F401 (only whether it imports)
except ImportError as exc:  # no wheel for this interpreter, or not installed
    RAY_MISSING: str | None = f"ray cannot be imported here ({exc}); pip install 'aioenv[ray]'"
else:
    RAY_MISSING = None
try:
    importlib.metadata.distribution("ray")
except importlib.metadata.PackageNotFoundError:
    RAY_INSTALLED = RAY_MISSING is None
else:
    RAY_INSTALLED = True  # even if it does not import: a broken install skips nothing

# Test envs travel to process workers by value, like envs defined in a user's __main__.
cloudpickle.register_pickle_by_value(envs)

# Property tests: "ci" (the default) keeps the suite quick on two cores; HYPOTHESIS_PROFILE=
# thorough searches longer (with pytest's --timeout=0). No deadline: a pool's first step
# starts processes. A failure prints the blob that replays it (@reproduce_failure).
settings.register_profile("ci", max_examples=60, deadline=None, print_blob=True)
settings.register_profile("thorough", max_examples=2000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_asyncio_loop_factories(config: Any, item: Any) -> Mapping[str, Callable[[], Any]]:
    """Every async test runs on the default asyncio loop and on uvloop; the pool tests
    (marked ``trio``, or over the ``mode`` fixture) on trio as well. A test marked ``anyio``
    runs once, on the backend its ``anyio_backend`` fixture names (see pytest_pyfunc_call)."""
    if item.get_closest_marker("anyio") is not None:
        return {"anyio": _idle_loop}
    factories = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    if item.get_closest_marker("trio") is not None or "mode" in item.fixturenames:
        factories["trio"] = _trio_run
    return factories


def _trio_run() -> asyncio.AbstractEventLoop:
    """The ``trio`` entry: pytest-asyncio still makes (and closes) this idle loop, but the
    test itself runs in ``trio.run`` (see pytest_pyfunc_call)."""
    return asyncio.new_event_loop()


def _idle_loop() -> asyncio.AbstractEventLoop:
    """The entry of a test marked ``anyio``: pytest-asyncio makes this loop, anyio's pytest
    plugin runs the test."""
    return asyncio.new_event_loop()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[None]:
    """A test whose ``[trio]`` id was chosen runs in ``trio.run``, not on pytest-asyncio's
    loop (whose runner wraps the test function: unwrapped here); a test marked ``anyio`` is
    unwrapped too, for anyio's pytest plugin, which runs only coroutine functions."""
    if pyfuncitem.get_closest_marker("anyio") is not None:
        pyfuncitem.obj = inspect.unwrap(pyfuncitem.obj)
        yield
        return
    callspec = getattr(pyfuncitem, "callspec", None)
    if callspec is not None and callspec.params.get("_asyncio_loop_factory") is _trio_run:
        test = inspect.unwrap(pyfuncitem.obj)

        def run_in_trio(**kwargs: Any) -> None:
            trio.run(functools.partial(test, **kwargs))

        pyfuncitem.obj = run_in_trio
    yield


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every test leaves no worker process (nor zombie) and no worker thread behind."""
    yield
    assert wait_until(lambda: not worker_processes()), f"leaked processes: {worker_processes()}"
    assert wait_until(lambda: not worker_threads()), f"leaked threads: {worker_threads()}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--matrix",
        choices=("cover", "full"),
        default=os.environ.get("AIOENV_TEST_MATRIX", "cover"),
        help="cover (make test): each test once, each of its parameters' values and each "
        "pair of values in its file at least once, tests marked `loops` on every event loop "
        "(see tests/matrix.py); full (make test-full): every case of every parametrization",
    )


@pytest.hookimpl(tryfirst=True)  # before ``-m`` picks the serial or the parallel part
def pytest_collection_modifyitems(config: Any, items: list[pytest.Item]) -> None:
    """``--matrix=cover`` deselects the cases :func:`matrix.cover` leaves out.

    Tests marked ``ray`` run beside the others, in the groups of :mod:`ray_groups` (each on
    one pytest-xdist worker, which starts one local Ray instance for it), collected first so
    that the scheduler hands each group to a worker of its own. They spend much of their
    time waiting on Ray's daemons, which the other workers' tests fill; on a busy machine a
    Ray actor can take tens of seconds to start, so a Ray test without a timeout of its own
    gets :data:`RAY_TEST_TIMEOUT`. Ray tests are skipped where ray cannot be imported, and
    only there."""
    if config.getoption("matrix") == "cover":
        kept = cover(items, lambda item: item.get_closest_marker("loops") is not None)
        if len(kept) < len(items):
            chosen = {id(item) for item in kept}
            config.hook.pytest_deselected(items=[i for i in items if id(i) not in chosen])
            items[:] = kept
    for item in items:
        if "ray" in item.keywords:
            ray_groups.check_named(item)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(RAY_TEST_TIMEOUT))
            if RAY_MISSING is not None:
                item.add_marker(pytest.mark.skip(reason=RAY_MISSING))
    items.sort(key=lambda item: ray_groups.group_of(item.nodeid) is None)  # stable


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    """``--dist loadgroup`` (the Makefile's) schedules by :mod:`ray_groups`."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return ray_groups.make_scheduler(config, log)


#: Seconds a Ray test may take (pytest-timeout) unless it says otherwise.
RAY_TEST_TIMEOUT = 180

#: Tests marked ``ray`` that were skipped in this session: (test id, reason).
_SKIPPED_RAY_TESTS: list[tuple[str, str]] = []


#: ``make test-extras`` sets this: the venv has every optional integration installed, so a
#: test or a module (``pytest.importorskip``) skipped there is an integration left untested.
EXTRAS_REQUIRED = os.environ.get("AIOENV_EXTRAS_REQUIRED") == "1"

#: What was skipped in an ``AIOENV_EXTRAS_REQUIRED`` session: (test or module id, reason).
_SKIPPED_WITH_EXTRAS: list[tuple[str, str]] = []


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if EXTRAS_REQUIRED and report.skipped:
        _SKIPPED_WITH_EXTRAS.append((report.nodeid, _skip_reason(report)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    if "ray" in report.keywords:
        _SKIPPED_RAY_TESTS.append((report.nodeid, _skip_reason(report)))
    if EXTRAS_REQUIRED:
        _SKIPPED_WITH_EXTRAS.append((report.nodeid, _skip_reason(report)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Where Ray is installed, every Ray test selected must run: a session in which one
    was skipped fails, so that a Ray that stopped importing (or any other skip) cannot
    leave the suite green with its Ray tests unrun. Tests left out on purpose (``-k``,
    ``-m``, ``--deselect``, a file not named) are deselected, not skipped."""
    skipped_what_must_run = (RAY_INSTALLED and _SKIPPED_RAY_TESTS) or _SKIPPED_WITH_EXTRAS
    if skipped_what_must_run and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if RAY_INSTALLED and _SKIPPED_RAY_TESTS:
        terminalreporter.section("Ray tests skipped where Ray is installed", red=True)
        for nodeid, reason in _SKIPPED_RAY_TESTS[:20]:
            terminalreporter.line(f"{nodeid}: {reason}")
        terminalreporter.line(
            f"{len(_SKIPPED_RAY_TESTS)} Ray test(s) skipped: the session fails (Ray is "
            "installed here, so every selected Ray test must run)"
        )
    if _SKIPPED_WITH_EXTRAS:
        terminalreporter.section("skipped with every extra installed", red=True)
        for nodeid, reason in _SKIPPED_WITH_EXTRAS[:20]:
            terminalreporter.line(f"{nodeid}: {reason}")
        terminalreporter.line(
            f"{len(_SKIPPED_WITH_EXTRAS)} test(s) or module(s) skipped under "
            "AIOENV_EXTRAS_REQUIRED=1: the session fails (make test-extras installs every "
            "integration, so each of their tests must run)"
        )


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """Ray is shut down at the end of a session that started it."""
    yield
    import ray_support

    ray_support.stop()


@pytest.fixture
def ray_local(ray_session: None) -> Iterator[None]:
    """The shared local Ray instance (started on first use); after the test, no actor of
    it is left alive (checked through Ray's state: its processes are Ray's, not ours)."""
    import ray_support

    ray_support.start()
    yield
    assert wait_until(lambda: not ray_support.live_actors()), (
        f"leaked actors: {ray_support.live_actors()}"
    )


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[str]:
    """A file path that ``envs.Gated`` waits for; opened at teardown so nothing hangs."""
    path = str(tmp_path / "gate")
    yield path
    envs.open_gate(path)


@pytest.fixture(params=list(POOL_MODES))
def mode(request: pytest.FixtureRequest) -> Any:
    """Each pool configuration in turn: sync, thread, process, async, and two mixes."""
    return POOL_MODES[request.param]


@pytest.fixture(params=["eventfd", "pipe"])
def wake_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test on both of the engine's counters: the kernel's eventfd, and the pipe it
    falls back to."""
    if request.param == "eventfd" and not hasattr(os, "eventfd"):
        pytest.skip("no eventfd on this platform: the pipe case covers it")
    if request.param == "pipe":
        monkeypatch.setenv(WAKE_ENVIRONMENT, "pipe")
    else:
        monkeypatch.delenv(WAKE_ENVIRONMENT, raising=False)
    return str(request.param)

"""A pytest plugin for the mutation check's coverage run (``-p contexts``): each test's
setup, call and teardown are measured under a coverage context named by the test's node
id (parameters included), so the lines a test reaches can be told apart per test; and
each test's time (its three phases) is written, as JSON, to ``$MUTATION_DURATIONS``.

Only the pytest process is measured: code that runs only in a child process (a process
worker's env side) reaches no test here (see run.py's ``fallback_tests``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import coverage
import pytest

_durations: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(item.nodeid)
    yield
    if cov is not None:
        cov.switch_context("")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("MUTATION_DURATIONS")
    if path:
        with open(path, "w") as out:
            json.dump(_durations, out)

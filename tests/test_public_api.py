"""aioenv's public face: every public name presents itself as ``aioenv.Name``, its
docstrings point at public names only, and the API reference documents it."""

from __future__ import annotations

import inspect
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

import aioenv

ROOT = Path(__file__).resolve().parents[1]


def _is_definition(value: Any) -> bool:
    """A class or a function (a generic alias such as ``Callable[...]`` passes
    ``inspect.isclass`` on Python 3.10, but is neither)."""
    return issubclass(type(value), type) or inspect.isfunction(value)


DEFINITIONS = [name for name in aioenv.__all__ if _is_definition(getattr(aioenv, name))]


def test_the_public_classes_and_functions_are_most_names() -> None:
    # Only constants and type aliases fall outside: a name added as something else must
    # be looked at here.
    others = sorted(set(aioenv.__all__) - set(DEFINITIONS))
    assert others == ["CLOSE", "EnvSource", "Policy", "RESET", "__version__"]


@pytest.mark.parametrize("name", DEFINITIONS)
def test_a_public_name_presents_itself_as_aioenv(name: str) -> None:
    value = getattr(aioenv, name)
    assert value.__module__ == "aioenv"
    assert value.__qualname__ == name
    assert pickle.loads(pickle.dumps(value)) is value  # found again where it says it lives


def test_an_error_pickles_through_its_public_name() -> None:
    error = aioenv.UnknownWorker("worker 3 is not in this pool of 2 workers")
    data = pickle.dumps(error)
    assert b"aioenv._" not in data
    copy = pickle.loads(data)
    assert type(copy) is aioenv.UnknownWorker and str(copy) == str(error)


def _public_docstrings() -> list[tuple[str, str]]:
    """(where, docstring) of every public name and of its public members, inherited ones
    included, as a user reads them with help() or in the API reference."""
    found: list[tuple[str, str]] = []
    for name in DEFINITIONS:
        value: Any = getattr(aioenv, name)
        found.append((name, value.__doc__ or ""))
        if not inspect.isclass(value):
            continue
        for member, attribute in inspect.getmembers(value):
            if member.startswith("_") and member not in ("__init__", "__aenter__"):
                continue
            function = attribute.fget if isinstance(attribute, property) else attribute
            if getattr(function, "__module__", "").startswith("aioenv"):
                found.append((f"{name}.{member}", function.__doc__ or ""))
    return found


def test_public_docstrings_point_at_public_names_only() -> None:
    private = {
        where: re.findall(r"aioenv\.(?:workers\.)?_\w+", text)
        for where, text in _public_docstrings()
        if re.search(r"aioenv\.(?:workers\.)?_(?!_version__)\w+", text)
    }
    assert private == {}


def test_the_event_loop_package_publishes_nothing_but_aioenv_run() -> None:
    # Its modules (how pools meet event loops, trio's bridge among them) are private.
    import aioenv.loops

    assert aioenv.loops.__all__ == ["run"]
    assert aioenv.loops.run is aioenv.run


def test_every_public_name_is_in_the_api_reference() -> None:
    reference = (ROOT / "docs" / "reference.md").read_text()
    documented = set(re.findall(r"^\.\. auto\w+:: aioenv\.(\w+)$", reference, re.M))
    assert set(aioenv.__all__) - documented == set()
    assert documented - set(aioenv.__all__) == set()

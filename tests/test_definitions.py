"""One definition of each thing: each option's default is written in one place, which
every signature reads; each request kind has one name and one number, which the process
child's frames, the serving slots and Ray's messages share.

Read partly from the source, as ``tests/test_layers.py`` reads the floors: a default
written again as a literal would agree today and drift tomorrow, so it is the writing
that is checked, besides the values.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import cloudpickle
from envs import Counter

import aioenv
from aioenv.core._docs import documented_with, option_docs
from aioenv.core._messages import ControlRequest, EpisodeOptions
from aioenv.core._registry import snapshot
from aioenv.core._supervision import Supervision
from aioenv.env_side._serving import Slots
from aioenv.pool._options import PoolOptions
from aioenv.wire._frames import FrameDecoder, encode, encode_action
from aioenv.wire._pickles import dumps, loads
from aioenv.wire._requests import Request
from aioenv.workers.ray._worker import RayWorker

PACKAGE = Path(aioenv.__file__).parent
SUPERVISION_OPTIONS = frozenset(field.name for field in dataclasses.fields(Supervision))
#: Worker options that are no supervision option but stand in more than one signature.
WORKER_OPTIONS = frozenset({"idle_spin", "threads_per_env"})
#: The worker kinds, and the base class whose signature they share.
WORKER_KINDS = (
    aioenv.Worker,
    aioenv.SyncWorker,
    aioenv.ThreadWorker,
    aioenv.AsyncEnvWorker,
    aioenv.ProcessWorker,
    RayWorker,
)


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def _defaults(tree: ast.Module) -> list[tuple[str, str, ast.expr]]:
    """``(where, option, default expression)`` wherever options are taken: every
    parameter with a default of a constructor, every field with a default of an options
    class (``*Options``, ``Supervision``). (A method's parameter of an option's name, as
    ``aclose(cleanup_time=None)``, overrides the option for one call: no default of it.)"""
    found: list[tuple[str, str, ast.expr]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                args = item.args
                positional = [*args.posonlyargs, *args.args]
                given = positional[len(positional) - len(args.defaults) :]
                pairs = list(zip(given, args.defaults, strict=True))
                pairs += [
                    (arg, default)
                    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                    if default is not None
                ]
                found += [(node.name, arg.arg, default) for arg, default in pairs]
            elif (
                (node.name.endswith("Options") or node.name == "Supervision")
                and isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)
                and item.value is not None
            ):
                found.append((node.name, item.target.id, item.value))
    return found


def _literal(expression: ast.expr) -> bool:
    if isinstance(expression, ast.UnaryOp):
        expression = expression.operand
    return isinstance(expression, ast.Constant)


def test_each_option_default_is_written_once() -> None:
    written: dict[str, list[str]] = {}
    for path, tree in _modules():
        for where, option, default in _defaults(tree):
            if option in SUPERVISION_OPTIONS | WORKER_OPTIONS and _literal(default):
                written.setdefault(option, []).append(f"{path}:{where}")
    again = {option: places for option, places in written.items() if len(places) > 1}
    assert not again, f"option defaults written in more than one place: {again}"
    assert written["cleanup_time"] == ["aioenv/core/_supervision.py:Supervision"]


def test_signatures_read_supervision_defaults_from_the_one_definition() -> None:
    """Outside :class:`Supervision`, a supervision option's default reads that same
    option of a defaults object (``SUPERVISION_DEFAULTS.step_timeout``), never a value."""
    astray: list[str] = []
    for path, tree in _modules():
        for where, option, default in _defaults(tree):
            if option not in SUPERVISION_OPTIONS or where == "Supervision":
                continue
            reads_it = (
                isinstance(default, ast.Attribute)
                and default.attr == option
                and isinstance(default.value, ast.Name)
                and default.value.id in {"SUPERVISION_DEFAULTS", "POOL_DEFAULTS"}
            )
            if not reads_it:
                astray.append(f"{path}:{where}: {option} = {ast.unparse(default)}")
    assert not astray, astray


def test_every_signature_shows_the_one_default() -> None:
    """What ``help()`` and the docs show: each kind's and each pool's default for each
    supervision option is the value :class:`Supervision` defines, and the pools' other
    options are :class:`PoolOptions`'s, which is made of Supervision, not a copy."""
    from aioenv.core._supervision import SUPERVISION_DEFAULTS
    from aioenv.pool._options import POOL_DEFAULTS

    assert issubclass(PoolOptions, Supervision) and issubclass(PoolOptions, EpisodeOptions)
    for kind in WORKER_KINDS:
        parameters = inspect.signature(kind).parameters
        shown = {name: parameters[name].default for name in SUPERVISION_OPTIONS & parameters.keys()}
        assert {"step_timeout", "episode_timeout"} <= shown.keys(), kind
        for name, default in shown.items():
            if default is not inspect.Parameter.empty:
                assert default == getattr(SUPERVISION_DEFAULTS, name), (kind, name)
    for pool in (aioenv.AsyncWorkerPool, aioenv.SyncWorkerPool):
        parameters = inspect.signature(pool).parameters
        for field in dataclasses.fields(PoolOptions):
            assert parameters[field.name].default == getattr(POOL_DEFAULTS, field.name)
    for name in SUPERVISION_OPTIONS:
        assert getattr(POOL_DEFAULTS, name) == getattr(SUPERVISION_DEFAULTS, name)
    assert SUPERVISION_DEFAULTS.cleanup_time == 5.0  # the documented default


#: Each option and the class whose docstring documents it, the one place its doc is written.
OPTION_DOCS_AT = {
    **{field.name: Supervision for field in dataclasses.fields(Supervision)},
    **{field.name: EpisodeOptions for field in dataclasses.fields(EpisodeOptions)},
    "check_actions": PoolOptions,
    "copy": PoolOptions,
}
#: What takes the options and shows their docs in ``help()`` and the API reference.
OPTION_TAKERS = (
    *WORKER_KINDS,
    aioenv.WorkerPool,
    aioenv.AsyncWorkerPool,
    aioenv.SyncWorkerPool,
    PoolOptions,
)


def test_each_option_doc_is_written_once_where_the_option_is_defined() -> None:
    """Every docstring of aioenv as the source writes it (``__doc__`` may be added to): an
    option's entry is written once, in the class that defines the option, and never in
    a class that takes it. (A function that takes one to pass it on, as ``serve``, may
    say where it goes.)"""
    takers = {taker.__name__ for taker in OPTION_TAKERS}
    written: dict[str, list[str]] = {option: [] for option in OPTION_DOCS_AT}
    again: list[str] = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for option in re.findall(r":param (\w+):", ast.get_docstring(node) or ""):
                if option not in OPTION_DOCS_AT:
                    continue
                if node.name == OPTION_DOCS_AT[option].__name__:
                    written[option].append(f"{path}:{node.name}")
                elif node.name in takers:
                    again.append(f"{path}:{node.name}: {option}")
    assert not again, f"option docs written again where the option is taken: {again}"
    assert all(len(places) == 1 for places in written.values()), written


def test_every_taker_shows_the_one_doc_of_each_option_it_takes() -> None:
    """``help()`` and the API reference show, for every option a worker kind or a pool
    takes, the text of the class that defines it, word for word."""
    for taker in OPTION_TAKERS:
        shown = option_docs(taker)
        taken = inspect.signature(taker).parameters.keys() & OPTION_DOCS_AT.keys()
        assert taken, taker
        for option in taken:
            assert shown.get(option) == option_docs(OPTION_DOCS_AT[option])[option], (
                taker.__name__,
                option,
            )
    assert option_docs(aioenv.ProcessWorker)["seed"] == option_docs(aioenv.Worker)["seed"]
    # AioVectorEnv takes the pool options as keywords; autoreset and copy are gymnasium's.
    shown = option_docs(aioenv.AioVectorEnv)
    assert shown == {
        option: text
        for option, text in option_docs(PoolOptions).items()
        if option not in ("autoreset", "copy")
    }


def test_documented_with_adds_entries_to_the_same_field_list_and_keeps_literals_whole() -> None:
    long = "``a literal with spaces`` " + "x " * 40 + "``another literal``."

    class Owner:
        pass

    Owner.__doc__ = f"""Options.

        :param first: the first option, whose text runs on
            to a second line.
        :param second: {long}

        Prose after the entries.
        """

    @documented_with(Owner, ["second", "first"])
    class Taker:
        """Takes them.

        :param own: its own.
        """

    @documented_with(Owner, ["first"])
    def function() -> None:
        """Prose only."""

    assert option_docs(Owner) == {
        "first": "the first option, whose text runs on to a second line.",
        "second": long,
    }
    doc = Taker.__doc__ or ""
    assert list(option_docs(Taker)) == ["own", "second", "first"]
    assert option_docs(Taker)["second"] == option_docs(Owner)["second"]
    assert ":param own: its own.\n:param second:" in doc  # one field list
    assert "``a literal with spaces``" in doc and "``another literal``" in doc
    assert max(map(len, doc.splitlines())) <= 92
    assert function.__doc__ == "Prose only.\n\n:param first: " + option_docs(Owner)["first"]


def test_aioenv_imports_with_its_docstrings_stripped() -> None:
    """``python -OO`` drops every docstring, the options' entries among them: the classes
    that take them are left without, and everything imports as before."""
    code = (
        "import aioenv, aioenv.workers.ray._worker; "
        "assert aioenv.Worker.__doc__ is None and aioenv.WorkerPool.__doc__ is None"
    )
    subprocess.run([sys.executable, "-OO", "-c", code], check=True, timeout=120)


def test_request_kinds_have_one_name_and_number() -> None:
    """No two enums of the package name the same kind: a request is called and numbered
    by :class:`Request` alone."""
    members: dict[str, list[str]] = {}
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).endswith("IntEnum") for base in node.bases
            ):
                for item in node.body:
                    if isinstance(item, ast.Assign):
                        for target in item.targets:
                            if isinstance(target, ast.Name):
                                members.setdefault(target.id, []).append(f"{path}:{node.name}")
    again = {name: places for name, places in members.items() if len(places) > 1}
    assert not again, f"kinds named by more than one enum: {again}"
    assert issubclass(Request, enum.IntEnum)


def test_a_frames_kind_is_the_request_a_slot_serves() -> None:
    """The parent's frames carry the request's own number: the child hands a step or a
    control frame's kind to its slots as it came, and a Ray actor sends the same
    members."""
    slots = Slots([cloudpickle.dumps(Counter)], [3], EpisodeOptions(), snapshot(), None)
    try:
        slots.serve(0, Request.BUILD, None)
        frames = encode_action(1, aioenv.RESET, 0)
        frames += encode(Request.CONTROL, 2, dumps(ControlRequest("get", "limit")), 0)
        answers: list[Any] = [
            slots.serve(slot, kind, loads(payload))
            for kind, _, slot, payload in FrameDecoder().feed(frames)
        ]
        assert answers[0]["seed"] == 3 and answers[0]["t"] == 0  # the reset's state
        assert answers[1] == 5  # the env's attribute
    finally:
        slots.close()

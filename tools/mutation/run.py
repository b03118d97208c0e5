"""The mutation check of the rules users depend on (``make mutation``).

Each function named in ``functions.toml`` (by rule, fully qualified) is mutated a small
change at a time (a comparison flipped or moved by one, ``and``/``or`` swapped, a ``not``
removed or added, a constant changed, a return value replaced by None, a statement
removed), and each mutant is run against the tests that reach the function: a mutant is
killed when they fail (or time out), and survives when they pass.

Tests are selected per function by coverage: one run of the suite (with ``--pytest-args``)
under ``coverage`` records, per test (its pytest node id, parameters included), the lines
it reaches in the parent process; a function's tests are those that reached any of its
lines. Code that runs in a child process is not measured there: a rule's ``child_tests``
(which step its code in child processes) run after the mapped tests.
The map is cached under ``.mutation/`` by the pytest arguments and the sources' contents.

Every mutant runs in a copy of the working tree (one per job), with only the mutated file
changed, in a fresh ``python -m pytest`` (so the forkserver and the child processes it
starts import the mutant too). Before a function's mutants, its tests run once against
the function re-printed unmutated (the baseline): they must pass, and their time sets the
mutants' timeout.

Outputs (``--out``): ``results.json`` (every mutant: its id, function, change, status),
``summary.txt`` (per function: mutants, killed, survived) and ``survivors.diff``.
``run.py compare A/results.json B/results.json`` lists the mutants A kills and B does not
(say A the old suite, ``--pytest-args=--matrix=full``, and B ``make test``'s default).

Why not mutmut: mutmut 3.8.1 (its trampolines, its per-test selection, pytest run inside
forks of its own process) reported every mutant of ``episode_open`` killed within a
second, among them ``return False`` made ``return True``, which the same tests pass in a
plain pytest run: its forked runs fail here for reasons of their own.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import contextlib
import copy
import dataclasses
import difflib
import fnmatch
import hashlib
import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# A test that needs Ray says "ray" in its id: the suite's own rule (its collection checks it).
sys.path.insert(0, str(ROOT / "tests"))
from ray_groups import says_ray  # type: ignore[import-not-found]  # noqa: E402

CACHE = ROOT / ".mutation"

Function = ast.FunctionDef | ast.AsyncFunctionDef


# Finding the functions ----------------------------------------------------------------------
@dataclasses.dataclass
class Target:
    """A function to mutate: ``name`` (module.Class.function), its file and its node."""

    rule: str
    name: str
    path: Path
    source: str
    node: Function
    child_tests: list[str]

    @property
    def start(self) -> int:
        """The first line of the function (its first decorator's, if any)."""
        lines = [d.lineno for d in self.node.decorator_list]
        return min([self.node.lineno, *lines])

    @property
    def end(self) -> int:
        assert self.node.end_lineno is not None
        return self.node.end_lineno

    @property
    def body_lines(self) -> range:
        """The lines whose running shows a test reached the function (its body's)."""
        return range(self.node.body[0].lineno, self.end + 1)


def module_path(module: str) -> Path:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    raise LookupError(f"no module {module} under {ROOT}")


def find_target(rule: str, name: str, child_tests: list[str]) -> Target:
    """The function ``name``: the longest prefix that is a module, then classes and the
    function inside it."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            path = module_path(".".join(parts[:cut]))
        except LookupError:
            continue
        source = path.read_text()
        scope: list[ast.stmt] = ast.parse(source).body
        node: ast.stmt | None = None
        for part in parts[cut:]:
            node = next(
                (
                    n
                    for n in scope
                    if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                    and n.name == part
                ),
                None,
            )
            if node is None:
                break
            scope = node.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return Target(rule, name, path, source, node, child_tests)
        raise LookupError(f"{name} (rule {rule}): no such function in {path}")
    raise LookupError(f"{name} (rule {rule}): no module of that name")


def load_targets(config: Path, rules: list[str] | None, patterns: list[str] | None) -> list[Target]:
    data = tomllib.loads(config.read_text())
    targets: list[Target] = []
    for rule, entry in data["rules"].items():
        if rules and rule not in rules:
            continue
        child_tests = list(entry.get("child_tests", []))
        for name in entry["functions"]:
            if patterns and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            targets.append(find_target(rule, name, child_tests))
    return targets


# Making the mutants ---------------------------------------------------------------------------
_NEGATED: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
#: The boundary moved by one: ``<`` to ``<=`` and so on.
_BOUNDARY: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}
_OPERATORS: dict[type[ast.operator], type[ast.operator]] = {ast.Add: ast.Sub, ast.Sub: ast.Add}

#: A change to one node of a copy of the function, in place, or the node to put there.
Change = Callable[[ast.AST], "ast.AST | None"]


@dataclasses.dataclass
class Mutant:
    target: Target
    index: int  # the changed node's position in ast.walk of the function
    kind: str
    line: int
    change: Change
    text: str = ""  # the function re-printed with the change
    id: str = ""

    def describe(self) -> str:
        return f"{self.target.name}:{self.line} {self.kind}"


def _not_run(node: Function) -> set[int]:
    """The ids of the function's nodes that do not run as its code: annotations,
    decorators, docstrings and the parts of f-strings."""
    skip: set[int] = set()
    for sub in ast.walk(node):
        parts: list[ast.AST] = []
        if isinstance(sub, (ast.arg, ast.AnnAssign)) and sub.annotation is not None:
            parts.append(sub.annotation)
        elif isinstance(sub, ast.JoinedStr):
            parts.extend(sub.values)
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.returns:
            parts.append(sub.returns)
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            parts.extend(sub.decorator_list)
            if _docstring(sub.body):
                parts.append(sub.body[0])
        skip.update(id(n) for part in parts for n in ast.walk(part))
    return skip


def _docstring(body: list[ast.stmt]) -> bool:
    first = body[0] if body else None
    return (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )


def _set_op(index: int, new: type[ast.cmpop]) -> Change:
    def change(node: ast.AST) -> None:
        assert isinstance(node, ast.Compare)
        node.ops[index] = new()

    return change


def _changes(node: ast.AST, parent_compares: set[int]) -> Iterator[tuple[str, Change]]:
    """The mutations of one node: (what, the change)."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            name = type(op).__name__
            if type(op) in _NEGATED:
                new = _NEGATED[type(op)]
                yield f"{name} -> {new.__name__}", _set_op(i, new)
            if type(op) in _BOUNDARY:
                new = _BOUNDARY[type(op)]
                yield f"{name} -> {new.__name__}", _set_op(i, new)
    elif isinstance(node, ast.BoolOp):
        other = ast.Or if isinstance(node.op, ast.And) else ast.And

        def swap(n: ast.AST, other: type[ast.boolop] = other) -> None:
            assert isinstance(n, ast.BoolOp)
            n.op = other()

        yield f"{type(node.op).__name__} -> {other.__name__}", swap
        # each operand alone decides: `a and b` -> `a`, `b`
        for i in range(len(node.values)):

            def only(n: ast.AST, i: int = i) -> ast.AST:
                assert isinstance(n, ast.BoolOp)
                return n.values[i]

            yield f"{type(node.op).__name__}: operand {i + 1} alone", only
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):

        def drop_not(n: ast.AST) -> ast.AST:
            assert isinstance(n, ast.UnaryOp)
            return n.operand

        yield "not removed", drop_not
    elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _OPERATORS:
        new_op = _OPERATORS[type(node.op)]

        def arith(n: ast.AST, new_op: type[ast.operator] = new_op) -> None:
            assert isinstance(n, (ast.BinOp, ast.AugAssign))
            n.op = new_op()

        yield f"{type(node.op).__name__} -> {new_op.__name__}", arith
    elif isinstance(node, ast.Constant):
        yield from _constant_changes(node, id(node) in parent_compares)
    elif isinstance(node, ast.Return) and node.value is not None and not _falsy(node.value):

        def return_none(n: ast.AST) -> None:
            assert isinstance(n, ast.Return)
            n.value = ast.Constant(None)

        yield "return value -> None", return_none
    if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        test = node.test
        if not isinstance(test, ast.Compare) and not (
            isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        ):

            def negate(n: ast.AST) -> None:
                assert isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert))
                n.test = ast.UnaryOp(ast.Not(), n.test)

            yield "condition negated", negate


def _falsy(node: ast.expr | None) -> bool:
    """``node`` is None, False or missing: a ``return`` of it and one of None are alike
    where the result is read as a truth value, as they mostly are (mutants not made)."""
    if node is None:
        return True
    return isinstance(node, ast.Constant) and (node.value is None or node.value is False)


def _constant_changes(node: ast.Constant, compared: bool) -> Iterator[tuple[str, Change]]:
    value = node.value
    news: list[tuple[str, bool | int | float | str | None]] = []
    if isinstance(value, bool):
        news.append((f"{value} -> {not value}", not value))
    elif isinstance(value, int):
        news.append((f"{value} -> {value + 1}", value + 1))
        news.append((f"{value} -> 0", 0) if value != 0 else ("0 -> None", None))
    elif isinstance(value, float):
        news.append((f"{value} -> {value + 1}", value + 1.0))
        news.append((f"{value} -> 0.0", 0.0) if value != 0 else ("0.0 -> None", None))
    elif isinstance(value, str) and compared:
        news.append((f"{value!r} -> 'XX{value}XX'", f"XX{value}XX"))
    for what, new in news:

        def set_value(n: ast.AST, new: bool | int | float | str | None = new) -> None:
            assert isinstance(n, ast.Constant)
            n.value = new

        yield f"constant {what}", set_value


def _statement_removals(node: ast.AST) -> Iterator[tuple[str, int, Change]]:
    """Each statement of each body of ``node`` replaced by ``pass``: (what, its position
    in the body's field, the change to ``node``)."""
    for field in ("body", "orelse", "finalbody"):
        body = getattr(node, field, None)
        if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
            continue
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Pass) or (i == 0 and _docstring(body)):
                continue
            last = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and i == len(body) - 1
            if last and isinstance(stmt, ast.Return) and _falsy(stmt.value):
                continue  # falls through to the same None (or as falsy a False)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue

            def remove(n: ast.AST, field: str = field, i: int = i) -> None:
                stmts = getattr(n, field)
                stmts[i] = ast.copy_location(ast.Pass(), stmts[i])

            yield (
                f"statement removed: {ast.unparse(stmt).splitlines()[0][:60]}",
                stmt.lineno,
                remove,
            )


def mutants_of(target: Target) -> list[Mutant]:
    node = target.node
    walk = list(ast.walk(node))
    skipped = _not_run(node)
    compared = {id(c) for n in walk if isinstance(n, ast.Compare) for c in [n.left, *n.comparators]}
    found: list[Mutant] = []
    for index, sub in enumerate(walk):
        if id(sub) in skipped:
            continue
        line = getattr(sub, "lineno", node.lineno)
        for what, change in _changes(sub, compared):
            found.append(Mutant(target, index, what, line, change))
        for what, stmt_line, change in _statement_removals(sub):
            found.append(Mutant(target, index, what, stmt_line, change))
    original = printed(node, node.col_offset)
    unique: dict[str, Mutant] = {}
    for mutant in found:
        text = apply(node, mutant)
        if text is None or text == original or text in unique:
            continue
        try:
            compile(spliced(target, text), str(target.path), "exec")
        except (SyntaxError, ValueError):
            continue
        mutant.text = text
        mutant.id = hashlib.sha1(f"{target.name}\n{text}".encode()).hexdigest()[:12]
        unique[text] = mutant
    return list(unique.values())


def apply(node: Function, mutant: Mutant) -> str | None:
    """The function with ``mutant``'s change, re-printed (None if that is not valid)."""
    tree = copy.deepcopy(node)
    walk = list(ast.walk(tree))
    sub = walk[mutant.index]
    replacement = mutant.change(sub)
    if replacement is not None:
        if sub is tree:
            return None
        parent = next(p for p in walk for c in ast.iter_child_nodes(p) if c is sub)
        for field, value in ast.iter_fields(parent):
            if value is sub:
                setattr(parent, field, replacement)
            elif isinstance(value, list):
                setattr(parent, field, [replacement if v is sub else v for v in value])
    ast.fix_missing_locations(tree)
    try:
        return printed(tree, node.col_offset)
    except ValueError:
        return None


def printed(node: Function, indent: int) -> str:
    """``node`` printed at ``indent`` columns: inside as many (dummy) classes, so that the
    lines of a multi-line string (a docstring) keep their exact text."""
    depth, extra = divmod(indent, 4)
    if extra:
        raise ValueError(f"{node.name} is indented by {indent} columns, not a multiple of 4")
    tree: ast.stmt = node
    for _ in range(depth):
        holder = ast.parse("class _:\n    pass").body[0]
        assert isinstance(holder, ast.ClassDef)
        holder.body = [tree]
        tree = holder
    lines = ast.unparse(tree).splitlines()
    start = " " * indent
    first = next(
        i
        for i, line in enumerate(lines)
        if line.startswith(start) and line[indent:].startswith(("@", "def ", "async def "))
    )
    return "\n".join(lines[first:])


def spliced(target: Target, text: str) -> str:
    """``target``'s file with the function's lines replaced by ``text`` (printed at the
    function's indentation)."""
    lines = target.source.splitlines(keepends=True)
    return "".join(lines[: target.start - 1]) + text + "\n" + "".join(lines[target.end :])


def diff(mutant: Mutant) -> str:
    target = mutant.target
    original = (printed(target.node, target.node.col_offset) + "\n").splitlines(keepends=True)
    changed = (mutant.text + "\n").splitlines(keepends=True)
    name = f"{mutant.target.name} ({mutant.id}: {mutant.kind}, line {mutant.line})"
    return "".join(difflib.unified_diff(original, changed, name, name, n=2))


# Which tests reach which function -----------------------------------------------------------
def tree_hash(pytest_args: list[str], tests: list[str]) -> str:
    digest = hashlib.sha1(json.dumps([pytest_args, tests]).encode())
    for folder in ("aioenv", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@dataclasses.dataclass
class TestMap:
    """Per file (relative to the root), per line, the tests that reached it; and each
    test's time in the coverage run."""

    lines: dict[str, dict[int, list[str]]]
    durations: dict[str, float]

    def tests_of(self, target: Target) -> list[str]:
        """The tests that reach ``target`` in the pytest process, the quickest first (so
        a mutant they kill is killed soon), Ray's last: the coverage run started one Ray
        instance for all of them, but each mutant's fresh pytest starts its own, which
        costs more than most tests take."""
        lines = self.lines.get(str(target.path.relative_to(ROOT)), {})
        reached: set[str] = set()
        for line in target.body_lines:
            reached.update(lines.get(line, ()))
        return sorted(reached, key=lambda t: (says_ray(t), self.durations.get(t, 0.0), t))

    def seconds(self, tests: list[str]) -> float:
        return sum(self.durations.get(t, 0.0) for t in tests)


def coverage_map(pytest_args: list[str], tests: list[str]) -> TestMap:
    """Which tests reach which lines of aioenv: from the cache, else from a run of the
    suite under coverage (as long as the suite takes, and a third more)."""
    key = tree_hash(pytest_args, tests)
    cached = CACHE / f"map-{key}.json"
    if cached.is_file():
        data = json.loads(cached.read_text())
        return TestMap(
            {f: {int(n): ts for n, ts in lines.items()} for f, lines in data["lines"].items()},
            data["durations"],
        )
    CACHE.mkdir(exist_ok=True)
    data_file = CACHE / f"coverage-{key}"
    rc = CACHE / "coveragerc"
    rc.write_text(f"[run]\nsource = {ROOT / 'aioenv'}\ndata_file = {data_file}\n")
    durations = CACHE / f"durations-{key}.json"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]),
        MUTATION_DURATIONS=str(durations),
    )
    command = [
        sys.executable,
        *("-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest"),
        *("-p", "contexts", "-p", "no:cacheprovider", "-q", *pytest_args, *tests),
    ]
    print(f"coverage run (which tests reach which lines): {shlex.join(command)}", flush=True)
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, check=False)
    print(f"  done in {time.monotonic() - started:.0f}s (pytest exit {result.returncode})")
    import coverage  # the mutation extra's

    covered = coverage.CoverageData(basename=str(data_file))
    covered.read()
    found: dict[str, dict[int, list[str]]] = {}
    for measured in covered.measured_files():
        name = str(Path(measured).resolve().relative_to(ROOT))
        by_line = covered.contexts_by_lineno(measured)
        found[name] = {n: sorted(c for c in cs if c) for n, cs in by_line.items()}
    times: dict[str, float] = json.loads(durations.read_text()) if durations.is_file() else {}
    cached.write_text(json.dumps({"lines": found, "durations": times}))
    return TestMap(found, times)


# Running the tests ----------------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    status: str  # killed, survived, timeout, error
    seconds: float
    returncode: int | None
    tail: str


class Workspace:
    """A copy of the working tree (the files git knows, and untracked ones it does not
    ignore) where one file at a time is mutated."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="aioenv-mutation-"))
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout.split(b"\0")
        for raw in listed:
            if not raw:
                continue
            name = raw.decode()
            source = ROOT / name
            if not source.is_file():  # deleted in the working tree
                continue
            dest = self.path / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)

    def run(
        self, target: Target, text: str, pytest_args: list[str], tests: list[str], timeout: float
    ) -> Outcome:
        """Run ``tests`` with ``target``'s function replaced by ``text``."""
        path = self.path / target.path.relative_to(ROOT)
        _drop_bytecode(path)
        path.write_text(spliced(target, text))
        try:
            return run_pytest(self.path, pytest_args, tests, timeout)
        finally:
            path.write_text(target.source)
            _drop_bytecode(path)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _drop_bytecode(path: Path) -> None:
    """A mutant can have the size of the last one and be written within the same second,
    which the bytecode cache's check would miss: its cached bytecode is dropped."""
    for cached in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        cached.unlink(missing_ok=True)


def run_pytest(where: Path, pytest_args: list[str], tests: list[str], timeout: float) -> Outcome:
    """Run ``tests`` (node ids) in the tree at ``where``, stopping at the first failure;
    the whole process group (pytest, its forkserver, its workers) is killed after
    ``timeout`` seconds, and after pytest ends."""
    args_file = where / ".mutation-tests"
    args_file.write_text("\n".join(tests) + "\n")
    command = [
        sys.executable,
        *("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header"),
        *pytest_args,
        f"@{args_file}",
    ]
    env = dict(os.environ, PYTHONPATH=str(where))
    started = time.monotonic()
    if _STOPPING.is_set():
        raise KeyboardInterrupt
    process = subprocess.Popen(
        command,
        cwd=where,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _RUNNING.add(process.pid)
    try:
        output, _ = process.communicate(timeout=timeout)
        status = {0: "survived", 1: "killed", 2: "killed", 3: "killed"}.get(
            process.returncode, "error"
        )
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        output, _ = process.communicate()
        status = "timeout"
    finally:
        _kill_group(process.pid)
        _RUNNING.discard(process.pid)
    tail = output.decode(errors="replace")[-3000:]
    return Outcome(status, time.monotonic() - started, process.returncode, tail)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


#: The process groups of the pytest runs going on (one per job).
_RUNNING: set[int] = set()
#: Set by a stop: no new run starts.
_STOPPING = threading.Event()


def _stop(signum: int, frame: object) -> None:
    """SIGTERM or Ctrl-C: the runs going on are killed (their threads then return) and
    the main thread unwinds, removing the workspaces."""
    _STOPPING.set()
    for pgid in list(_RUNNING):
        _kill_group(pgid)
    raise KeyboardInterrupt


# The run ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class FunctionReport:
    rule: str
    function: str
    tests: int
    reaching: int
    baseline_seconds: float | None = None
    baseline: str = "not run"
    mutants: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def count(self, *statuses: str) -> int:
        return sum(1 for m in self.mutants if m["status"] in statuses)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    compare = sub.add_parser("compare", help="mutants killed by run A and not by run B")
    compare.add_argument("a", type=Path)
    compare.add_argument("b", type=Path)
    parser.add_argument("--config", type=Path, default=HERE / "functions.toml")
    parser.add_argument("--rules", help="comma-separated rules (default: all)")
    parser.add_argument("--functions", help="comma-separated globs of function names")
    parser.add_argument(
        "--pytest-args",
        default="",
        help="pytest options for the coverage run and every mutant's run (say --matrix=full)",
    )
    parser.add_argument(
        "--tests",
        default="",
        help="test paths the coverage run covers (default: pytest's testpaths); a trial "
        "can narrow it",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "mutation-report")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once")
    parser.add_argument("--max-mutants", type=int, help="at most this many per function")
    parser.add_argument(
        "--mutants",
        help="comma-separated mutant ids (say the survivors of a run with --max-tests, "
        "again with every test that reaches them); their functions only",
    )
    parser.add_argument(
        "--timeout-factor",
        type=float,
        default=2.0,
        help="a mutant's timeout: this times its function's baseline, plus --timeout-extra",
    )
    parser.add_argument("--timeout-extra", type=float, default=45.0, help="seconds")
    parser.add_argument(
        "--max-tests",
        type=int,
        help="run at most this many of a function's tests (the quickest): a budget knob, "
        "which weakens the check; the report says where it cut",
    )
    parser.add_argument(
        "--every-case",
        action="store_true",
        help="run every case of each test that reaches a function (its id without its "
        "parameters), not only the cases the map saw reach it: with --pytest-args="
        "--matrix=full and the cover's map (--map-args=--matrix=cover), the whole "
        "matrix's cases of those tests",
    )
    parser.add_argument(
        "--map-args",
        help="pytest options of the coverage run that maps tests (default: --pytest-args)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="make the test map (a coverage run, unless cached), print each function's "
        "tests and their time, and stop",
    )
    args = parser.parse_args(argv)
    if args.command == "compare":
        return compare_runs(args.a, args.b)

    targets = load_targets(
        args.config,
        args.rules.split(",") if args.rules else None,
        args.functions.split(",") if args.functions else None,
    )
    if not targets:
        parser.error("no function selected")
    mutants = {t.name: mutants_of(t) for t in targets}
    if args.max_mutants is not None:
        mutants = {name: ms[: args.max_mutants] for name, ms in mutants.items()}
    if args.mutants:
        wanted = set(args.mutants.split(","))
        mutants = {name: [m for m in ms if m.id in wanted] for name, ms in mutants.items()}
        unknown = wanted - {m.id for ms in mutants.values() for m in ms}
        if unknown:
            parser.error(f"no such mutant: {', '.join(sorted(unknown))}")
        mutants = {name: ms for name, ms in mutants.items() if ms}
        targets = [t for t in targets if t.name in mutants]
    if args.list:
        for name, ms in mutants.items():
            print(f"{name}: {len(ms)} mutants")
            for m in ms:
                print(f"  {m.id} line {m.line}: {m.kind}")
        return 0

    pytest_args, tests = shlex.split(args.pytest_args), shlex.split(args.tests)
    arguments = shlex.join(sys.argv[1:] if argv is None else argv)
    map_args = pytest_args if args.map_args is None else shlex.split(args.map_args)
    test_map = coverage_map(map_args, tests)
    if args.estimate:
        return estimate(targets, mutants, test_map, args.max_tests)
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    reports: list[FunctionReport] = []
    workspaces: queue.Queue[Workspace] = queue.Queue()
    for _ in range(max(1, args.jobs)):
        workspaces.put(Workspace())
    started = time.monotonic()
    try:
        for target in targets:
            report = run_function(
                target, mutants[target.name], test_map, pytest_args, args, workspaces
            )
            reports.append(report)
            write_reports(args.out, reports, arguments, time.monotonic() - started)
    finally:
        while not workspaces.empty():
            workspaces.get().remove()
    print((args.out / "summary.txt").read_text())
    return 0


def run_function(
    target: Target,
    mutants: list[Mutant],
    test_map: TestMap,
    pytest_args: list[str],
    args: argparse.Namespace,
    workspaces: queue.Queue[Workspace],
) -> FunctionReport:
    reaching = test_map.tests_of(target)
    if args.every_case:
        reaching = list(dict.fromkeys(test.partition("[")[0] for test in reaching))
    tests = reaching[: args.max_tests] if args.max_tests else reaching
    # Never cut by --max-tests: the map cannot see what they reach.
    tests += [test for test in target.child_tests if test not in tests]
    report = FunctionReport(target.rule, target.name, len(tests), len(reaching))
    print(
        f"\n{target.name}: {len(mutants)} mutants, {len(reaching)} tests reach it"
        + (f", the {len(tests)} quickest run" if len(tests) < len(reaching) else ""),
        flush=True,
    )
    if not tests:
        report.baseline = "no test reaches it"
        return report
    # The baseline: the function re-printed, unchanged (which also checks the re-printing).
    workspace = workspaces.get()
    try:
        outcome = workspace.run(
            target, printed(target.node, target.node.col_offset), pytest_args, tests, 3600.0
        )
    finally:
        workspaces.put(workspace)
    report.baseline_seconds = round(outcome.seconds, 1)
    if outcome.status != "survived":
        report.baseline = f"failed ({outcome.status}, exit {outcome.returncode})"
        print(f"  baseline failed, mutants not run:\n{outcome.tail}", flush=True)
        return report
    report.baseline = "passed"
    timeout = args.timeout_factor * outcome.seconds + args.timeout_extra
    print(f"  baseline passed in {outcome.seconds:.0f}s; timeout {timeout:.0f}s", flush=True)

    def one(mutant: Mutant) -> dict[str, Any]:
        workspace = workspaces.get()
        try:
            result = workspace.run(target, mutant.text, pytest_args, tests, timeout)
        finally:
            workspaces.put(workspace)
        print(f"  {result.status:8} {result.seconds:6.1f}s  {mutant.describe()}", flush=True)
        entry = {
            "id": mutant.id,
            "rule": target.rule,
            "function": target.name,
            "line": mutant.line,
            "change": mutant.kind,
            "status": result.status,
            "seconds": round(result.seconds, 1),
            "diff": diff(mutant),
        }
        if result.status == "error":
            entry["output"] = result.tail
        return entry

    pool = concurrent.futures.ThreadPoolExecutor(max(1, args.jobs))
    try:
        report.mutants = list(pool.map(one, mutants))
    finally:
        pool.shutdown(cancel_futures=True)
    return report


def estimate(
    targets: list[Target],
    mutants: dict[str, list[Mutant]],
    test_map: TestMap,
    max_tests: int | None,
) -> int:
    """Each function's mutants and tests, and the time its tests took in the coverage run
    (a surviving mutant costs that and pytest's start; a killed one, much less)."""
    print(f"{'function':60} {'mutants':>7} {'tests':>6} {'test s':>7}")
    for target in targets:
        tests = test_map.tests_of(target)[:max_tests]
        print(
            f"{target.name:60} {len(mutants[target.name]):7} {len(tests):6} "
            f"{test_map.seconds(tests):7.0f}"
        )
    return 0


def write_reports(out: Path, reports: list[FunctionReport], arguments: str, seconds: float) -> None:
    results = {
        "arguments": arguments,
        "seconds": round(seconds),
        "functions": [dataclasses.asdict(r) for r in reports],
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    rows = [
        f"{'function':60} {'tests':>5} {'base s':>6} {'mutants':>7} {'killed':>6} "
        f"{'timeout':>7} {'survived':>8} {'error':>5}"
    ]
    for r in reports:
        rows.append(
            f"{r.function:60} {r.tests:5} {r.baseline_seconds or 0:6.0f} {len(r.mutants):7} "
            f"{r.count('killed'):6} {r.count('timeout'):7} {r.count('survived'):8} "
            f"{r.count('error'):5}" + ("" if r.baseline == "passed" else f"  ({r.baseline})")
        )
    total = [m for r in reports for m in r.mutants]
    run = sum(m["seconds"] for m in total)
    rows.append(
        f"\n{len(total)} mutants, {sum(m['status'] in ('killed', 'timeout') for m in total)} "
        f"killed, {sum(m['status'] == 'survived' for m in total)} survived; "
        f"{seconds:.0f}s in all, {run / max(1, len(total)):.1f}s per mutant"
        f" (run.py {arguments})"
    )
    (out / "summary.txt").write_text("\n".join(rows) + "\n")
    survivors = [m["diff"] for m in total if m["status"] == "survived"]
    (out / "survivors.diff").write_text("\n".join(survivors))


def compare_runs(a: Path, b: Path) -> int:
    """Mutants (by id: the same function and change) that run ``a`` kills and ``b`` does
    not, with their diffs."""

    def statuses(path: Path) -> dict[str, dict[str, Any]]:
        data = json.loads(path.read_text())
        return {m["id"]: m for f in data["functions"] for m in f["mutants"]}

    first, second = statuses(a), statuses(b)
    killed = ("killed", "timeout")
    lost = [
        m
        for i, m in first.items()
        if m["status"] in killed and i in second and second[i]["status"] == "survived"
    ]
    both = len(first.keys() & second.keys())
    print(f"{both} mutants in both runs; {len(lost)} killed by {a} and survived by {b}")
    for m in lost:
        print(m["diff"])
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())

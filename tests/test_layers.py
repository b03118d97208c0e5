"""The house's floors: each package imports only its own floor and the floors below; the
env's side (what a child process or Ray actor runs) imports nothing of the parent's side;
no import circle.

Read from the source (module-level imports, as Python runs them when a module is imported;
imports inside functions run only when called). ``python tests/test_layers.py`` prints the
floors and what each imports.
"""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

import aioenv

PACKAGE = Path(aioenv.__file__).parent

#: The floors, bottom first. A module's floor is its package under ``aioenv`` (``workers``
#: holds its kinds' folders); the top-level modules (the public names, the command line)
#: are the roof.
FLOORS = (
    "core",  # the vocabulary both sides share: env protocol, steps, commands, messages
    "wire",  # what crosses a process boundary: frames, shared memory, requests
    "env_side",  # runners and serving slots: what steps an env, wherever it runs
    "engine",  # the step path's shared buffer and kernel wake, on both sides
    "loops",  # event-loop hosts, the uvloop rule and the trio bridge
    "workers",  # worker kinds, each remote kind's folder holding both its halves
    "pool",  # many workers behind one get_state
    "collection",  # collect() and the Collector
    "vector",  # AioVectorEnv and make_vec
    "",  # the roof: aioenv's public names and its command line
)
#: What runs on the env's side of a process boundary: these packages, and the programs a
#: remote kind's folder holds for its child process or Ray actor.
ENV_SIDE = ("core", "wire", "env_side", "engine")
CHILD_PROGRAMS = {
    "aioenv.workers.process._child",
    "aioenv.workers.process._quiet_start",
    "aioenv.workers.process._thread_caps_preload",
    "aioenv.workers.ray._actor",  # the actor, and its end of its direct connection
}
#: The parent-side modules that step envs in the parent's own process, and so use the env
#: side's runners: sync, thread and coroutine workers, and inline vector envs.
RUNS_ENVS_IN_LINE = {
    "aioenv.workers._sync",
    "aioenv.workers._thread",
    "aioenv.workers._coroutine",
    "aioenv.vector._inline",
}
RUNNERS = {
    f"aioenv.env_side.{m}" for m in ("_runner", "_async_runner", "_vector_runner", "_serving")
}
#: The one module that knows trio (the bridge of pools to a trio run), and the one that
#: chooses between uvloop and asyncio's own loop.
TRIO_BRIDGE = "aioenv.loops._trio_bridge"
LOOP_CHOICE = "aioenv.loops._choice"


def floor_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FLOORS) else ""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_level_imports(path: Path) -> set[str]:
    """The aioenv modules ``path`` imports when it is imported."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    body = list(ast.parse(path.read_text()).body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.If, ast.Try)):  # e.g. `if TYPE_CHECKING:` blocks
            body.extend([*node.body, *node.orelse, *getattr(node, "finalbody", [])])
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("aioenv"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            elif node.module and node.module.startswith("aioenv"):
                target = node.module
            else:
                continue
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # submodules
    return found


def third_party_imports(path: Path) -> set[str]:
    """The top-level packages other than aioenv that ``path`` imports anywhere (in a
    function too, where an optional package is imported on first use)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found - {"aioenv"}


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: module_level_imports(path) & modules.keys() for name, path in modules.items()}


def test_the_import_graph_has_no_circle() -> None:
    edges = graph()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycle = [*path[path.index(module) :], module]
            raise AssertionError(f"import circle: {' -> '.join(cycle)}")
        if module in done:
            return
        for imported in sorted(edges[module]):
            # A package's __init__ imports its submodules; a submodule importing a sibling
            # through the package is an edge to that sibling, not back to the __init__.
            if imported != "aioenv" and not module.startswith(f"{imported}."):
                visit(imported, [*path, module])
        done.add(module)

    for module in sorted(edges):
        visit(module, [])


def test_every_module_is_on_a_floor() -> None:
    for module in graph():
        assert floor_of(module) in FLOORS, f"{module} is in no floor: add its package to FLOORS"


def test_each_floor_imports_only_itself_and_the_floors_below() -> None:
    for module, imported in graph().items():
        level = FLOORS.index(floor_of(module))
        above = sorted(m for m in imported if FLOORS.index(floor_of(m)) > level)
        assert not above, f"{module} (floor {floor_of(module)!r}) imports floors above: {above}"


def test_the_env_side_imports_nothing_of_the_parent_side() -> None:
    for module, imported in graph().items():
        if floor_of(module) in ENV_SIDE or module in CHILD_PROGRAMS:
            outside = sorted(
                m for m in imported if floor_of(m) not in ENV_SIDE and m not in CHILD_PROGRAMS
            )
            assert not outside, f"{module} runs on the env's side and imports {outside}"


def test_only_the_in_line_kinds_import_the_runners_and_nothing_imports_a_child_program() -> None:
    for module, imported in graph().items():
        if floor_of(module) in ENV_SIDE or module in CHILD_PROGRAMS:
            continue
        if module not in RUNS_ENVS_IN_LINE:
            runners = sorted(RUNNERS & imported)
            assert not runners, f"{module} runs no env in line but imports {runners}"
        programs = sorted(CHILD_PROGRAMS & imported)
        assert not programs, f"{module} imports a child's program {programs}"


def test_only_the_bridge_imports_trio_and_only_when_trio_runs() -> None:
    # trio is optional and `import aioenv` must not import it: the bridge is imported on
    # first use, from inside a function, never at a module's top.
    for path in PACKAGE.rglob("*.py"):
        name, imported = module_name(path), third_party_imports(path)
        if name != TRIO_BRIDGE:
            assert not {"trio", "outcome"} & imported, f"{name} imports trio"
        if name != LOOP_CHOICE:
            assert "uvloop" not in imported, f"{name} chooses an event loop of its own"
    assert {"trio", "outcome"} <= third_party_imports(PACKAGE / "loops" / "_trio_bridge.py")
    for module, imported in graph().items():
        assert TRIO_BRIDGE not in imported, f"{module} imports the trio bridge when imported"


def private_asyncio_names(source: str) -> set[str]:
    """The private names of asyncio (``_name``, at any depth: ``asyncio.events._x``)
    that ``source`` uses or imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("asyncio"):
            names |= {
                f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_")
            }
        elif isinstance(node, ast.Attribute):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            private = any(part.startswith("_") for part in chain)
            if isinstance(value, ast.Name) and value.id == "asyncio" and private:
                names.add(".".join(["asyncio", *reversed(chain)]))
    return names


def test_no_module_uses_a_private_name_of_asyncio() -> None:
    # Private names change between Python versions without notice (and other event
    # loops, uvloop's, need not keep them working).
    for path in PACKAGE.rglob("*.py"):
        used = private_asyncio_names(path.read_text())
        assert not used, f"{module_name(path)} uses asyncio's private {sorted(used)}"


def test_the_checks_see_real_edges() -> None:
    """The graph is read correctly: known imports show up (so the tests above can fail)."""
    edges = graph()
    assert "aioenv.wire._frames" in edges["aioenv.workers.process._child"]
    assert "aioenv.workers.process._host" in edges["aioenv.workers.process._worker"]
    assert "aioenv.wire._ray_messages" in edges["aioenv.workers.ray._actor"]
    assert "aioenv.pool._pool" in edges["aioenv.pool._factory"]
    assert "aioenv.core._messages" in edges["aioenv.env_side._runner"]
    assert LOOP_CHOICE in edges["aioenv.loops._inline"]
    assert "uvloop" in third_party_imports(PACKAGE / "loops" / "_choice.py")
    assert private_asyncio_names(
        "import asyncio\nfrom asyncio.events import _get_running_loop\n"
        "asyncio._get_running_loop()\nasyncio.events._set_running_loop(None)\n"
        "asyncio.get_running_loop()\n"
    ) == {
        "asyncio.events._get_running_loop",
        "asyncio._get_running_loop",
        "asyncio.events._set_running_loop",
    }


def test_every_function_the_mutation_check_names_exists() -> None:
    """A function moved or renamed must be renamed in the mutation check's list too
    (``make mutation``, tools/mutation/functions.toml), which otherwise stops at it."""
    tool = PACKAGE.parent / "tools" / "mutation"
    mutation = runpy.run_path(str(tool / "run.py"), run_name="aioenv_mutation_run")
    assert mutation["load_targets"](tool / "functions.toml", None, None)


def print_the_house() -> None:
    """The floors, top first, with the floors each one imports (and how many edges)."""
    edges = graph()
    for floor in reversed(FLOORS):
        modules = sorted(m for m in edges if floor_of(m) == floor)
        below: dict[str, int] = {}
        for module in modules:
            for imported in edges[module]:
                if floor_of(imported) != floor:
                    below[floor_of(imported)] = below.get(floor_of(imported), 0) + 1
        uses = (
            ", ".join(
                f"{f or 'roof'} ({n})"
                for f, n in sorted(below.items(), key=lambda x: FLOORS.index(x[0]))
            )
            or "nothing"
        )
        print(f"{floor or 'roof (aioenv/*.py)':<22} {len(modules):>2} modules  imports: {uses}")


if __name__ == "__main__":
    print_the_house()
    sys.exit(0)

"""The package's import graph: no circles, and the child's side never leans on the parent's.

Read from the source (module-level imports, as Python runs them when a module is imported;
imports inside functions run only when called)."""

from __future__ import annotations

import ast
from pathlib import Path

import aioenv

PACKAGE = Path(aioenv.__file__).parent

#: What a child process or a Ray actor runs (and, in-line, sync and thread workers): the
#: env's side.
CHILD_SIDE = {
    "aioenv.workers._child",
    "aioenv.workers._ray_actor",
    "aioenv.workers._ray_protocol",
    "aioenv.workers._requests",
    "aioenv.workers._serving",
    "aioenv.workers._thread_caps",
    "aioenv._runner",
    "aioenv._async_runner",
    "aioenv._vector_runner",
    "aioenv._vector_infos",
    "aioenv._segment",
    "aioenv._plan",
    "aioenv._registry",
    "aioenv._async_environment",
    "aioenv._seeds",
    "aioenv._protocol",
    "aioenv._shared_memory",
    "aioenv._environment",
    "aioenv._messages",
    "aioenv._sentinels",
}
#: Parent-side kinds that run an env in the parent's own process.
RUNS_ENVS_IN_LINE = {
    "aioenv.workers._sync",
    "aioenv.workers._thread",
    "aioenv.workers._coroutine",
    "aioenv._vector_inline",  # an AioVectorEnv's envs stepped in the calling thread
}
#: The one module that knows trio (the bridge of pools to a trio run), and the one that
#: chooses between uvloop and asyncio's own loop.
TRIO_BRIDGE = "aioenv.loops._trio_bridge"
LOOP_CHOICE = "aioenv.loops._choice"


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


def test_the_child_side_imports_nothing_of_the_parent_side() -> None:
    edges = graph()
    for module in CHILD_SIDE:
        outside = {m for m in edges[module] if m not in CHILD_SIDE and m != "aioenv.workers"}
        assert not outside, f"{module} imports parent-side {sorted(outside)}"


def test_only_the_in_line_kinds_import_the_env_runner_and_nothing_imports_the_child() -> None:
    edges = graph()
    for module, imported in edges.items():
        if module in CHILD_SIDE:
            continue
        if module not in RUNS_ENVS_IN_LINE:
            for runner in ("aioenv._runner", "aioenv._async_runner", "aioenv._vector_runner"):
                assert runner not in imported, f"{module} imports the env's {runner}"
        assert "aioenv.workers._child" not in imported, f"{module} imports the child's loop"
        assert "aioenv.workers._ray_actor" not in imported, f"{module} imports the actor"


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


def test_the_checks_see_real_edges() -> None:
    """The graph is read correctly: known imports show up (so the tests above can fail)."""
    edges = graph()
    assert "aioenv._protocol" in edges["aioenv.workers._child"]
    assert "aioenv.workers._host" in edges["aioenv.workers._process"]
    assert "aioenv.workers._ray_protocol" in edges["aioenv.workers._ray_actor"]
    assert "aioenv._pool" in edges["aioenv._factory"]
    assert "aioenv._messages" in edges["aioenv._runner"]
    assert LOOP_CHOICE in edges["aioenv.loops._inline"]
    assert "uvloop" in third_party_imports(PACKAGE / "loops" / "_choice.py")

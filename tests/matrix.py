"""Which cases of the test matrix ``make test`` runs: a cover, not the whole product.

Many tests are parametrized over the event loop (asyncio, uvloop, trio), the pool's worker
configuration (the ``mode`` fixture) and the autoreset mode, and some over more (spaces,
contexts). Their whole product is ``make test-full`` (``pytest --matrix=full``). ``make
test`` (``--matrix=cover``, the default) runs the cases :func:`cover` keeps:

- every test function at least once, and every value of each of its parameters outside the
  matrix (an env, a space, a fault, a message: see :data:`MATRIX`) in at least one of its
  cases;
- every value of the event loop in each of a test's cases where the test is marked
  ``loops`` (cancellation, timeouts, trio, uvloop's own paths: what a loop can change);
- in each test file, every pair of the matrix's values that its cases pair (worker kind and
  autoreset mode, worker kind and event loop, event loop and autoreset mode) in at least
  one of its kept cases: a pairwise cover of the file's matrix. A value outside the matrix
  is not paired with each of the matrix's: ``make test-full`` runs every space in every
  worker kind, ``make test`` each space once.

The choice is greedy and depends only on the collected items and their order, so every
pytest-xdist worker keeps the same cases. Among cases that cover as much, the one whose
values have run least so far in its file is taken, so that kinds and loops are spread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from itertools import combinations
from typing import Any

#: pytest-asyncio's parameter for the event loop a test runs on (see conftest's
#: ``pytest_asyncio_loop_factories``).
LOOP = "_asyncio_loop_factory"
#: The matrix's own parameters: the event loop, the worker kind (the ``mode`` fixture, or a
#: test's ``kind``/``pool_kind``) and the autoreset mode. A test runs each value of every
#: other parameter (an env, a space, a fault, a message) at least once.
MATRIX = frozenset({LOOP, "mode", "kind", "pool_kind", "autoreset"})

Single = tuple[str, Hashable]
Pair = tuple[Single, Single]


def _hashable(value: Any) -> Hashable:
    """A parameter value as a set member: itself, or (for a list, an array, a dict) the
    object's identity, which every case of one parametrize list shares."""
    try:
        hash(value)
    except TypeError:
        return ("object", id(value))
    return value  # type: ignore[no-any-return]


def parameters(item: Any) -> list[Single]:
    """The (parameter, value) pairs of one collected case, in a stable order."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return []
    return [(name, _hashable(value)) for name, value in sorted(callspec.params.items())]


def function_of(item: Any) -> str:
    """The test function a case belongs to: its node id without the parameter ids."""
    return str(item.nodeid).split("[", 1)[0]


def file_of(item: Any) -> str:
    return str(item.nodeid).split("::", 1)[0]


class _Case:
    __slots__ = ("index", "item", "pairs", "required", "singles")

    def __init__(self, index: int, item: Any, every_loop: bool) -> None:
        self.index = index
        self.item = item
        self.singles = frozenset(parameters(item))
        self.required = frozenset(
            s for s in self.singles if s[0] not in MATRIX or (every_loop and s[0] == LOOP)
        )
        # Pairs of the matrix's own values only: a value outside it (an env, a space) runs
        # at least once, in whichever worker kind, loop and autoreset mode cover the rest.
        matrix = sorted((s for s in self.singles if s[0] in MATRIX), key=repr)
        self.pairs = frozenset(combinations(matrix, 2))


def cover(items: Sequence[Any], every_loop: Callable[[Any], bool]) -> list[Any]:
    """The cases of ``items`` that ``make test`` runs (see the module docstring), in their
    collected order. ``every_loop(item)`` says whether a case's test is marked ``loops``."""
    kept: set[int] = set()
    by_file: dict[str, list[_Case]] = {}
    for index, item in enumerate(items):
        by_file.setdefault(file_of(item), []).append(_Case(index, item, every_loop(item)))
    for cases in by_file.values():
        kept.update(_cover_file(cases))
    return [item for index, item in enumerate(items) if index in kept]


def _cover_file(cases: list[_Case]) -> set[int]:
    file_needs: set[Any] = set()
    for case in cases:
        file_needs.update(case.singles)
        file_needs.update(case.pairs)
    used: Counter[Single] = Counter()
    kept: set[int] = set()

    def take(case: _Case) -> None:
        kept.add(case.index)
        used.update(case.singles)
        file_needs.difference_update(case.singles)
        file_needs.difference_update(case.pairs)

    def best(candidates: Iterable[_Case], score: Callable[[_Case], tuple[int, ...]]) -> _Case:
        # max() keeps the first of equal scores: the collected order breaks ties.
        return max(candidates, key=lambda case: (*score(case), -sum(used[s] for s in case.singles)))

    functions: dict[str, list[_Case]] = {}
    for case in cases:
        functions.setdefault(function_of(case.item), []).append(case)
    for own in functions.values():
        function_needs: set[Single] = set().union(*(case.required for case in own))
        while True:  # at least one case of every function
            pick = best(
                (case for case in own if case.index not in kept),
                lambda case, needs=function_needs: (  # type: ignore[misc]
                    len(case.required & needs),
                    _gain(case, file_needs),
                ),
            )
            take(pick)
            function_needs.difference_update(pick.required)
            if not function_needs:
                break
    while file_needs:
        take(
            best(
                (case for case in cases if case.index not in kept),
                lambda c: (_gain(c, file_needs),),
            )
        )
    return kept


def _gain(case: _Case, needs: set[Any]) -> int:
    return len(case.singles & needs) + len(case.pairs & needs)

"""The cover of the test matrix that ``make test`` runs (tests/matrix.py): every test at least
once, every value of a non-matrix parameter in each test, every pair of the matrix's values
in each file, and every loop for a test marked ``loops``; and the groups Ray's tests run in
(tests/ray_groups.py)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
from matrix import LOOP, cover
from ray_groups import CASES, CLUSTER, FILES, check_named, group_of

LOOPS = ["asyncio", "uvloop", "trio"]
MODES = ["sync", "thread", "process", "async", "mixed", "mixed_async"]
AUTORESETS = ["next_step", "same_step", "disabled"]


@dataclass
class CallSpec:
    params: dict[str, Any]


@dataclass
class Item:
    nodeid: str
    callspec: CallSpec | None = None
    loops: bool = False
    marks: list[str] = field(default_factory=list)


def cases(path: str, name: str, loops: bool = False, **dimensions: list[Any]) -> list[Item]:
    names = list(dimensions)
    items = []
    for values in itertools.product(*dimensions.values()):
        ident = "-".join(map(str, values))
        items.append(
            Item(f"{path}::{name}[{ident}]", CallSpec(dict(zip(names, values, strict=True))), loops)
        )
    return items


def matrix_file(path: str, functions: int) -> list[Item]:
    return [
        item
        for number in range(functions)
        for item in cases(
            path, f"test_{number}", **{LOOP: LOOPS, "mode": MODES, "autoreset": AUTORESETS}
        )
    ]


def kept_pairs(items: list[Item]) -> set[tuple[tuple[str, Any], tuple[str, Any]]]:
    pairs = set()
    for item in items:
        assert item.callspec is not None
        singles = sorted(item.callspec.params.items())
        pairs.update(itertools.combinations(singles, 2))
    return pairs


def test_every_pair_of_a_files_matrix_is_kept_in_far_fewer_cases_than_the_product() -> None:
    items = matrix_file("tests/test_a.py", 20)
    kept = cover(items, lambda item: item.loops)
    assert kept_pairs(kept) == kept_pairs(items)
    assert len(kept) < len(items) / 5  # 1,080 cases: 20 functions x 54
    assert {item.nodeid.split("[")[0] for item in kept} == {
        item.nodeid.split("[")[0] for item in items
    }


def test_a_file_with_one_test_keeps_a_pairwise_cover_of_its_own_cases() -> None:
    items = matrix_file("tests/test_b.py", 1)
    kept = cover(items, lambda item: False)
    assert kept_pairs(kept) == kept_pairs(items)
    assert len(kept) < len(items)


def test_each_file_is_covered_on_its_own() -> None:
    first, second = matrix_file("tests/test_a.py", 3), matrix_file("tests/test_b.py", 3)
    kept = cover(first + second, lambda item: False)
    for path, items in (("tests/test_a.py", first), ("tests/test_b.py", second)):
        own = [item for item in kept if item.nodeid.startswith(path)]
        assert kept_pairs(own) == kept_pairs(items)


def test_a_test_marked_loops_runs_on_every_loop() -> None:
    marked = cases("tests/test_c.py", "test_cancel", loops=True, **{LOOP: LOOPS, "mode": MODES})
    plain = cases("tests/test_c.py", "test_plain", **{LOOP: LOOPS, "mode": MODES})
    kept = cover(marked + plain, lambda item: item.loops)
    on = {item.callspec.params[LOOP] for item in kept if item.loops if item.callspec}
    assert on == set(LOOPS)


def test_every_value_of_a_parameter_outside_the_matrix_runs_in_its_test() -> None:
    envs = ["CartPole-v1", "Pendulum-v1", "Walk", "Counter"]
    items = cases("tests/test_d.py", "test_env", **{LOOP: LOOPS, "env": envs, "mode": MODES})
    kept = cover(items, lambda item: False)
    assert {item.callspec.params["env"] for item in kept if item.callspec} == set(envs)


def test_a_value_outside_the_matrix_is_not_paired_with_each_of_the_matrixs_values() -> None:
    envs = ["CartPole-v1", "Pendulum-v1", "Walk", "Counter"]
    items = cases("tests/test_d.py", "test_env", **{LOOP: LOOPS, "env": envs, "mode": MODES})
    kept = cover(items, lambda item: False)
    loop_and_mode = {
        (i.callspec.params[LOOP], i.callspec.params["mode"]) for i in items if i.callspec
    }
    assert {(i.callspec.params[LOOP], i.callspec.params["mode"]) for i in kept if i.callspec} == (
        loop_and_mode
    )
    # Pairing each env with each mode would take 24 cases; the loop x mode pairs take 18.
    assert len(kept) == len(loop_and_mode) < len(envs) * len(MODES)


def test_unparametrized_tests_and_unhashable_values_are_kept() -> None:
    plain = [Item("tests/test_e.py::test_plain")]
    arrays = [[1, 2], [3, 4]]
    listed = cases("tests/test_e.py", "test_list", action=arrays)
    kept = cover(plain + listed, lambda item: False)
    assert kept == plain + listed


def test_the_choice_depends_only_on_the_items_and_their_order() -> None:
    items = matrix_file("tests/test_a.py", 5)
    first = [item.nodeid for item in cover(items, lambda item: False)]
    again = [item.nodeid for item in cover(list(items), lambda item: False)]
    assert first == again
    assert first == [item.nodeid for item in items if item.nodeid in set(first)]  # in order


def test_ray_tests_are_grouped_by_their_ids() -> None:
    assert group_of("tests/test_ray_cluster.py::test_losing_a_node") == CLUSTER
    assert group_of("tests/test_ray.py::test_a_mixed_pool[asyncio]") == FILES
    assert group_of("tests/faults/test_ray_control.py::test_control[uvloop]") == FILES
    assert group_of("tests/test_combinations.py::test_answers[ray-Dict-same_step]") == CASES
    assert group_of("tests/test_registry.py::test_a_module_id_builds_in_ray_actors") == CASES
    assert group_of("tests/test_protocol.py::test_array_actions_travel_raw[uvloop]") is None
    assert group_of("tests/test_pool.py::test_step[asyncio-thread]") is None


@dataclass
class Marked:
    nodeid: str
    keywords: set[str] = field(default_factory=lambda: {"ray"})


def test_a_ray_test_whose_id_does_not_say_ray_is_refused_saying_what_to_do() -> None:
    check_named(Marked("tests/test_pool.py::test_actors[ray]"))
    check_named(Marked("tests/test_pool.py::test_step", keywords=set()))
    with pytest.raises(pytest.UsageError, match="put the word in its name"):
        check_named(Marked("tests/test_pool.py::test_remote_actors"))

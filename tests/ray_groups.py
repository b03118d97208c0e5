"""Which pytest-xdist worker runs each Ray test: Ray's tests run beside the rest of the suite
in a few groups, each on one worker that starts one local Ray instance for it.

The group is read from a test's id alone, because pytest-xdist's scheduler sees ids only:
its own ``xdist_group`` marker travels by rewriting the ids, which pytest 9.2 no longer
lets a plugin do (pytest-xdist issue 1386), and a mark it cannot see is silently ignored.
So a Ray test says ``ray`` in its id (its file, its name or a parameter), and the suite's
collection refuses a test marked ``ray`` whose id does not (:func:`check_named`).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

import pytest

#: The groups, by a test's file: the cluster tests (their clusters replace the worker's
#: shared instance, so they get a worker of their own), the other Ray test files, and the
#: Ray cases of every other file.
CLUSTER = "ray-cluster"
FILES = "ray-files"
CASES = "ray-cases"

_WORDS = re.compile(r"[A-Za-z0-9]+")  # "_", "-", "[" and "." separate words


def says_ray(text: str) -> bool:
    """Whether ``ray`` is a word of ``text`` (``test_ray_control``, ``[ray-Dict]``; not
    ``array``)."""
    return any(word.lower() == "ray" for word in _WORDS.findall(text))


def group_of(nodeid: str) -> str | None:
    """The group of the test with this id, or None for a test that needs no Ray."""
    path, _, test = nodeid.partition("::")
    name = PurePosixPath(path).name
    if name.startswith("test_ray_cluster"):
        return CLUSTER
    if name.startswith("test_ray"):
        return FILES
    return CASES if says_ray(test) else None


def check_named(item: Any) -> None:
    """A test marked ``ray`` whose id does not say so would run outside the Ray groups,
    on a worker that starts another Ray instance: refuse it, saying what to do."""
    if "ray" in item.keywords and group_of(item.nodeid) is None:
        raise pytest.UsageError(
            f"{item.nodeid} is marked ray, but its id does not say 'ray': put the word in "
            "its name or in a parameter's id, so that the suite's scheduler can run it with "
            "the other Ray tests (tests/ray_groups.py)"
        )


def make_scheduler(config: Any, log: Any) -> Any:
    """pytest-xdist's ``loadscope`` scheduling with one scope per test, except the Ray
    groups. It orders scopes by size, so the groups (the largest) go first, one to each
    worker."""
    from xdist.scheduler import LoadScopeScheduling

    class RayGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    return RayGroups(config, log)

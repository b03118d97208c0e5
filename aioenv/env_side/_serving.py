"""The env slots of one serving process, and what each request to them means.

A process worker's child (:mod:`aioenv.workers.process._child`, frames on a socket) and a Ray
actor (:mod:`aioenv.workers.ray._actor`, actor calls) both serve their slots through a
:class:`Slots`: each turns its own messages into a :class:`~aioenv.wire._requests.Request`
and sends the answer back its own way, so what a request does is written here once. This
module imports nothing from the parent's side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cloudpickle
import numpy as np

from ..core._messages import EpisodeOptions, Failure
from ..core._registry import merge as merge_registry
from ..core._seeds import GroupSeed
from ..wire._requests import CONTROL, STEP, Request
from ._runner import EnvRunner
from ._segment import PolicyCache
from ._thread_caps import ThreadCaps, cap_imported, cap_threads
from ._vector_runner import Runner, VectorRunner, make_runner

__all__ = ["Slots"]


class Slots:
    """One env slot per payload (cloudpickled env sources), slot ``i`` seeded with
    ``seeds[i]`` at its first reset. The parent's gymnasium ids (``registry``,
    :func:`aioenv.core._registry.snapshot`) are added to this process's and its native thread
    pools capped (``thread_caps``, see :mod:`aioenv.env_side._thread_caps`) before any env
    is unpickled or built. No env is built until a BUILD or REBUILD request asks."""

    def __init__(
        self,
        payloads: Sequence[bytes],
        seeds: Sequence[GroupSeed],
        episode: EpisodeOptions,
        registry: bytes,
        thread_caps: ThreadCaps | None,
    ) -> None:
        merge_registry(registry)
        cap_threads(thread_caps)
        self._thread_caps = thread_caps
        self._policies = PolicyCache()  # this process's, shared by its slots' runners
        self.sources = [_unpickled(payload) for payload in payloads]
        self.runners = [self._runner(slot, seed, episode) for slot, seed in enumerate(seeds)]
        self._stack_into: list[Any] = [None] * len(seeds)  # see :meth:`share`

    def serve(self, slot: int, request: int, payload: Any) -> Any:
        """Answer one ``request`` for ``slot``: a state or a Failure (STEP), a result or
        a Failure (CONTROL), the env's spaces (BUILD, REBUILD), None (CLOSE_SLOT)."""
        runner = self.runners[slot]
        if request == STEP:  # steps first: the hot path
            return runner.handle(payload)
        if request == CONTROL:
            return runner.control(payload)
        if request == Request.CLOSE_SLOT:
            runner.close()
            return None
        if request == Request.REBUILD:
            runner.close()
            seed, episode = payload
            runner = self.runners[slot] = self._runner(slot, seed, episode)
            _stack_into(runner, self._stack_into[slot])
        elif request != Request.BUILD:
            raise ValueError(f"a slot serves no {Request(request).name} request")
        runner.build()
        cap_imported(self._thread_caps)  # what the env imported while it was built
        return runner.spaces

    def share(self, slot: int, views: Any) -> None:
        """The slot's shared memory (its layout's views; None: none any more): a slot that
        steps several envs of a Box space stacks their observations straight into it."""
        self._stack_into[slot] = views
        _stack_into(self.runners[slot], views)

    def close(self) -> None:
        """Close every slot's env."""
        for runner in self.runners:
            runner.close()

    def _runner(self, slot: int, seed: GroupSeed, episode: EpisodeOptions) -> Runner:
        source = self.sources[slot]
        if isinstance(source, Failure):  # the source could not be unpickled here
            failed = EnvRunner(None, None, episode, self._policies)
            failed.build_failure = source  # reported by every request, as a build's
            return failed
        return make_runner(source, seed, episode, self._policies)


def _stack_into(runner: Runner, views: Any) -> None:
    if isinstance(runner, VectorRunner):
        runner.stack_into = views if type(views) is np.ndarray else None


def _unpickled(payload: bytes) -> Any:
    """The env source ``payload`` pickles, or the Failure that stands in for it where it
    cannot be unpickled here (no env source is a Failure)."""
    try:
        return cloudpickle.loads(payload)
    except Exception as exc:
        return Failure.from_exception(exc, "construction (unpickling)")

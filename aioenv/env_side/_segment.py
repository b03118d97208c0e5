"""Rollouts inside a worker, the env's side: a policy loaded once per process, a segment
played locally.

The messages (:class:`~aioenv.core._rollouts.PolicyPackage`,
:class:`~aioenv.core._rollouts.Rollout`, :class:`~aioenv.core._rollouts.Segment`) are the
vocabulary both sides share. Here a serving process unpickles each policy once for all its
slots (:class:`PolicyCache`), and a runner plays a :class:`~aioenv.core._rollouts.Rollout`:
``num_steps`` transitions per env with the policy, answered as one
:class:`~aioenv.core._rollouts.Segment` of arrays per env (a runner of several envs answers
the list of its envs' segments, env 0's first). This module is on the env's side: it
imports nothing of the parent's.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import cloudpickle
import numpy as np

from ..core._environment import Step, copy_arrays
from ..core._messages import Failure
from ..core._rollouts import DTYPES, PolicyPackage, Rollout, Segment
from ._plan import Plan

__all__ = ["PolicyCache", "rollout_plan"]

_NOT_LOADED = object()


class PolicyCache:
    """The policies one serving process (a child process, a Ray actor) unpickled, by key:
    its runners share one, so a policy is unpickled once however many slots play it, and
    only the first request to the process needs to carry its bytes. It keeps the latest
    two: the current policy and the one before (for a late request). Slots that step in
    threads of their own (an actor's, side by side) resolve through it at once."""

    KEEP = 2

    def __init__(self) -> None:
        self._loaded: dict[str, Any] = {}  # key -> the policy (or the Failure unpickling it)
        self._lock = threading.Lock()

    def resolve(self, package: PolicyPackage) -> Any:
        """The policy ``package`` names: its object when it never left the parent's
        process, else the one unpickled here for its key (once)."""
        if package.in_process:
            return package.policy
        with self._lock:
            loaded = self._loaded.get(package.key, _NOT_LOADED)
            if loaded is _NOT_LOADED:
                loaded = _load(package)
                self._loaded[package.key] = loaded
                while len(self._loaded) > self.KEEP:
                    del self._loaded[next(iter(self._loaded))]
        if isinstance(loaded, Failure):
            raise RuntimeError(f"the policy (version {package.version}) {loaded.message}")
        return loaded

    def load(self, package: PolicyPackage) -> Failure | None:
        """Unpickle ``package``'s policy here now (the answer to set_policy's request):
        None, or the Failure that says why it could not be."""
        try:
            self.resolve(package)
        except Exception as exc:
            return Failure.from_exception(exc, "set_policy (loading it)", "the policy")
        return None


def _load(package: PolicyPackage) -> Any:
    payload = package.payload
    if payload is None:
        error = LookupError("was never sent to this process; call pool.set_policy() again")
        return Failure.from_exception(error, "loading the policy")
    try:
        if not isinstance(payload, bytes):
            import ray  # a reference into Ray's object store: only inside a Ray actor

            payload = ray.get(payload)
        return cloudpickle.loads(payload)
    except Exception as exc:
        failure = Failure.from_exception(exc, "loading the policy")
        message = f"could not be unpickled here ({type(exc).__name__}: {exc})"
        return dataclasses.replace(failure, message=message)


@dataclasses.dataclass
class Cursor:
    """Where the runner's env stands between segments: its observation, the index in
    its episode of the next transition, and when that episode started (``time.monotonic``
    here: its budget runs from then)."""

    observation: Any
    step: int
    started: float = dataclasses.field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.observation = copy_arrays(self.observation)  # the env may write over its own


def _rows(
    runner: Any, cursor: Cursor | None, request: Rollout, seed: int | None, policy: Any
) -> Plan[tuple[dict[str, list[Any]], Cursor]]:
    """The segment's rows (``request.num_steps`` of them), the runner's own reset and step
    plans making the env's calls. ``request.episode_timeout``, the budget: an episode's
    seconds; the step that finds its episode past them ends it truncated, and the env is
    reset. The segment starts from a reset where there is no ``cursor``, a ``seed``, or
    ``request.fresh``."""
    budget = request.episode_timeout
    rows: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
    if cursor is None or seed is not None or request.fresh:
        cursor = Cursor((yield from _answered(runner.reset_plan(seed))).observation, 0)
    for _ in range(request.num_steps):
        try:
            action = policy(cursor.observation)
        except Exception as exc:  # the caller's: no restart of the env would fix it
            raise _Stop(Failure.from_exception(exc, "rollout", "the policy")) from None
        state = yield from _answered(runner.step_plan(action))
        done = state.terminated or state.truncated
        same_step = done and state.final_info is not None  # autoreset "same_step" reset it
        truncated = state.truncated
        if not done and budget is not None and time.monotonic() - cursor.started >= budget:
            done = truncated = True  # out of its budget: ended here, as a time limit would
        row = (cursor.observation, action, state.reward, state.terminated, truncated)
        step = cursor.step
        if not done:
            cursor = Cursor(state.observation, step + 1, cursor.started)
            final = cursor.observation  # the cursor's copy
        else:  # copied before a reset can write over it
            final = copy_arrays(state.final_observation if same_step else state.observation)
            reset = state if same_step else (yield from _answered(runner.reset_plan()))
            cursor = Cursor(reset.observation, 0)
        for name, value in zip(_COLUMNS, (*row, final, step), strict=True):
            rows[name].append(value)
    return rows, cursor


def _answered(plan: Plan[Any]) -> Plan[Step[Any]]:
    """What ``plan`` answers, a Step; a Failure ends the segment (:class:`_Stop`), and any
    other state is a TypeError."""
    answer = yield from plan
    if isinstance(answer, Failure):
        raise _Stop(answer)
    if not isinstance(answer, Step):
        error = TypeError("rollout() needs gymnasium envs (aioenv.Step states)")
        raise _Stop(Failure.from_exception(error, "rollout", "the request"))
    return answer


#: A Segment's columns, in the order a transition's row gives them: every field but the
#: version and goes_on (one per segment: a segment is one env's).
_COLUMNS = tuple(
    f.name for f in dataclasses.fields(Segment) if f.name not in ("version", "goes_on")
)


class _Stop(Exception):
    """The runner answered a Failure: the segment ends with it."""

    def __init__(self, failure: Failure) -> None:
        self.failure = failure


def rollout_plan(runner: Any, request: Rollout, env: int = 0) -> Plan[Segment | Failure]:
    """The plan of ``request`` on ``runner`` (an :class:`~aioenv.env_side._runner.EnvRunner`; see
    :mod:`aioenv.env_side._plan`), keeping its cursor there for the next segment; a Failure ends
    the segment and drops its rows. ``env``: the runner's env's index in its worker (its
    reset's seed is ``request.seed + env``)."""
    try:
        policy = runner.policies.resolve(request.policy)
    except Exception as exc:
        return Failure.from_exception(exc, "rollout (loading it)", "the policy")
    try:
        seed = None if request.seed is None else request.seed + env
        goes_on = type(runner.last) is Cursor
        cursor = _resume(runner)  # cleared on the runner, whatever the request
        rows, runner.last = yield from _rows(runner, cursor, request, seed, policy)
    except _Stop as stop:
        return stop.failure
    except Exception as exc:
        return Failure.from_exception(exc, "rollout")
    return _segment(rows, request.policy.version, goes_on)


def _resume(runner: Any) -> Cursor | None:
    """Where the segment starts: where the last one stopped, else at the state last
    answered by hand (if its episode goes on), else (None) at a reset. Cleared on the
    runner: set again only when this segment completes."""
    last = runner.last
    runner.last = None
    if type(last) is Cursor:
        return last
    if type(last) is tuple:  # a batch row: only a step whose episode goes on is one
        return Cursor(last[0], runner.steps_in_episode)
    if type(last) is not Step or runner.needs_reset:
        return None
    same_step = last.final_info is not None  # autoreset "same_step": already reset
    if (last.terminated or last.truncated) and not same_step:
        return None
    return Cursor(last.observation, runner.steps_in_episode)


def _segment(rows: dict[str, list[Any]], version: int, goes_on: bool) -> Segment:
    """The Segment of ``rows`` (by column) played on one env: each numeric column an
    array of its dtype, the others stacked where numpy can."""
    count = len(rows["rewards"])
    columns = {
        name: np.asarray(values, DTYPES[name]).reshape(count)
        if name in DTYPES  # a numeric column (the others are stacked where numpy can: _column)
        else _column(values)
        for name, values in rows.items()
    }
    return Segment(**columns, version=version, goes_on=goes_on)


_NUMERIC = (np.ndarray, np.generic, int, float, bool)


def _column(items: list[Any]) -> Any:
    """``items`` stacked into one array where numpy can (numbers, arrays of one shape),
    else the list."""
    if not items or not all(isinstance(item, _NUMERIC) for item in items):
        return items
    try:
        array = np.asarray(items)
    except ValueError:
        return items
    return items if array.dtype.hasobject else array

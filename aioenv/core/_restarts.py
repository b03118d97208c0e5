"""How an episode cut short and a restart show in the states aioenv hands out.

An env that fails while its episode is open (and is restarted) ends that episode like any
truncated episode: the step whose env failed is :func:`cut_short` (``truncated=True``,
reward 0, the last observation seen as the episode's final observation, the reason under
aioenv's own info key), and the new env's reset follows as an autoreset's does. The note
is ``info["aioenv"] == {"restarted": True, "reason": "..."}`` (documented in the failures
guide); it also marks the restarted env's first state. The workers write it; the episode
counter, the collector and the rollout ledger read it; this module is the one place that
knows its shape.

It is also the one place of the cut-short rule, which every supervisor follows (a pool's
worker, an env stepped in line, an engine child's revival): which episode a failure cuts
short (:func:`open_episode`), whether the restarted env's reset or the cut-short step
answers the request in flight (:func:`restart_answers`), and the states either hands out
(:func:`cut_short_state`, :func:`restarted_state`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import numpy as np
from gymnasium.vector.utils import iterate

from ._commands import is_reset
from ._environment import BatchStep, Step, take_rows, with_reset
from ._rollouts import Rollout

__all__ = [
    "EPISODE_TIMEOUT",
    "RESTART_KEY",
    "cut_short",
    "cut_short_batch",
    "cut_short_state",
    "episode_open",
    "failure_note",
    "is_restart_reset",
    "mark_restarted",
    "open_episode",
    "restart_answers",
    "restart_marker",
    "restart_note",
    "restarted_state",
]

#: The info key aioenv's own notes go under (the user's keys are never touched).
RESTART_KEY = "aioenv"
#: The reason an episode that ran out of its budget (the pool option ``episode_timeout``)
#: ends with: cut short like a failed one, though nothing failed.
EPISODE_TIMEOUT = "episode_timeout"

T = TypeVar("T")


def restart_marker(reason: str) -> dict[str, Any]:
    """The note of a restart whose cause reads ``reason``."""
    return {"restarted": True, "reason": reason}


def cut_short(last_observation: T, marker: dict[str, Any], first: Step[T] | None = None) -> Step[T]:
    """The step that ends an episode early, for a reason outside the task (its env failed
    and was replaced, say): ``truncated=True``, reward 0, ``marker`` in its info under
    :data:`RESTART_KEY`, and ``last_observation`` (the last one seen) as the episode's
    final observation. The next episode's ``first`` state (its reset), given under
    ``autoreset="same_step"``, is carried as an autoreset carries it: its observation and
    info (``marker`` added) are the step's, ``last_observation`` and ``marker`` go to
    ``final_observation``/``final_info`` (:func:`~aioenv.core._environment.with_reset`)."""
    cut = Step(last_observation, 0.0, False, True, {RESTART_KEY: marker})
    if first is None:
        return cut
    return with_reset(cut, Step(first.observation, info={**first.info, RESTART_KEY: marker}))


def cut_short_batch(
    last: BatchStep[Any],
    marker: dict[str, Any],
    first: BatchStep[Any] | None = None,
    space: Any = None,
) -> BatchStep[Any]:
    """:func:`cut_short` for every row of a batch (the envs one worker steps together are
    replaced together): ``last`` is the batch last seen, ``first`` the new envs' resets;
    ``space``, the batch's observation space, splits ``last``'s into rows (gymnasium's
    ``iterate``; None: arrays, and dicts and tuples of them, by row)."""
    rows = len(last)
    infos = {row: {RESTART_KEY: marker} for row in range(rows)}
    truncated = np.ones(rows, np.bool_)
    rewards, terminated = np.zeros(rows, np.float64), np.zeros(rows, np.bool_)
    if first is None:
        return BatchStep(last.observations, rewards, terminated, truncated, infos)
    observations = last.observations
    split = iterate(space, observations) if space is not None else None
    finals = dict(enumerate(split or (take_rows(observations, row) for row in range(rows))))
    reset_infos = {row: {**first.infos.get(row, {}), RESTART_KEY: marker} for row in range(rows)}
    return BatchStep(first.observations, rewards, terminated, truncated, reset_infos, finals, infos)


def episode_open(state: Any, autoreset: str) -> bool:
    """``state``, the last one handed out, leaves an episode going on that a failure now
    would cut short: a step or batch that did not end (or whose end already holds the next
    episode's reset, under ``autoreset="same_step"``). Custom states, rollout segments and
    no state at all open nothing."""
    if type(state) is Step:
        return autoreset == "same_step" or not (state.terminated or state.truncated)
    if type(state) is BatchStep:
        return autoreset == "same_step" or not bool(np.all(state.dones))
    return False


def open_episode(last: T | None, request: Any, autoreset: str) -> T | None:
    """``last``, the state last handed out, if ``request`` steps the episode it left open
    (see :func:`episode_open`): the episode that a failure of the request, or its budget's
    end, cuts short. None where there is none: no state yet, a reset or a rollout segment
    (which cuts its own episodes short) was asked, or that episode had ended."""
    if last is None or is_reset(request) or type(request) is Rollout:
        return None
    return last if episode_open(last, autoreset) else None


def restart_answers(open_: Any, autoreset: str) -> bool:
    """Whether the restarted env's first state answers the request in flight, where the
    failure cuts short the episode ``open_`` (:func:`open_episode`; None: none is open): it
    does where none is open, and under ``autoreset="same_step"``, whose cut-short step
    carries it (:func:`restarted_state`). Otherwise the cut-short step answers the request
    at once (:func:`cut_short_state`), and the new env's reset answers the next one, as a
    reset after an episode's end does."""
    return open_ is None or autoreset == "same_step"


def cut_short_state(last: Any, reason: str, first: Any = None, space: Any = None) -> Any:
    """The step that cuts short the episode ``last`` left open, for ``reason``: a Step's
    (:func:`cut_short`), or every row's of a batch (:func:`cut_short_batch`), carrying the
    new env's ``first`` state where it is given (``space``: a batch's observation space)."""
    marker = restart_marker(reason)
    if type(last) is Step:
        return cut_short(last.observation, marker, first)
    return cut_short_batch(last, marker, first, space)


def restarted_state(first: Any, cut: Any, reason: str, space: Any = None) -> Any:
    """The restarted env's ``first`` state as handed out: carried by the step that cuts
    short the episode ``cut`` left open (under same-step autoreset; None: none is cut
    short here), or by ``cut`` itself where it ended its episode (a Step that ended with no
    reset carried: the reset of its autoreset failed), else marked as a restart's
    (:func:`mark_restarted`)."""
    if cut is None or type(first) is not type(cut):
        return mark_restarted(first, reason)
    if type(cut) is Step and cut.done and cut.final_info is None:
        return with_reset(cut, mark_restarted(first, reason))
    return cut_short_state(cut, reason, first, space)


def mark_restarted(state: Any, note: str) -> Any:
    """The restarted env's first state, its info saying so with the restart's reason
    ``note`` (every row's, for a batch); any other state unchanged."""
    marker = restart_marker(note)
    if isinstance(state, Step):
        return dataclasses.replace(state, info={**state.info, RESTART_KEY: marker})
    if isinstance(state, BatchStep):
        infos = {
            row: {**state.infos.get(row, {}), RESTART_KEY: marker} for row in range(len(state))
        }
        # The batch's vector-form infos would no longer match its rows: dropped, the
        # vector env then merges the rows' own infos.
        return dataclasses.replace(state, infos=infos, vector_infos=None, info_types=None)
    return state


def restart_note(state: Step[Any]) -> str | None:
    """The reason of the restart ``state`` reports (a cut-short step, in its info or its
    ``final_info``, or a restarted env's first state), else None."""
    for info in (state.info, state.final_info):
        marker = None if info is None else info.get(RESTART_KEY)
        if isinstance(marker, dict) and marker.get("restarted"):
            return str(marker.get("reason", ""))
    return None


def failure_note(state: Step[Any]) -> str | None:
    """The reason of the failure that cut ``state``'s episode short (``state`` ends it),
    else None: an episode that ended by itself, by its time limit or by running out of
    its budget (:data:`EPISODE_TIMEOUT`) ended as it should."""
    if not state.truncated:
        return None
    marker = state.info.get(RESTART_KEY)
    if state.final_info is not None and RESTART_KEY in state.final_info:
        marker = state.final_info[RESTART_KEY]  # "same_step": the info is the next reset's
    if not isinstance(marker, dict) or marker.get("reason") == EPISODE_TIMEOUT:
        return None
    return str(marker.get("reason", "")) if marker.get("restarted") else None


def is_restart_reset(state: Step[Any]) -> bool:
    """``state`` is a restarted env's reset handed out in place of a request's state (no
    episode was open to cut short, or the request was a reset): it starts an episode."""
    marker = state.info.get(RESTART_KEY)
    restarted = isinstance(marker, dict) and bool(marker.get("restarted"))
    return restarted and not (state.terminated or state.truncated)

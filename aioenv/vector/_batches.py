"""An :class:`~aioenv.AioVectorEnv`'s actions and results in gymnasium's batched form: a
batch of actions split into the workers' requests, and the workers' states gathered into
batched observations, rewards, flags and infos (with ``_key`` masks).

:mod:`aioenv.vector._layout` says which rows belong to which worker; this is the vector
env's side of it, which knows gymnasium's 5-tuple and keeps the arrays it hands out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium.spaces import Box
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from ..core._environment import BatchStep
from ..core._errors import InvalidAction
from ..core._gymnasium import split_rows
from ..env_side._batch_rows import zero_rows
from ..env_side._infos import add_info_of
from ..pool._actions import explain_invalid_action
from ._infos import AddInfo
from ._layout import EnvLayout

__all__ = ["Result", "VectorBatches"]

#: What ``step``, ``step_wait`` and ``recv`` return: observations, rewards, terminations,
#: truncations, infos.
Result = tuple[
    Any, npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.bool_], dict[str, Any]
]

_ONLY_WORKER = [0]  # inline envs: one group of every env


class VectorBatches:
    """The batched actions and results of a vector env whose envs ``layout`` places.

    Actions are split by ``single_action_space`` batched (for every env, the vector env's
    action space: gymnasium's ``batch_space`` of it, made once per number of envs);
    ``add_info`` adds one env's info to the vector infos, masks and all, gymnasium's way
    (:func:`aioenv.env_side._infos.add_info`). Rewards and flags are new arrays at every
    gathering, so those handed out before stay as they were. Observations are copied
    once, from what the workers gave into the arrays handed out: new arrays with ``copy``
    (gymnasium's default), else arrays reused from call to call (a worker's own view where
    one worker gives them all), valid until the next call. Where the envs keep every
    env's latest observation in one batch themselves (the engine's buffer), ``latest()``
    returns it, as handed out (``latest`` is None where they do not), and every env's
    observations come from there.

    Between calls it keeps every env's latest observation (a masked reset leaves the other
    envs' as they were). A Box space's observations are kept as each worker last gave them,
    not copied: an array of its own, or a view of its shared memory, which stays what the
    worker last answered until the vector env sends it another step or reset (controls
    leave it alone), and every call that sends one takes the answer before it returns, or
    drops it; the view then shows the env's newest observation, as gymnasium's
    ``AsyncVectorEnv`` with shared memory does. :meth:`_box_batch` copies them once, into
    the array the vector env returns: a new one each time with ``copy``, else one array
    reused (or, for a single worker's rows, its view itself), valid until the next call."""

    def __init__(
        self,
        layout: EnvLayout,
        single_observation_space: Any,
        single_action_space: Any,
        add_info: AddInfo,
        *,
        copy: bool = True,
        latest: Callable[[], Any] | None = None,
    ) -> None:
        self._layout = layout
        self._latest = latest
        self._single_action_space = single_action_space
        self._add_info = add_info
        #: The batched action space of ``k`` envs, by ``k`` (made once for each).
        self._batched_actions = functools.cache(functools.partial(batch_space, single_action_space))
        #: For results of some envs' rows (an inline recv's, in :meth:`received`), by their
        #: number: a layout of one group of them and the rule of adding infos (``add_info``)
        #: over them.
        self._row_layout = functools.cache(_row_layout)
        self._box = isinstance(single_observation_space, Box)
        self._copy = copy
        self._single_space = single_observation_space
        #: Each env's latest observation: for spaces other than Box, and for any space where
        #: every worker steps one env (its state holds one observation, not a batch).
        self._per_env = zero_rows([single_observation_space] * layout.num_envs)
        #: The batched observation space of a group of ``k`` envs, by ``k``.
        self._batched = functools.cache(functools.partial(batch_space, single_observation_space))
        #: Box observations by first env: the rows of the worker that gave them.
        self._given: dict[int, Any] = {}
        #: With copy=False, the array the observations handed out are joined into, reused
        #: from call to call: Box batches stacked (:meth:`_box_batch`) or, for every other
        #: case, per-env observations joined (the vector env takes one way only, as its
        #: layout and space decide).
        self._reused: Any = None
        self._new_step()

    # Actions out --------------------------------------------------------------------------
    #: ``check_actions``: each batch of actions is checked (:meth:`check_actions`) before
    #: any of it is sent (``AioVectorEnv.from_pool`` takes its pool's check over).
    checks_actions = False

    def check_actions(self, actions: Any, env_ids: Any) -> None:
        """InvalidAction naming the env of ``env_ids`` whose action of ``actions`` (a
        batch of theirs) is not in an env's action space (for parallel envs, its lanes')."""
        try:
            per_env = split_rows(self._batched_actions(len(env_ids)), actions)
        except (TypeError, ValueError, IndexError):
            return  # not a batch of these envs' actions: the step says what is wrong
        space = self._single_action_space
        for env_id, action in zip(env_ids, per_env, strict=False):
            if not space.contains(action):
                reason = explain_invalid_action(action, space)
                raise InvalidAction(f"AioVectorEnv env {env_id}: {reason}")

    def step_requests(self, actions: Any, call: str = "step()") -> tuple[list[int], list[Any]]:
        """The workers a step of every env goes to and their requests (the envs and one
        action each, where they are sent to ``by_env``); ``call`` is named in errors."""
        num_envs = self._layout.num_envs
        batch = list(iterate(self._batched_actions(num_envs), actions))
        if len(batch) != num_envs:
            raise ValueError(
                f"{call} got {len(batch)} actions for {num_envs} envs; nothing was sent"
            )
        if self._layout.batched and not self._layout.by_env:
            requests = self._layout.actions(self._single_action_space, actions, batch)
            return list(self._layout.all_workers), requests
        return list(range(num_envs)), batch

    def send_requests(self, actions: Any, env_ids: list[int]) -> tuple[list[int], list[Any]]:
        """The workers that step the envs ``env_ids`` and their requests, from a batch of
        ``len(env_ids)`` actions (``actions[k]`` for env ``env_ids[k]``), split into one
        per env as gymnasium's ``iterate`` splits them."""
        per_env = split_rows(self._batched_actions(len(env_ids)), actions)
        if len(per_env) != len(env_ids):
            raise ValueError(
                f"send() got {len(per_env)} actions for the {len(env_ids)} envs {env_ids}; "
                "nothing was sent"
            )
        return self._layout.sends(self._single_action_space, actions, per_env, env_ids)

    # Results in -----------------------------------------------------------------------------
    #: Where a list is set here, every gathering (:meth:`gather`) leaves its workers and
    #: states in it: SB3's ``AioVecEnv`` reads the envs' infos as they gave them from there
    #: (the vector env's are gymnasium's arrays, of numpy types), then empties it.
    kept: list[Any] | None = None

    def stepped(self, workers: list[int], states: list[Any]) -> Result:
        """What a lockstep step returns, from these workers' states."""
        infos = self.gather(workers, states)
        return self.observations(), self._rewards, self._terminated, self._truncated, infos

    def received(self, workers: list[int], states: list[Any], env_ids: list[int]) -> Result:
        """What ``recv`` returns, from these workers' states: a row per env of
        ``env_ids``, in that order, which ``infos["env_id"]`` gives (replacing an
        ``"env_id"`` info of the envs' own). Envs sent to ``by_env`` answer in one
        BatchStep of the rows ``env_ids``, the same under each of them."""
        rows = np.asarray(env_ids, dtype=np.int64)
        if self._layout.by_env:
            # Inline envs, stepped when asked: the BatchStep's arrays are new, so they are
            # handed out as they are, with infos over its rows.
            batch = states[0]
            infos: dict[str, Any] = {}
            if batch.infos or batch.final_infos:
                layout, add_info = self._row_layout(len(env_ids))
                infos = layout.infos_of(_ONLY_WORKER, [batch], add_info)
            infos["env_id"] = rows
            return batch.observations, batch.rewards, batch.terminated, batch.truncated, infos
        # Grouped workers: the rows are these workers' envs, one worker after another, so
        # their own infos joined are the rows' (where they join).
        joined = self._layout.joined_rows(states) if self._layout.batched else None
        if joined is None:
            infos = info_rows(self.gather(workers, states), rows)
        else:
            self._new_step()
            self._write(workers, states)
            infos = joined
        infos["env_id"] = rows
        return (
            self.observations(rows, workers),
            self._rewards[rows],
            self._terminated[rows],
            self._truncated[rows],
            infos,
        )

    def infos_of(self, parts: dict[int, BatchStep[Any]]) -> dict[str, Any]:
        """The infos of a step whose workers ``parts`` (by id) gave some, each in a
        BatchStep of its rows: in gymnasium's vector form over every env."""
        return self._layout.infos_of(list(parts), list(parts.values()), self._add_info)

    def gather(self, workers: list[int], states: list[Any]) -> dict[str, Any]:
        """Write these workers' states into the envs' observations, and into new arrays of
        rewards and flags (those handed out before stay as they were); their infos,
        indexed by env (the workers and states left in :attr:`kept` where it is set)."""
        self._new_step()
        if self.kept is not None:
            self.kept[:] = workers, states
        if self._layout.batched:
            self._write(workers, states)
            return self._layout.infos_of(workers, states, self._add_info)
        infos: dict[str, Any] = {}
        observations = self._per_env
        rewards, terminated, truncated = self._rewards, self._terminated, self._truncated
        for i, step in zip(workers, states, strict=True):
            observations[i] = step.observation
            rewards[i], terminated[i], truncated[i] = step.reward, step.terminated, step.truncated
            if step.final_info is not None:
                final = {"final_obs": step.final_observation, "final_info": step.final_info}
                infos = self._add_info(infos, final, i)
            infos = self._add_info(infos, step.info, i)
        return infos

    def observations(
        self, rows: npt.NDArray[np.int64] | None = None, workers: list[int] | None = None
    ) -> Any:
        """Every env's latest observation, batched, or those of the envs ``rows``: one copy
        of what the workers gave (where ``workers`` are given, ``rows`` are their envs, one
        worker's after another, as a ``recv``'s are; any other rows are picked from every
        env's)."""
        if rows is None and self._latest is not None:
            return self._latest()
        if self._layout.batched and self._box:
            parts = self._layout.parts
            if workers is not None:
                return self._box_batch([parts[w] for w in workers])
            return self._box_batch(parts) if rows is None else self._box_batch(parts)[rows]
        per_env = self._per_env
        chosen = per_env if rows is None else [per_env[i] for i in rows]
        space = self._single_space
        if self._copy or rows is not None:
            out = create_empty_array(space, len(chosen))
        else:
            if self._reused is None:
                self._reused = create_empty_array(space, len(chosen))
            out = self._reused
        return concatenate(space, chosen, out)  # type: ignore[arg-type]

    def _write(self, worker_ids: list[int], batches: list[BatchStep[Any]]) -> None:
        """Write each worker's BatchStep into its envs' rows."""
        for worker_id, batch in zip(worker_ids, batches, strict=True):
            part = self._layout.parts[worker_id]
            self._observe(part, batch.observations)
            self._rewards[part] = batch.rewards
            self._terminated[part] = batch.terminated
            self._truncated[part] = batch.truncated

    def _observe(self, part: slice, observations: Any) -> None:
        if self._box:
            self._given[part.start] = observations
            return
        batched = self._batched(part.stop - part.start)
        for index, observation in enumerate(iterate(batched, observations), part.start):
            self._per_env[index] = observation

    def _box_batch(self, parts: list[slice]) -> Any:
        """The Box observations of the envs ``parts`` (each a worker's rows), in that
        order: one copy of what the workers gave (zeros for an env never observed)."""
        space = self._single_space
        count = sum(part.stop - part.start for part in parts)
        chosen = [self._given.get(part.start) for part in parts]
        if not self._copy and len(chosen) == 1:
            given = chosen[0]
            if (
                type(given) is np.ndarray
                and given.dtype == space.dtype
                and given.shape == (count, *space.shape)
            ):
                return given  # zero copies: valid until the worker's next step
        if self._copy:
            out = np.empty((count, *space.shape), space.dtype)
        else:
            reused = self._reused
            if reused is None or len(reused) < count:
                reused = self._reused = np.empty((len(self._per_env), *space.shape), space.dtype)
            out = reused[:count]
        rows = [
            np.zeros((part.stop - part.start, *space.shape), space.dtype)
            if latest is None
            else latest
            for part, latest in zip(parts, chosen, strict=True)
        ]
        # gymnasium's concatenate's rules: cast same_kind (int64 300 is no uint8), no broadcast
        return np.concatenate(rows, out=out, casting="same_kind")

    def _new_step(self) -> None:
        """New arrays of rewards and flags (those handed out before stay as they were)."""
        size = len(self._per_env)
        self._rewards = np.zeros(size, np.float64)
        self._terminated = np.zeros(size, np.bool_)
        self._truncated = np.zeros(size, np.bool_)


def _row_layout(size: int) -> tuple[EnvLayout, AddInfo]:
    """A layout of one group of ``size`` rows, and the rule of adding infos over them."""
    return EnvLayout([size], batched=True), add_info_of(size)


def check_batch(actions: Any, call: str, count: int | None) -> None:
    """TypeError for a str (or bytes) given as a batch of actions: it is iterable, so it
    would be split into one action per character."""
    if isinstance(actions, (str, bytes)):
        many = "" if count is None else f"{count} "
        raise TypeError(
            f"{call} takes a batch of {many}actions, one per env (an array such as "
            f"envs.action_space.sample()), got the {type(actions).__name__} {actions!r}: a "
            f"{type(actions).__name__} is not a batch of actions; nothing was sent"
        )


def info_rows(infos: dict[str, Any], rows: npt.NDArray[np.int64]) -> dict[str, Any]:
    """Infos indexed by env (gymnasium's vector form) cut down to the envs ``rows``, in
    that order. What is no array is kept as it is: gymnasium sets an env's value into a
    dict that another env made of the same key (under the env's index), and that value
    has no rows to cut."""
    return {
        key: info_rows(value, rows)
        if type(value) is dict
        else value[rows]
        if isinstance(value, np.ndarray)
        else value
        for key, value in infos.items()
    }

"""Several envs behind one worker: a batch of actions in, one :class:`BatchStep` out.

With ``envs_per_worker=k`` a worker's env is a :class:`VectorSource` of ``k`` env sources,
and the env side runs a :class:`VectorRunner`: one :class:`~aioenv.env_side._runner.EnvRunner` per
env (so autoreset, time limits and failures mean exactly what they mean for one env),
stepped in turn, their states stacked into one batch. A process worker then exchanges one
message per batch each way, and the parent does no work per env.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core._commands import RESET, Command, Reset, is_reset
from ..core._environment import BatchStep, Step, VectorSource
from ..core._gymnasium import split_rows
from ..core._messages import ControlRequest, EpisodeOptions, Failure, PerEnv, options_refused
from ..core._rollouts import Rollout, Segment
from ..core._seeds import GroupSeed, env_seeds, per_env_seeds, reset_mask
from ._batch_rows import batched_space, columns_of, flag_array, misfit, stack_rows, zero_rows
from ._infos import batch_vector_infos, flat_infos
from ._plan import drive
from ._runner import EnvRunner
from ._segment import PolicyCache, rollout_plan

__all__ = ["Runner", "VectorRunner", "make_runner"]

_NOT_STEPS = "envs_per_worker needs gymnasium envs (aioenv.Step states)"


def make_runner(
    source: Any,
    seed: GroupSeed,
    episode: EpisodeOptions | None = None,
    policies: PolicyCache | None = None,
) -> Runner:
    """The runner for a worker's env source, first reset with ``seed``; ``policies``: its
    process's rollout policies (see :class:`~aioenv.env_side._segment.PolicyCache`)."""
    if isinstance(source, VectorSource):
        return VectorRunner(source, seed, episode, policies)
    one = seed if seed is None or isinstance(seed, int) else next(iter(seed))
    return EnvRunner(source, one, episode, policies)


class VectorRunner:
    """Answers batch requests for the envs of a :class:`VectorSource`.

    A step takes one action per env (anything gymnasium's ``iterate`` splits over the
    batched action space). A reset takes ``RESET`` or ``Reset(seed, options)``, where
    ``seed`` is None, an int (env ``i`` gets ``seed + i``, gymnasium's convention) or one
    seed per env, and ``options["reset_mask"]`` (bool per env) resets only those envs: the
    others keep their last observation. An env that raises fails the whole request (its
    Failure says which env, and carries those of the other envs that raised: every env
    is stepped, as it would be in a worker of its own); the worker's restart policy then
    rebuilds all of them.
    """

    def __init__(
        self,
        source: VectorSource,
        seed: GroupSeed,
        episode: EpisodeOptions | None,
        policies: PolicyCache | None = None,
    ):
        seeds = env_seeds(seed, len(source.sources))
        self.policies = PolicyCache() if policies is None else policies
        self.runners = [
            EnvRunner(s, env_seed, episode, self.policies)
            for s, env_seed in zip(source.sources, seeds, strict=True)
        ]
        self.size = len(self.runners)
        self.build_failure: Failure | None = None
        #: The batched observation and action spaces, once built.
        self.spaces: tuple[Any, Any] = (None, None)
        self._single_space: Any = None
        self._action_batch: Any = None  # env 0's action space batched: splits the actions
        self._observations: list[Any] = [None] * self.size
        self.built = False
        #: Where a Box batch is stacked when every row fits it exactly: the worker's
        #: shared memory, which the reply then points to instead of copying into it.
        self.stack_into: np.ndarray[Any, Any] | None = None
        #: Step batches of Box observations cast to the space's dtype (see stack_rows): an
        #: AioVectorEnv's envs in line, whose batches it hands out; a worker's go as given.
        self.cast = False
        #: What answers in place of an env's failure (envs restarted in line, see
        #: :mod:`aioenv.env_side._env_restarts`): ``recover(env, request, failure)``, the
        #: env's state or the failure to report. None: the failure is reported.
        self.recover: Callable[[int, Any, Failure], Any] | None = None

    def build(self) -> Failure | None:
        """Build the envs, once: None, or :attr:`build_failure`, the failure of the first
        env that could not be built (the others after it are not)."""
        if self.built:
            return self.build_failure
        self.built = True
        for index, runner in enumerate(self.runners):
            if (failure := runner.build()) is not None:
                self.build_failure = _in_env(failure, index)
                return self.build_failure
        observations = [runner.spaces[0] for runner in self.runners]
        actions = [runner.spaces[1] for runner in self.runners]
        self._single_space = observations[0]
        self._observations = zero_rows(observations)
        self._action_batch = batched_space(actions[:1] * self.size)
        self.spaces = (batched_space(observations), batched_space(actions))
        return None

    def handle(self, action: Any) -> Any:
        """Answer ``RESET``, a ``Reset(...)`` or a batch of actions: a BatchStep or a Failure."""
        if type(action) is Rollout:
            return self._rollout(action)
        try:
            if isinstance(action, Reset):
                return self.reset(action.seed, action.options)
            if isinstance(action, Command) and action is RESET:
                return self.reset()
            return self.step(action)
        except Exception as exc:  # stacking the envs' answers: reported like an env's error
            failure = Failure.from_exception(exc, "batching the envs' states")
            env = misfit(self._single_space, self._observations)
            return failure if env is None else _in_env(failure, env)

    def _rollout(self, request: Rollout) -> list[Segment] | Failure:
        """Each env plays the segment in turn (``num_steps`` transitions each), with the
        single-observation policy; the answer is their segments, one per env, env 0's
        first."""
        if (failure := self.build()) is not None:
            return failure
        segments: list[Segment] = []
        for index, runner in enumerate(self.runners):
            segment = drive(rollout_plan(runner, request, index))
            if isinstance(segment, Failure):
                return _in_env(segment, index)
            segments.append(segment)
        return segments

    def reset(self, seed: Any = None, options: dict[str, Any] | None = None) -> Any:
        """Reset the envs (see the class's docstring for ``seed`` and the reset mask in
        ``options``): a BatchStep, or a Failure. Each env's ``Reset`` is answered by
        :meth:`step_rows`, as a step's action is (failures, restarts in line, the batch);
        a masked reset's batch then has a row for every env."""
        if (failure := self.build()) is not None:
            return failure
        try:  # the seeds and the mask, read as a vector env reads them
            seeds = per_env_seeds(seed, self.size, "reset")
            mask, rest = reset_mask(options, self.size)
        except (TypeError, ValueError) as exc:
            return Failure.from_exception(exc, "reset", "the reset sent")
        if mask is None:  # every env's Steps, batched as a step's
            return self.step_rows([Reset(seed, options) for seed in seeds], resets=True)
        options = rest or None  # the envs' own reset has no mask to see
        asked = np.flatnonzero(mask).tolist()  # (reset_mask refuses a mask of no env)
        part = self.step_rows([Reset(seeds[i], options) for i in asked], asked, resets=True)
        if isinstance(part, Failure):
            return part
        # Every env's row, as a reset's (reward 0.0, flags False): those of the envs not
        # asked are their last observation, with no info.
        infos = {asked[row]: info for row, info in part.infos.items()}
        rows = [
            (observation, 0.0, False, False, infos.get(index))
            for index, observation in enumerate(self._observations)
        ]
        return self._stepped(rows, None, False, True)

    def step(self, actions: Any) -> Any:
        if (failure := self.build()) is not None:
            return failure
        try:
            rows = self.split(actions)
        except Exception as exc:
            return Failure.from_exception(exc, "step (splitting them)", "the actions sent")
        if len(rows) != self.size:
            count = ValueError(f"a batch of {len(rows)} actions for {self.size} envs")
            return Failure.from_exception(count, "step", "the actions sent")
        return self.step_rows(rows)

    def step_rows(
        self, requests: list[Any], envs: list[int] | None = None, resets: bool = False
    ) -> Any:
        """Answer ``requests[k]`` for env ``k`` (``envs`` None: every env, in order), or
        for env ``envs[k]`` alone (the envs are built), in order: the BatchStep of every
        env, or of the envs ``envs``, a row each in that order (the envs not asked are
        untouched); or the first failure of an env after every env asked has answered.
        An answer that is no state stops the rest from being asked. A request is an
        action, or with ``resets`` also ``RESET`` or ``Reset(seed, options)`` with one
        env's seed (without, no request is looked at)."""
        order = range(self.size) if envs is None else envs
        runners = self.runners
        states: list[Any] = []
        failures: list[Failure] = []
        rows_only = True  # every answer a step_row tuple
        # One loop over the envs, no call per env beyond the env's own: on inline envs
        # this is the whole of a step's cost besides the envs'.
        for index, request in zip(order, requests, strict=True):
            runner = runners[index]
            if resets and isinstance(request, (Reset, Command)):
                state = runner.handle(request)  # RESET or a Reset(...): answered as reset() does
            else:
                state = runner.step_row(request)
            if type(state) is not tuple:
                rows_only = False
                if not isinstance(state, Step):
                    if not isinstance(state, Failure):
                        during = "reset" if resets and is_reset(request) else "step"
                        return Failure.from_exception(options_refused(_NOT_STEPS), during)
                    if self.recover is not None:
                        state = self.recover(index, request, state)
                    if isinstance(state, Failure):
                        failures.append(_in_env(state, index))
            states.append(state)
        if failures:
            return _first_of(failures)
        return self._stepped(states, envs, rows_only, resets)

    def split(self, actions: Any) -> list[Any]:
        """One action per env, as gymnasium's ``iterate`` splits them (for the array
        spaces ``iterate`` is ``iter``: the same rows, without its dispatch)."""
        space = self._action_batch
        if space is None:
            return list(actions)
        return split_rows(space, actions)

    def _stepped(
        self, states: list[Any], envs: list[int] | None, rows_only: bool, resets: bool
    ) -> BatchStep[Any]:
        """The BatchStep of a step of every env (``states[i]`` is env ``i``'s Step, or its
        :meth:`~aioenv.env_side._runner.EnvRunner.step_row` tuple), or of the envs
        ``envs`` alone (``states[k]`` is env ``envs[k]``'s), a row each in that order.
        ``rows_only``: every state is such a tuple (no final observations then);
        ``resets``: some may be a reset's (see :meth:`step_rows`)."""
        infos: dict[int, dict[str, Any]] = {}
        finals: dict[int, Any] = {}
        final_infos: dict[int, dict[str, Any]] = {}
        entries: list[tuple[int, dict[str, Any]]] = []
        observations: list[Any]
        rewards: Sequence[float]
        terminated: Sequence[bool]
        truncated: Sequence[bool]
        if rows_only and states:  # the columns at once, not a row at a time
            # (step_row's tuples all have 5 items: no strict zip to pay for)
            columns, rewards, terminated, truncated, info_rows = zip(*states)  # noqa: B905
            observations = list(columns)
            if any(info_rows):
                infos = {index: info for index, info in enumerate(info_rows) if info}
                entries = list(infos.items())
        else:
            observations, rewards, terminated, truncated = columns_of(
                enumerate(states), infos, finals, final_infos, entries
            )
        if envs is None:
            self._observations = observations
        else:  # the others' stay as they were (a masked reset hands them out)
            for index, observation in zip(envs, observations, strict=True):
                self._observations[index] = observation
        size = len(states)
        stacked = stack_rows(
            self._single_space, observations, self._observations, self.stack_into, self.cast
        )
        rewards_array = np.array(rewards, np.float64)
        # The batch's observations, rewards and flags, which every answer below begins with.
        arrays = (stacked, rewards_array, flag_array(terminated, size), flag_array(truncated, size))
        if not entries:  # most steps of envs that give no infos
            return BatchStep(*arrays, {}, {}, {}, {}, {})
        # The infos packed, one record per env, where every env gave the same flat scalar
        # keys and none ended an episode under same-step autoreset, in a batch of steps
        # alone (an engine child tells the parent the keys of the infos it packs, which
        # are a step's); else in gymnasium's vector form (or per row, see
        # batch_vector_infos).
        packs = len(infos) == size and not finals and not resets
        packed = flat_infos(list(infos.values())) if packs else None
        vector = (None, None) if packed is not None else batch_vector_infos(entries, infos, size)
        return BatchStep(*arrays, infos, finals, final_infos, *vector, packed)

    def control(self, request: ControlRequest) -> Any:
        """``configure`` applies to every env, ``policy`` is loaded once for all; other
        requests go to each env in turn and answer a list (one result per env), or the
        first Failure."""
        if request.op == "policy":
            return self.policies.load(request.kwargs["package"])
        if request.op != "configure" and (failure := self.build()) is not None:
            return failure
        results = []
        for index, runner in enumerate(self.runners):
            result = runner.control(_for_env(request, index))
            if isinstance(result, Failure):
                return _in_env(result, index)
            results.append(result)
        return None if request.op in ("configure", "set") else results

    def close(self) -> Failure | None:
        failures = [runner.close() for runner in self.runners]
        return next((failure for failure in failures if failure is not None), None)


#: What every worker kind drives: an :class:`EnvRunner` or a :class:`VectorRunner`.
Runner = EnvRunner | VectorRunner


def _for_env(request: ControlRequest, index: int) -> ControlRequest:
    """``set`` with :class:`PerEnv` values (``apply`` with a function per env): env
    ``index``'s own."""
    if request.op in ("set", "apply") and request.args and isinstance(request.args[0], PerEnv):
        return dataclasses.replace(request, args=(request.args[0].values[index], *request.args[1:]))
    return request


def _in_env(failure: Failure, index: int) -> Failure:
    return dataclasses.replace(
        failure, during=f"{failure.during} of env {index} of the batch", env=index, ended=None
    )


def _first_of(failures: list[Failure]) -> Failure:
    """The failure of a request in which several envs of the batch raised: the first
    one's, carrying the others (every env was stepped, as separate workers would be)."""
    return dataclasses.replace(failures[0], more=tuple(failures[1:]))

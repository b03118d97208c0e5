"""The environment side of every worker kind: build the env, answer reset, step and
control requests, apply the episode options (autoreset, time limit), report
failures with their traceback. Every worker kind runs this same code (coroutine envs through
the async driver of the same plans, see :mod:`aioenv.env_side._plan`), so they cannot drift apart
in semantics."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core._agents import AgentLanesEnv
from ..core._commands import RESET, Command, Reset
from ..core._environment import PLAIN_STEP, EnvAdapter, Environment, EnvSource, Step, with_reset
from ..core._gymnasium import (
    AsyncGymnasiumEnvironment,
    GymnasiumEnvironment,
    as_environment,
    build_environment,
    gymnasium_reset,
    gymnasium_step,
)
from ..core._messages import ControlRequest, EpisodeOptions, Failure, options_refused, resets_next
from ..core._rollouts import Rollout
from ._plan import Plan, drive
from ._segment import PolicyCache, rollout_plan

__all__ = ["NOT_ACTIONS", "EnvRunner", "answer_control"]

#: Requests that are not a plain step's action.
NOT_ACTIONS = (ControlRequest, Command, Reset, Rollout)
#: The adapters whose attributes are their wrapped env's.
_ADAPTERS = (GymnasiumEnvironment, AsyncGymnasiumEnvironment)
#: Makes a Step without its __init__ (see PLAIN_STEP): a gymnasium env's states are built
#: here on its hot path, with no call into the adapter or the Step.
_new_step = object.__new__


class EnvRunner:
    """Owns one environment and answers requests for it.

    The seed is used for the first reset only; later resets pass ``seed=None`` so the env's
    RNG continues and consecutive episodes differ (a ``Reset(seed=...)`` overrides).
    ``policies``: the rollout policies of its process, shared with the process's other
    runners (a cache of its own when not given).
    """

    #: Turns what the source built into an environment (coroutine envs adapt their own).
    _adapt = staticmethod(as_environment)

    def __init__(
        self,
        source: EnvSource,
        seed: int | None,
        episode: EpisodeOptions | None = None,
        policies: PolicyCache | None = None,
    ) -> None:
        #: What the env is built from, and the seed of its first reset.
        self.source = source
        self.policies = PolicyCache() if policies is None else policies
        self.seed = seed
        self._seed_used = False
        self.configure(episode or EpisodeOptions())
        self.env: Environment[Any, Any] | None = None
        self.build_failure: Failure | None = None
        #: The gymnasium env itself when ``env`` is its adapter: its steps take
        #: :meth:`step_row`'s path.
        self.gym: Any = None
        #: Autoreset "next_step" resets the env at the next step.
        self.needs_reset = False
        #: Steps since the env's last reset.
        self.steps_in_episode = 0
        #: What the next rollout segment goes on from: a Cursor where the last segment
        #: stopped, or the state last answered by hand (one store per step on the hot
        #: path; a :meth:`step_row` tuple in a batch), or None (a reset).
        self.last: Any = None
        #: What :attr:`last` was before the request that failed last (a failure's only
        #: bookkeeping: envs restarted in line cut short the episode it left open).
        self.previous: Any = None

    def configure(self, episode: EpisodeOptions) -> None:
        """Apply the episode options from now on."""
        self.episode = episode
        # The autoreset rule, asked once: the runner's every episode end reads it.
        self._resets_after_end = resets_next(episode.autoreset, True)

    def build(self) -> Failure | None:
        """Build the env, once: None, or :attr:`build_failure`, the failure of its
        construction (answered by every request that needs the env)."""
        if self.env is not None or self.build_failure is not None:
            return self.build_failure
        try:
            self.env = build_environment(self.source, self._adapt)
        except Exception as exc:
            self.build_failure = Failure.from_exception(exc, "construction")
            return self.build_failure
        if type(self.env) is GymnasiumEnvironment:
            self.gym = self.env.env
        return None

    @property
    def built(self) -> bool:
        """``build`` ran: the env exists, or its construction failed."""
        return self.env is not None or self.build_failure is not None

    @property
    def spaces(self) -> tuple[Any, Any]:
        return (
            getattr(self.env, "observation_space", None),
            getattr(self.env, "action_space", None),
        )

    def handle(self, action: Any) -> Any:
        """Answer ``RESET``, a ``Reset(...)``, a step or a
        :class:`~aioenv.core._rollouts.Rollout`: the state (a Segment), or a Failure. A
        reset or step between rollouts makes the next rollout start from a reset. A built
        gymnasium env's steps and resets are answered in line, with no plan."""
        if self.gym is not None:  # a gymnasium env's steps and resets, without a plan
            if not isinstance(action, NOT_ACTIONS):
                return self.step_row(action, True)
            if action is RESET:
                return self._reset_in_line(None, None)
            if isinstance(action, Reset):
                return self._reset_in_line(action.seed, action.options)
        return drive(self.handle_plan(action))

    def handle_plan(self, action: Any) -> Plan[Any]:
        """:meth:`handle`'s plan (see :mod:`aioenv.env_side._plan`)."""
        if type(action) is Rollout:
            return rollout_plan(self, action)
        if isinstance(action, Reset):
            return self.reset_plan(action.seed, action.options)
        if isinstance(action, Command) and action is RESET:
            return self.reset_plan()
        return self.step_plan(action)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        """Reset and return the state, or a :class:`Failure`."""
        return drive(self.reset_plan(seed, options))

    def reset_plan(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Plan[Any]:
        """:meth:`reset`'s plan."""
        if self.env is None and (failure := self.build()) is not None:
            return failure
        try:
            state = yield self._reset(self.env, seed, options)
        except Exception as exc:
            return Failure.from_exception(exc, "reset")
        self.last = state
        return state

    def _reset_in_line(self, seed: int | None, options: dict[str, Any] | None) -> Any:
        """:meth:`reset_plan` for a built gymnasium env, as a plain call."""
        try:
            state = self._reset(self.env, seed, options)
        except Exception as exc:
            return Failure.from_exception(exc, "reset")
        self.last = state
        return state

    def _reset(self, env: Any, seed: int | None, options: dict[str, Any] | None) -> Any:
        """The episode's bookkeeping of a reset, then the env's call: its result (a
        gymnasium env's, as the Step its adapter would make)."""
        if self.episode.max_episode_steps is not None and not isinstance(env, _ADAPTERS):
            raise options_refused(
                "max_episode_steps needs gymnasium envs: aioenv cannot mark a custom "
                "Environment's state as truncated; end the episode in the env itself (its "
                "terminated(state)) and drop the max_episode_steps option"
            )
        if seed is None and not self._seed_used:
            seed = self.seed
        self._seed_used = True
        self.needs_reset = False
        self.steps_in_episode = 0
        if self.gym is not None:  # the adapter's reset, with no call into it
            pair = self.gym.reset(seed=seed, options=options)
            if type(pair) is not tuple or len(pair) != 2:  # (checked with no call)
                return gymnasium_reset(self.gym, pair)  # a tuple's subclass, or the error
            observation, info = pair
            step = _new_step(Step)
            step.__dict__.update(
                PLAIN_STEP, observation=observation, info={} if info is None else info
            )
            return step
        if options is not None:
            return env.reset(seed=seed, options=options)
        return env.reset(seed=seed)

    def step(self, action: Any) -> Any:
        """Step and return the state, or a :class:`Failure`."""
        return drive(self.step_plan(action))

    def step_plan(self, action: Any) -> Plan[Any]:
        """:meth:`step`'s plan."""
        if self.env is None and (failure := self.build()) is not None:
            return self._failed(failure)
        env = self.env
        assert env is not None
        try:
            if self.needs_reset:  # autoreset "next_step": this action is ignored
                self.last = state = yield self._reset(env, None, None)
                return state
            state = yield env.step(action)
        except Exception as exc:
            return self.step_raised(exc)
        state, reset_now = self._settle(env, state)
        if reset_now:
            return (yield from self._autoreset_plan(env, state))
        return state

    def step_raised(self, exc: Exception) -> Failure:
        """What a step whose env raised ``exc`` answers (an async env's step call too,
        see :meth:`~aioenv.env_side._async_runner.AsyncEnvRunner.step_call`)."""
        return self._failed(Failure.from_exception(exc, "step"))

    def _failed(self, failure: Failure) -> Failure:
        """``failure`` answers the request: kept as :attr:`last`, what was there as
        :attr:`previous`."""
        self.previous, self.last = self.last, failure
        return failure

    def step_row(self, action: Any, as_step: bool = False) -> Any:
        """:meth:`step` for one env of a batch (the hot path of ``envs_per_worker`` and of
        inline envs): a gymnasium env's step is answered as a plain 5-tuple
        ``(observation, reward, terminated, truncated, info)`` (reward a float, the flags
        bools) where :meth:`step` would answer a Step with no final observation: no Step
        is made where the episode goes on (``as_step``: as a Step, for a step alone); any
        other answer is :meth:`step`'s. Only a step whose episode goes on is taken here
        without :meth:`step`'s bookkeeping: every episode's end and reset is settled by
        :meth:`_settle` and :meth:`step_plan`, the one place of the autoreset rule. With
        a gymnasium env and no ``max_episode_steps`` of aioenv's own."""
        gym = self.gym
        if gym is None or self.needs_reset or self.episode.max_episode_steps is not None:
            state = self.step(action)
        else:
            try:
                result = gym.step(action)
                if type(result) is tuple and len(result) == 5:
                    goes_on = not (result[2] or result[3])
                    if goes_on:
                        self.steps_in_episode += 1
                        # A rollout goes on from here (see _segment._resume).
                        if not as_step:
                            self.last = row = (result[0], float(result[1]), False, False, result[4])
                            return row
                    state = _new_step(Step)
                    state.__dict__.update(
                        PLAIN_STEP,
                        observation=result[0],
                        reward=float(result[1]),
                        info={} if result[4] is None else result[4],
                    )
                    if goes_on:
                        self.last = state
                        return state
                    # The episode's end: the same Step, with its flags (settled below).
                    state.__dict__.update(
                        terminated=bool(result[2]), truncated=bool(result[3]), done=True
                    )
                else:  # a tuple's subclass, or the error that refuses it
                    state = gymnasium_step(gym, result)
            except Exception as exc:
                return self.step_raised(exc)
            assert self.env is not None
            state, reset_now = self._settle(self.env, state)
            if reset_now:
                state = drive(self._autoreset_plan(self.env, state))
        if as_step or type(state) is not Step or state.final_info is not None:
            return state
        return (state.observation, state.reward, state.terminated, state.truncated, state.info)

    def _settle(self, env: Any, state: Any) -> tuple[Any, bool]:
        """The bookkeeping after ``env`` returned ``state``: the state to answer and False,
        or the step and True where the env must be reset now (autoreset "same_step":
        :meth:`_autoreset_plan` then resets it and answers, merging the two with
        :func:`with_reset`). A plain function, not a plan: most steps make no call of the
        env here, and a plan per step costs a generator."""
        self.steps_in_episode += 1
        try:
            if isinstance(state, Step):
                ended = state.terminated or state.truncated  # Step.done, without a call per step
                limit = self.episode.max_episode_steps
                # Truncated on the limit's step even where the env ended the episode
                # there itself, as gymnasium's TimeLimit marks it.
                if limit is not None and self.steps_in_episode >= limit and not state.truncated:
                    state, ended = dataclasses.replace(state, truncated=True), True
            else:
                ended = env.terminated(state)
                if ended and self.episode.autoreset == "same_step":
                    raise options_refused(
                        "autoreset='same_step' needs gymnasium envs (aioenv.Step states) to "
                        "carry the final observation; use 'next_step' or 'disabled'"
                    )
            if ended:
                # The autoreset rule as configure read it: no call at an episode's end.
                self.needs_reset = self._resets_after_end
        except Exception as exc:
            return self._failed(Failure.from_exception(exc, "autoreset")), False
        if ended and self.episode.autoreset == "same_step":
            return state, True
        self.last = state
        return state, False

    def _autoreset_plan(self, env: Any, last: Any) -> Plan[Any]:
        """Reset ``env`` after the step ``last`` that ended its episode (autoreset
        "same_step"): the step carrying the new episode's first state."""
        try:
            state = with_reset(last, (yield self._reset(env, None, None)))
        except Exception as exc:  # the episode's ending stays: its env's restart carries it
            self.last = last  # (as :attr:`previous`, for envs restarted in line)
            failure = Failure.from_exception(exc, "autoreset")
            return self._failed(dataclasses.replace(failure, ended=last))
        self.last = state
        return state

    def control(self, request: ControlRequest) -> Any:
        """Answer a control request: its result, or a :class:`Failure`."""
        return drive(self.control_plan(request))

    def control_plan(self, request: ControlRequest) -> Plan[Any]:
        """:meth:`control`'s plan (a coroutine method's result is awaited by
        :func:`~aioenv.env_side._plan.drive_async`, and handed over as it is by :func:`drive`)."""
        if request.op == "configure":
            self.configure(request.kwargs["episode"])
            return None
        if request.op == "policy":
            return self.policies.load(request.kwargs["package"])
        if self.env is None and (failure := self.build()) is not None:
            return failure
        try:
            return (yield answer_control(self.env, request))
        except Exception as exc:
            if request.op == "apply":  # the function is the caller's, not the env's
                return Failure.from_exception(exc, "apply", "the function applied")
            return Failure.from_exception(exc, f"{request.op} {request.name!r}")

    def close(self) -> Failure | None:
        return drive(self.close_plan())

    def close_plan(self) -> Plan[Failure | None]:
        """:meth:`close`'s plan (an async ``close`` is awaited by the async driver)."""
        close = getattr(self.env, "close", None)
        self.env = self.gym = None
        if close is None:
            return None
        try:
            yield close()
        except Exception as exc:
            return Failure.from_exception(exc, "close")
        return None


def answer_control(env: Any, request: ControlRequest) -> Any:
    """The answer to a call, get or set (a method's result may be a coroutine)."""
    # An adapter's attributes are the wrapped env's: a gymnasium env's (through its
    # wrappers) or a PettingZoo parallel env's.
    adapted = isinstance(env, EnvAdapter)
    if request.op == "set":
        if adapted:
            env.set_attr(request.name, request.args[0])
        else:
            setattr(env, request.name, request.args[0])
        return None
    if request.op == "apply":
        function, *args = request.args
        if function is None:
            return None
        # The env as its factory built it: a gymnasium env with its own wrappers, a
        # parallel env (not its lanes), or the Environment itself.
        built = env.env if adapted else env
        if isinstance(built, AgentLanesEnv):
            built = built.parallel_env
        return function(built, *args, **request.kwargs)
    value = env.get_attr(request.name) if adapted else getattr(env, request.name)
    if request.op == "call" and callable(value):
        return value(*request.args, **request.kwargs)
    return value

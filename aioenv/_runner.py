"""The environment side of every worker kind: build the env, answer reset, step and
control requests, apply the episode options (autoreset, time limit, statistics), report
failures with their traceback. Sync, thread and process workers all run this same code,
so they cannot drift apart in semantics."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ._async_environment import AsyncGymnasiumEnvironment
from ._environment import (
    Environment,
    EnvSource,
    GymnasiumEnvironment,
    Step,
    as_environment,
    build_environment,
)
from ._messages import ControlRequest, EpisodeOptions, Failure
from ._sentinels import RESET, Command, Reset

__all__ = ["EnvRunner", "answer_control", "with_reset"]

#: The adapters whose attributes are their wrapped env's.
_ADAPTERS = (GymnasiumEnvironment, AsyncGymnasiumEnvironment)


class EnvRunner:
    """Owns one environment and answers requests for it.

    The seed is used for the first reset only; later resets pass ``seed=None`` so the env's
    RNG continues and consecutive episodes differ (a ``Reset(seed=...)`` overrides).
    """

    #: Turns what the source built into an environment (coroutine envs adapt their own).
    _adapt = staticmethod(as_environment)

    def __init__(
        self, source: EnvSource, seed: int | None, episode: EpisodeOptions | None = None
    ) -> None:
        self._source = source
        self._seed = seed
        self._seed_used = False
        self.episode = episode or EpisodeOptions()
        self.env: Environment[Any, Any] | None = None
        self.build_failure: Failure | None = None
        self._needs_reset = False
        self._return = 0.0
        self._length = 0
        self._episode_started = time.perf_counter()

    def build(self) -> None:
        if self.env is not None or self.build_failure is not None:
            return
        try:
            self.env = build_environment(self._source, self._adapt)
        except Exception as exc:
            self.build_failure = Failure.from_exception(exc, "construction")

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
        """Answer ``RESET``, a ``Reset(...)`` or a step: the state, or a Failure."""
        if isinstance(action, Reset):
            return self.reset(action.seed, action.options)
        if isinstance(action, Command) and action is RESET:
            return self.reset()
        return self.step(action)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        """Reset and return the state, or a :class:`Failure`."""
        env = self._built()
        if env is None:
            return self.build_failure
        try:
            return self._reset(env, seed, options)
        except Exception as exc:
            return Failure.from_exception(exc, "reset")

    def _reset(self, env: Any, seed: int | None, options: dict[str, Any] | None) -> Any:
        if seed is None and not self._seed_used:
            seed = self._seed
        self._seed_used = True
        self._needs_reset = False
        self._return, self._length = 0.0, 0
        self._episode_started = time.perf_counter()
        if options is not None:
            return env.reset(seed=seed, options=options)
        return env.reset(seed=seed)

    def step(self, action: Any) -> Any:
        """Step and return the state, or a :class:`Failure`."""
        env = self._built()
        if env is None:
            return self.build_failure
        try:
            if self._needs_reset:  # autoreset "next_step": this action is ignored
                return self._reset(env, None, None)
            state = env.step(action)
        except Exception as exc:
            return Failure.from_exception(exc, "step")
        try:
            state, reset_now = self._end_of_step(env, state)
            if reset_now:
                state = with_reset(state, self._reset(env, None, None))
            return state
        except Exception as exc:
            return Failure.from_exception(exc, "autoreset")

    def _end_of_step(self, env: Any, state: Any) -> tuple[Any, bool]:
        """The bookkeeping after ``env`` returned ``state``: the state to answer, and
        whether the env must be reset now (autoreset "same_step": the caller resets it and
        merges the two with :func:`with_reset`)."""
        self._length += 1
        limit = self.episode.max_episode_steps
        if not isinstance(state, Step):
            done = env.terminated(state) or (limit is not None and self._length >= limit)
            if done and self.episode.autoreset == "same_step":
                raise TypeError(
                    "autoreset='same_step' needs gymnasium envs (aioenv.Step states) to "
                    "carry the final observation; use 'next_step' or 'disabled'"
                )
            self._needs_reset = done and self.episode.autoreset == "next_step"
            return state, False
        self._return += state.reward
        if limit is not None and self._length >= limit and not state.done:
            state = dataclasses.replace(state, truncated=True)
        if not state.done:
            return state, False
        statistics = {
            "r": self._return,
            "l": self._length,
            "t": round(time.perf_counter() - self._episode_started, 6),
        }
        state = dataclasses.replace(state, info={**state.info, "episode": statistics})
        if self.episode.autoreset == "next_step":
            self._needs_reset = True
        return state, self.episode.autoreset == "same_step"

    def control(self, request: ControlRequest) -> Any:
        """Answer a control request: its result, or a :class:`Failure`."""
        if request.op == "configure":
            self.episode = request.kwargs["episode"]
            return None
        env = self._built()
        if env is None:
            return self.build_failure
        try:
            return answer_control(env, request)
        except Exception as exc:
            return Failure.from_exception(exc, f"{request.op} {request.name!r}")

    def close(self) -> Failure | None:
        close = getattr(self.env, "close", None)
        self.env = None
        if close is None:
            return None
        try:
            close()
        except Exception as exc:
            return Failure.from_exception(exc, "close")
        return None

    def _built(self) -> Environment[Any, Any] | None:
        if self.env is None:
            self.build()
        return self.env


def with_reset(last: Step[Any], first: Step[Any]) -> Step[Any]:
    """The step that ended an episode, carrying the next episode's ``first`` state (autoreset
    "same_step")."""
    return Step(
        first.observation,
        last.reward,
        last.terminated,
        last.truncated,
        first.info,
        final_observation=last.observation,
        final_info=last.info,
    )


def answer_control(env: Any, request: ControlRequest) -> Any:
    """The answer to a call, get or set (a method's result may be a coroutine)."""
    if request.op == "set":
        _set_attr(env, request.name, request.args[0])
        return None
    value = _get_attr(env, request.name)
    if request.op == "call" and callable(value):
        return value(*request.args, **request.kwargs)
    return value


def _get_attr(env: Any, name: str) -> Any:
    if isinstance(env, _ADAPTERS):
        return env.get_attr(name)
    return getattr(env, name)


def _set_attr(env: Any, name: str, value: Any) -> None:
    if isinstance(env, _ADAPTERS):
        env.set_attr(name, value)
    else:
        setattr(env, name, value)

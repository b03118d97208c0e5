"""The environment side of every worker kind: build the env, answer reset, step and
control requests, apply the episode options (autoreset, time limit), report
failures with their traceback. Sync, thread and process workers all run this same code,
so they cannot drift apart in semantics."""

from __future__ import annotations

import dataclasses
import traceback
from typing import Any, Literal

from gymnasium.vector import AutoresetMode

from ._environment import Environment, EnvSource, GymnasiumEnvironment, Step, build_environment
from ._sentinels import RESET, Command, Reset

__all__ = [
    "AUTORESET_MODES",
    "ControlRequest",
    "EnvRunner",
    "EpisodeOptions",
    "Failure",
    "autoreset_name",
]

Autoreset = Literal["disabled", "same_step", "next_step"]
AUTORESET_MODES: tuple[str, ...] = ("disabled", "same_step", "next_step")
_GYMNASIUM_NAMES = {
    AutoresetMode.DISABLED: "disabled",
    AutoresetMode.SAME_STEP: "same_step",
    AutoresetMode.NEXT_STEP: "next_step",
}


def autoreset_name(mode: object) -> object:
    """aioenv's name for an autoreset mode given as gymnasium's ``AutoresetMode`` member or
    its value (``"NextStep"``, ``"SameStep"``, ``"Disabled"``); anything else unchanged."""
    if isinstance(mode, AutoresetMode):
        return _GYMNASIUM_NAMES[mode]
    for member, name in _GYMNASIUM_NAMES.items():
        if mode == member.value:
            return name
    return mode


@dataclasses.dataclass(frozen=True)
class Failure:
    """An exception raised by the environment, in a form that crosses a process boundary."""

    exception_type: str
    message: str
    traceback: str
    during: str
    exception: BaseException | None = None

    @classmethod
    def from_exception(cls, exc: BaseException, during: str) -> Failure:
        return cls(
            exception_type=type(exc).__qualname__,
            message=str(exc),
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            during=during,
            exception=exc,
        )

    def without_exception(self) -> Failure:
        return dataclasses.replace(self, exception=None)


@dataclasses.dataclass(frozen=True)
class EpisodeOptions:
    """``autoreset``: what happens when an episode ends (see the README's table);
    ``max_episode_steps``: truncate episodes after this many steps (None: no limit)."""

    autoreset: Autoreset = "disabled"
    max_episode_steps: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "autoreset", autoreset_name(self.autoreset))
        if self.autoreset not in AUTORESET_MODES:
            raise ValueError(
                f"autoreset must be one of {', '.join(map(repr, AUTORESET_MODES))} (or "
                f"gymnasium's AutoresetMode), got {self.autoreset!r}"
            )
        limit = self.max_episode_steps
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"max_episode_steps must be None or an int >= 1, got {limit!r}")


@dataclasses.dataclass(frozen=True)
class ControlRequest:
    """A request that is not a step: ``call`` a method, ``get``/``set`` an attribute, or
    ``configure`` the episode options. Answered in order with the steps."""

    op: Literal["call", "get", "set", "configure"]
    name: str = ""
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


class EnvRunner:
    """Owns one environment and answers requests for it.

    The seed is used for the first reset only; later resets pass ``seed=None`` so the env's
    RNG continues and consecutive episodes differ (a ``Reset(seed=...)`` overrides).
    """

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
        self._length = 0

    def build(self) -> None:
        if self.env is not None or self.build_failure is not None:
            return
        try:
            self.env = build_environment(self._source)
        except Exception as exc:
            self.build_failure = Failure.from_exception(exc, "construction")

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
        if self.episode.max_episode_steps is not None and not isinstance(env, GymnasiumEnvironment):
            raise TypeError(
                "max_episode_steps needs gymnasium envs: aioenv cannot mark a custom "
                "Environment's state as truncated; end the episode in the env itself (its "
                "terminated(state)) and drop the max_episode_steps option"
            )
        if seed is None and not self._seed_used:
            seed = self._seed
        self._seed_used = True
        self._needs_reset = False
        self._length = 0
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
            return self._end_of_step(env, state)
        except Exception as exc:
            return Failure.from_exception(exc, "autoreset")

    def _end_of_step(self, env: Any, state: Any) -> Any:
        self._length += 1
        limit = self.episode.max_episode_steps
        if not isinstance(state, Step):
            done = env.terminated(state)
            if done and self.episode.autoreset == "same_step":
                raise TypeError(
                    "autoreset='same_step' needs gymnasium envs (aioenv.Step states) to "
                    "carry the final observation; use 'next_step' or 'disabled'"
                )
            self._needs_reset = done and self.episode.autoreset == "next_step"
            return state
        if limit is not None and self._length >= limit and not state.done:
            state = dataclasses.replace(state, truncated=True)
        if not state.done:
            return state
        if self.episode.autoreset == "next_step":
            self._needs_reset = True
        elif self.episode.autoreset == "same_step":
            first = self._reset(env, None, None)
            state = Step(
                first.observation,
                state.reward,
                state.terminated,
                state.truncated,
                first.info,
                final_observation=state.observation,
                final_info=state.info,
            )
        return state

    def control(self, request: ControlRequest) -> Any:
        """Answer a control request: its result, or a :class:`Failure`."""
        if request.op == "configure":
            self.episode = request.kwargs["episode"]
            return None
        env = self._built()
        if env is None:
            return self.build_failure
        try:
            if request.op == "set":
                _set_attr(env, request.name, request.args[0])
                return None
            value = _get_attr(env, request.name)
            if request.op == "call" and callable(value):
                return value(*request.args, **request.kwargs)
            return value
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


def _get_attr(env: Any, name: str) -> Any:
    if isinstance(env, GymnasiumEnvironment):
        return env.get_attr(name)
    return getattr(env, name)


def _set_attr(env: Any, name: str, value: Any) -> None:
    if isinstance(env, GymnasiumEnvironment):
        env.set_attr(name, value)
    else:
        setattr(env, name, value)

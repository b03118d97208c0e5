"""The environment side of every worker kind: build the env, answer RESET and step
requests, report failures with their traceback. Sync, thread and process workers all run
this same code, so they cannot drift apart in semantics."""

from __future__ import annotations

import dataclasses
import traceback
from typing import Any

from ._environment import Environment, EnvSource, build_environment

__all__ = ["EnvRunner", "Failure"]


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


class EnvRunner:
    """Owns one environment and answers requests for it.

    The seed is used for the first reset only; later resets pass ``seed=None`` so the env's
    RNG continues and consecutive episodes differ.
    """

    def __init__(self, source: EnvSource, seed: int | None) -> None:
        self._source = source
        self._seed = seed
        self._seed_used = False
        self.env: Environment[Any, Any] | None = None
        self.build_failure: Failure | None = None

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

    def reset(self) -> Any:
        """Reset and return the state, or a :class:`Failure`."""
        env = self._built()
        if env is None:
            return self.build_failure
        seed = None if self._seed_used else self._seed
        self._seed_used = True
        try:
            return env.reset(seed=seed)
        except Exception as exc:
            return Failure.from_exception(exc, "reset")

    def step(self, action: Any) -> Any:
        """Step and return the state, or a :class:`Failure`."""
        env = self._built()
        if env is None:
            return self.build_failure
        try:
            return env.step(action)
        except Exception as exc:
            return Failure.from_exception(exc, "step")

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

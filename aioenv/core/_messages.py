"""The messages both sides of a worker share: what the parent asks for besides a step, the
episode options it configures, and how a failure travels back. A leaf module: it imports
nothing from aioenv but the count check (:func:`~aioenv.core._seeds.checked_count`, a leaf
of core too), so parent-side code (pools, workers) and env-side code (the runner, the
child process) both depend on it and on nothing of each other."""

from __future__ import annotations

import dataclasses
import traceback
from typing import Any, Literal, get_args

from gymnasium.vector import AutoresetMode

from ._seeds import checked_count

__all__ = [
    "AUTORESET_MODES",
    "Autoreset",
    "ControlRequest",
    "EpisodeOptions",
    "Failure",
    "PerEnv",
    "autoreset_name",
    "options_refused",
    "resets_next",
]

Autoreset = Literal["disabled", "same_step", "next_step"]
AUTORESET_MODES: tuple[str, ...] = get_args(Autoreset)


def autoreset_name(mode: object) -> object:
    """aioenv's name for an autoreset mode given as gymnasium's ``AutoresetMode`` member or
    its value (``"NextStep"``, ``"SameStep"``, ``"Disabled"``): the member's name in lower
    case (``"next_step"``); anything else unchanged."""
    for member in AutoresetMode:
        if mode is member or mode == member.value:
            return member.name.lower()
    return mode


def resets_next(autoreset: str, ended: bool) -> bool:
    """Whether an env's next request is answered by its reset, whatever it asks, after a
    state that ``ended`` an episode or not: under autoreset ``"next_step"``, after an end.
    The runner follows this rule; the parent's side asks it where it must know which
    states answer a reset (to time the request, to count episodes)."""
    return ended and autoreset == "next_step"


@dataclasses.dataclass(frozen=True)
class Failure:
    """An exception raised by the environment, in a form that crosses a process boundary."""

    exception_type: str
    message: str
    traceback: str
    during: str
    exception: BaseException | None = None
    #: Which env of a worker's batch raised (``envs_per_worker``); None for a lone env.
    env: int | None = None
    #: The other envs of the batch that raised in the same request, each its own Failure:
    #: a batch steps every env, as separate workers would, and loses no failure.
    more: tuple[Failure, ...] = ()
    #: Who raised: ``"the env"``, else the caller's own part (``"the policy"``, the actions
    #: it sent), whose error is raised at once: no restart would fix it.
    blame: str = "the env"
    #: The step that ended a lone env's episode where its autoreset's reset then raised
    #: (``"same_step"``): its restarted env's first state is handed out as that reset.
    ended: Any = None

    @classmethod
    def from_exception(cls, exc: BaseException, during: str, blame: str = "the env") -> Failure:
        return cls(
            exception_type=type(exc).__qualname__,
            message=str(exc),
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            during=during,
            exception=exc,
            blame=getattr(exc, "aioenv_blame", blame),
        )

    def without_exception(self) -> Failure:
        return dataclasses.replace(self, exception=None)


def options_refused(message: str) -> TypeError:
    """The TypeError of a pool option the env cannot take, whose Failure blames the pool's
    options (the caller's mistake: no restart of the env would fix it)."""
    error = TypeError(message)
    error.__dict__["aioenv_blame"] = "the pool's options"
    return error


@dataclasses.dataclass(frozen=True)
class EpisodeOptions:
    """What a worker does with episodes: the one definition of these options, their
    defaults, checks and docs (see :class:`~aioenv.core._supervision.Supervision`).

    :param autoreset: ``"disabled"`` (the default), ``"next_step"`` or ``"same_step"``
        (gymnasium's ``AutoresetMode`` is taken too): what a worker does when an episode
        ends (the table in the concepts guide's "Episodes and autoreset").
    :param max_episode_steps: truncate episodes after this many steps; None (the
        default): no limit.
    """

    autoreset: Autoreset = "disabled"
    max_episode_steps: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "autoreset", autoreset_name(self.autoreset))
        if self.autoreset not in AUTORESET_MODES:
            raise ValueError(
                f"autoreset must be one of {', '.join(map(repr, AUTORESET_MODES))} (or "
                f"gymnasium's AutoresetMode), got {self.autoreset!r}"
            )
        if self.max_episode_steps is not None:
            limit = checked_count(self.max_episode_steps, "max_episode_steps", or_none=True)
            object.__setattr__(self, "max_episode_steps", limit)


@dataclasses.dataclass(frozen=True)
class ControlRequest:
    """A request that is not a step: ``call`` a method, ``get``/``set`` an attribute,
    ``apply`` a function (``args[0]``, or None to leave this env alone) to the env as its
    factory built it, ``configure`` the episode options, or load a ``policy``
    (``kwargs["package"]``) for rollouts. Answered in order with the steps."""

    op: Literal["call", "get", "set", "apply", "configure", "policy"]
    name: str = ""
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PerEnv:
    """A value to set on a worker that steps several envs (or, for ``apply``, the function
    for each): ``values[i]`` goes to env ``i`` (a plain value goes to all of them)."""

    values: tuple[Any, ...]

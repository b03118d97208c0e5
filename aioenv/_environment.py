"""What an environment is to aioenv: the minimal protocol, gymnasium's adapter, and
turning whatever the user passed (an id, a factory, an instance) into one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar, Union, runtime_checkable

import gymnasium

__all__ = [
    "EnvSource",
    "Environment",
    "GymnasiumEnvironment",
    "GymnasiumFactory",
    "Step",
    "as_environment",
    "build_environment",
    "describe_source",
    "resolve_source",
]

S = TypeVar("S")
A_contra = TypeVar("A_contra", contravariant=True)
O = TypeVar("O")

#: Anything a worker accepts as its environment: a gymnasium id, a zero-argument factory,
#: a ``gymnasium.Env`` instance or an :class:`Environment` instance.
EnvSource = Union[str, Callable[[], Any], Any]  # noqa: UP007 (a runtime alias on 3.10)


@runtime_checkable
class Environment(Protocol[S, A_contra]):
    """The minimal environment: everything about a step (reward, flags, info) lives in the
    state it returns. ``close()`` is optional."""

    def reset(self, seed: int | None = None) -> S: ...

    def step(self, action: A_contra) -> S: ...

    def terminated(self, state: S) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Step(Generic[O]):
    """One gymnasium transition as a state. The reply to ``RESET`` has reward 0.0 and both
    flags False; the final step of an episode is returned whole.

    With ``autoreset="same_step"`` the step that ends an episode carries the reset
    observation and info as ``observation``/``info``, and the finished episode's last
    observation and info as ``final_observation``/``final_info`` (None otherwise).
    """

    observation: O
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    final_observation: O | None = None
    final_info: dict[str, Any] | None = None

    def __init__(
        self,
        observation: O,
        reward: float = 0.0,
        terminated: bool = False,
        truncated: bool = False,
        info: dict[str, Any] | None = None,
        final_observation: O | None = None,
        final_info: dict[str, Any] | None = None,
    ) -> None:
        # Written straight to the instance dict: a frozen dataclass's generated __init__
        # sets each field through object.__setattr__, which costs more than the rest of
        # decoding a step on the hot path.
        fields = self.__dict__
        fields["observation"] = observation
        fields["reward"] = reward
        fields["terminated"] = terminated
        fields["truncated"] = truncated
        fields["info"] = {} if info is None else info
        fields["final_observation"] = final_observation
        fields["final_info"] = final_info

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def with_observation(self, observation: O) -> Step[O]:
        """The same step with another observation (``dataclasses.replace``, faster)."""
        return Step(
            observation,
            self.reward,
            self.terminated,
            self.truncated,
            self.info,
            self.final_observation,
            self.final_info,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Explicit so pickling is fast and works for frozen dataclasses on every Python.
        fields = (self.observation, self.reward, self.terminated, self.truncated, self.info)
        if self.final_info is None and self.final_observation is None:
            return (Step, fields)
        return (Step, (*fields, self.final_observation, self.final_info))


class GymnasiumEnvironment(Generic[O]):
    """Adapts a ``gymnasium.Env`` to :class:`Environment` with :class:`Step` states."""

    def __init__(self, env: gymnasium.Env[Any, Any]) -> None:
        self.env = env

    @property
    def observation_space(self) -> gymnasium.Space[Any]:
        return self.env.observation_space

    @property
    def action_space(self) -> gymnasium.Space[Any]:
        return self.env.action_space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Step[O]:
        observation, info = self.env.reset(seed=seed, options=options)
        return Step(observation, 0.0, False, False, info)

    def step(self, action: Any) -> Step[O]:
        result = self.env.step(action)
        if not isinstance(result, tuple) or len(result) != 5:
            raise TypeError(
                f"{type(self.env).__name__}.step() returned {_describe_result(result)}; aioenv "
                "expects gymnasium's 5-tuple (observation, reward, terminated, truncated, info)"
            )
        observation, reward, terminated, truncated, info = result
        return Step(observation, float(reward), bool(terminated), bool(truncated), info)

    def terminated(self, state: Step[O]) -> bool:
        return state.done

    def close(self) -> None:
        self.env.close()

    def get_attr(self, name: str) -> Any:
        return self.env.get_wrapper_attr(name)

    def set_attr(self, name: str, value: Any) -> None:
        self.env.set_wrapper_attr(name, value)


def _describe_result(result: object) -> str:
    if isinstance(result, tuple):
        return f"a {len(result)}-tuple"
    return f"a {type(result).__name__}"


def _is_environment(obj: object) -> bool:
    if isinstance(obj, type):  # a class is a factory, even one that has these methods
        return False
    return all(callable(getattr(obj, name, None)) for name in ("reset", "step", "terminated"))


def as_environment(obj: object) -> Environment[Any, Any]:
    """Wrap a gymnasium env; pass an :class:`Environment` through; reject anything else."""
    if isinstance(obj, gymnasium.Env):
        return GymnasiumEnvironment(obj)
    if _is_environment(obj):
        return obj  # type: ignore[return-value]
    raise TypeError(
        f"got {type(obj).__name__!s}, which is neither a gymnasium.Env nor an "
        "aioenv.Environment (an object with reset(seed), step(action) and terminated(state))"
    )


def build_environment(source: EnvSource) -> Environment[Any, Any]:
    """Build the environment a worker runs: ``gymnasium.make`` for an id, a call for a
    factory, the object itself for an instance."""
    if isinstance(source, str):
        return as_environment(gymnasium.make(source))
    if isinstance(source, gymnasium.Env) or _is_environment(source):
        return as_environment(source)
    if callable(source):
        built = source()
        try:
            return as_environment(built)
        except TypeError as exc:
            raise TypeError(f"the env factory {describe_source(source)} returned {exc}") from None
    return as_environment(source)


class GymnasiumFactory:
    """A picklable factory: ``gymnasium.make(env_id, **kwargs)`` then each wrapper.
    ``env_id`` is an id or an ``EnvSpec``; a spec is built without gymnasium's registry,
    so an env registered in the parent at run time builds in a worker process too."""

    def __init__(
        self,
        env_id: str | gymnasium.envs.registration.EnvSpec,
        kwargs: dict[str, Any],
        wrappers: Sequence[Callable[[gymnasium.Env[Any, Any]], gymnasium.Env[Any, Any]]] = (),
    ) -> None:
        self.env_id = env_id
        self.kwargs = kwargs
        self.wrappers = list(wrappers)
        self.description = env_id if isinstance(env_id, str) else env_id.id

    def __call__(self) -> gymnasium.Env[Any, Any]:
        env = gymnasium.make(self.env_id, **self.kwargs)
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env


def resolve_spec(env_id: str) -> gymnasium.envs.registration.EnvSpec:
    """The registered spec of ``env_id``, looked up here (gymnasium's ``NameNotFound`` and
    friends for an unknown id). An entry point in ``__main__`` is resolved to the class
    itself, which cloudpickle then ships by value to worker processes."""
    spec = gymnasium.spec(env_id)
    entry_point = spec.entry_point
    if isinstance(entry_point, str) and entry_point.startswith("__main__:"):
        creator = gymnasium.envs.registration.load_env_creator(entry_point)
        spec = dataclasses.replace(spec, entry_point=creator)  # type: ignore[arg-type]
    return spec


def resolve_source(source: EnvSource) -> EnvSource:
    """A gymnasium id becomes a factory over its spec, resolved in this process (so an
    unknown id fails here, before any worker starts); anything else is returned as is."""
    if isinstance(source, str):
        return GymnasiumFactory(resolve_spec(source), {})
    return source


def describe_source(source: EnvSource) -> str:
    """A short human name for an env source, for worker names and error messages."""
    if isinstance(source, str):
        return source
    description = getattr(source, "description", None)
    if isinstance(description, str):
        return description
    if isinstance(source, gymnasium.Env) and source.spec is not None:
        return source.spec.id
    if callable(source) and not _is_environment(source):
        return getattr(source, "__qualname__", type(source).__name__)
    return type(source).__name__

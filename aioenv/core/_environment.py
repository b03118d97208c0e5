"""What an environment is to aioenv: the minimal protocol, the records of its steps
(:class:`Step`, and :class:`BatchStep` for the envs one worker steps together), and what a
worker is given to build one (:data:`EnvSource`, :class:`VectorSource`). Gymnasium's
adapter and building an env from a source are in :mod:`aioenv.core._gymnasium`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Protocol,
    TypeVar,
    Union,
    runtime_checkable,
)

import gymnasium
import numpy as np
from gymnasium.spaces import GraphInstance

from ._infos import FlatInfos, split_rows

__all__ = [
    "PLAIN_STEP",
    "BatchStep",
    "EnvAdapter",
    "EnvSource",
    "Environment",
    "Step",
    "Stepped",
    "VectorSource",
    "copy_arrays",
    "describe_source",
    "is_environment",
    "take_rows",
    "with_reset",
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

    def reset(self, seed: int | None = None) -> S:
        """Start an episode and return its first state. ``seed``: seed the env's RNG (a
        worker passes its seed at the first reset only, then None so episodes differ)."""
        ...

    def step(self, action: A_contra) -> S:
        """Apply ``action`` and return the next state. Raising is allowed: the worker
        reports it as :class:`~aioenv.EnvError` with this traceback."""
        ...

    def terminated(self, state: S) -> bool:
        """True if ``state`` ends the episode (the time limit and autoreset use it)."""
        ...


def is_environment(obj: object) -> bool:
    """``obj`` is an :class:`Environment` instance: it has ``reset``, ``step`` and
    ``terminated`` (a class is a factory, even one that has them)."""
    if isinstance(obj, type):
        return False
    return all(callable(getattr(obj, name, None)) for name in ("reset", "step", "terminated"))


class EnvAdapter:
    """What the adapters of other envs to :class:`Environment` share: the env they wrap
    (``env``), whose states say themselves whether they end an episode (``done``), and
    whose attributes ``get_attr``/``set_attr`` reach (the pool's ``get_attr``, ``set_attr``)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def terminated(self, state: Any) -> bool:
        return bool(state.done)

    def get_attr(self, name: str) -> Any:
        return getattr(self.env, name)

    def set_attr(self, name: str, value: Any) -> None:
        setattr(self.env, name, value)


@dataclasses.dataclass(frozen=True)
class Step(Generic[O]):
    """One gymnasium transition as a state. The reply to ``RESET`` has reward 0.0 and both
    flags False; the final step of an episode is returned whole.

    With ``autoreset="same_step"`` the step that ends an episode carries the reset
    observation and info as ``observation``/``info``, and the finished episode's last
    observation and info as ``final_observation``/``final_info`` (None otherwise).

    ``done`` is ``terminated or truncated``: the step ended its episode.
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
        # A value, not a property: every training loop reads it on every state, and a
        # property is a call each time. Not a field: it follows from the flags.
        fields["done"] = terminated or truncated

    if TYPE_CHECKING:

        @property
        def done(self) -> bool: ...

    def with_observation(self, observation: O) -> Step[O]:
        """The same step with another observation (``dataclasses.replace``, faster)."""
        # Its instance dict copied, as BatchStep.owned does: no __init__ call either.
        step = object.__new__(Step)
        step.__dict__.update(self.__dict__, observation=observation)
        return step

    def owned(self) -> Step[O]:
        """The same step with every array of its observation copied: what to keep of a step
        whose observation views shared memory (valid only until the worker's next action)."""
        return self.with_observation(copy_arrays(self.observation))

    def __reduce__(self) -> tuple[Any, ...]:
        # Explicit so pickling is fast and works for frozen dataclasses on every Python.
        fields = (self.observation, self.reward, self.terminated, self.truncated, self.info)
        if self.final_info is None and self.final_observation is None:
            return (Step, fields)
        return (Step, (*fields, self.final_observation, self.final_info))


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


#: A Step's instance dict (``done`` included) where the episode goes on and nothing is
#: final: the one ``__init__`` writes, its info left for the maker to set. The hot paths
#: that make a Step without a call of its ``__init__`` (one Python call a state) update a
#: new instance's dict with this, then with what differs: its fields are written in
#: ``__init__`` alone.
PLAIN_STEP: dict[str, Any] = {**vars(Step(None)), "info": None}


@dataclasses.dataclass(frozen=True)
class BatchStep(Generic[O]):
    """The transitions of the ``k`` envs one worker steps together (``envs_per_worker=k``):
    row ``i`` is env ``i`` of the worker. One message carries all of them, so the parent
    does no work per env.

    ``observations`` are stacked along a first axis of length ``k`` (gymnasium's batched
    space); ``rewards`` (float64), ``terminated`` and ``truncated`` (bool) are arrays.
    ``infos`` maps a row to its info and leaves out rows whose info is empty (most steps
    of most envs). Under ``autoreset="same_step"`` the rows that ended an episode carry the
    reset observation in ``observations`` and the last one in ``final_observations[row]``,
    with ``final_infos[row]``.

    ``vector_infos`` holds the same infos in gymnasium's vector form over the ``k`` rows:
    exactly the infos a ``SyncVectorEnv`` of these ``k`` envs returns (per key an array of
    ``k`` and its ``_key`` mask, nested dicts alike, ``final_obs``/``final_info`` for the
    rows that ended an episode), None where a worker kept the per-row form (infos whose
    keys start with ``_``, or that gymnasium cannot batch). ``info_types`` says, per key
    path, what the values of a numeric column were (``int``, ``float``, a numpy scalar
    type, ``np.ndarray``), so that a batch that crossed a process, which carries the
    vector form only, gives each row's values back as they were: its ``infos``,
    ``final_observations`` and ``final_infos`` are derived from ``vector_infos`` when
    first read (a row's keys then come in the batch's order of keys). Where every row's
    info has the same scalar keys, the worker packs them as one record per row
    (``packed_infos``), and ``vector_infos`` is derived from that when first read.
    """

    observations: Any
    rewards: Any  # npt.NDArray[np.float64]
    terminated: Any  # npt.NDArray[np.bool_]
    truncated: Any  # npt.NDArray[np.bool_]
    infos: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    final_observations: dict[int, Any] = dataclasses.field(default_factory=dict)
    final_infos: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # No class attribute (a default_factory field has none): an instance that does not
    # hold these yet derives them in __getattr__.
    vector_infos: dict[str, Any] | None = dataclasses.field(default_factory=lambda: None)
    info_types: dict[tuple[Any, ...], Any] | None = dataclasses.field(default_factory=lambda: None)
    #: Set per instance (not a field: a copy made with ``dataclasses.replace`` carries the
    #: ``vector_infos`` derived from it instead).
    packed_infos: ClassVar[FlatInfos | None] = None

    def __init__(
        self,
        observations: Any,
        rewards: Any,
        terminated: Any,
        truncated: Any,
        infos: dict[int, dict[str, Any]] | None = None,
        final_observations: dict[int, Any] | None = None,
        final_infos: dict[int, dict[str, Any]] | None = None,
        vector_infos: dict[str, Any] | None = None,
        info_types: dict[tuple[Any, ...], Any] | None = None,
        packed_infos: FlatInfos | None = None,
    ) -> None:
        # Written straight to the instance dict, as Step does: one BatchStep per message
        # on both sides of a process worker's hot path.
        fields = self.__dict__
        fields["observations"] = observations
        fields["rewards"] = rewards
        fields["terminated"] = terminated
        fields["truncated"] = truncated
        fields["packed_infos"] = packed_infos
        if packed_infos is None or vector_infos is not None:
            fields["vector_infos"] = vector_infos
            fields["info_types"] = info_types
        if infos is final_observations is final_infos is None and (
            vector_infos is not None or packed_infos is not None
        ):
            return  # the per-row infos are derived when first read (see __getattr__)
        fields["infos"] = {} if infos is None else infos
        fields["final_observations"] = {} if final_observations is None else final_observations
        fields["final_infos"] = {} if final_infos is None else final_infos

    def __getattr__(self, name: str) -> Any:
        # Only reached for an attribute the instance lacks: what a batch that carries its
        # infos in vector or packed form derives from them when first asked.
        fields = self.__dict__
        packed = fields.get("packed_infos")
        if name in _VECTOR and packed is not None:
            fields.update(zip(_VECTOR, packed.expanded(), strict=True))
        elif name in _PER_ROW and (packed is not None or fields.get("vector_infos") is not None):
            per_row = split_rows(self.vector_infos or {}, self.info_types or {})
            fields.update(zip(_PER_ROW, per_row, strict=True))
        else:
            raise AttributeError(name)
        return fields[name]

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def dones(self) -> Any:
        """Per row: ``terminated | truncated``."""
        return self.terminated | self.truncated

    def owned(self) -> BatchStep[O]:
        """The same batch with its observations copied (see :meth:`Step.owned`)."""
        # The instance dict as it is: infos not derived yet stay so, packed ones packed.
        copy = object.__new__(BatchStep)
        copy.__dict__.update(self.__dict__, observations=copy_arrays(self.observations))
        return copy


#: A lockstep step of every env of a vector env in one call (envs in line, the engine's
#: children): every env's observations, rewards, terminated and truncated flags, and the
#: infos of the groups that gave some, by group id (each a BatchStep of the group's rows
#: that holds its infos alone; empty where no env gave any).
Stepped = tuple[Any, Any, Any, Any, "dict[int, BatchStep[Any]]"]


#: A BatchStep's per-row infos, in :func:`split_rows`'s order, and its vector form.
_PER_ROW = ("infos", "final_observations", "final_infos")
_VECTOR = ("vector_infos", "info_types")


@dataclasses.dataclass(frozen=True)
class VectorSource:
    """``len(sources)`` envs that one worker steps together, env ``i`` built from
    ``sources[i]``. The worker's seed ``s`` seeds them with ``worker_seeds(s, k)``, or
    with ``seeds`` where given (a vector env's: each env's own, however grouped); the
    worker's restarts draw theirs from ``s`` either way."""

    sources: tuple[EnvSource, ...]
    seeds: tuple[int | None, ...] | None = None

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("a VectorSource needs at least one env source")

    @staticmethod
    def first_seed(source: EnvSource, seed: int | None) -> Any:
        """The seed of a worker's first env from ``source``: its envs' ``seeds`` where it
        is a VectorSource with some, else the worker's ``seed``."""
        return source.seeds if isinstance(source, VectorSource) and source.seeds else seed

    @property
    def description(self) -> str:
        return f"{describe_source(self.sources[0])} x{len(self.sources)}"


def take_rows(stacked: Any, rows: Any) -> Any:
    """``rows`` (an index, a slice or an index array) of stacked values: arrays, or dicts
    and tuples of them, as a batch's observations are."""
    if isinstance(stacked, dict):
        return {key: take_rows(value, rows) for key, value in stacked.items()}
    if isinstance(stacked, tuple):
        return tuple(take_rows(value, rows) for value in stacked)
    return stacked[rows]


def copy_arrays(observation: Any) -> Any:
    """A copy of an observation (or of a tree of arrays: dicts and tuples of them, as a
    batch's observations and actions are, and a Graph's GraphInstance of them) with
    every array copied; anything else in it (a Python int, a Discrete's, read from its
    row) is its own copy."""
    if type(observation) is np.ndarray:
        return observation.copy()
    if type(observation) is dict:
        return {key: copy_arrays(value) for key, value in observation.items()}
    if type(observation) is tuple:
        return tuple(copy_arrays(value) for value in observation)
    if type(observation) is GraphInstance:
        return GraphInstance(*(copy_arrays(value) for value in observation))
    return observation


def describe_source(source: EnvSource) -> str:
    """A short human name for an env source, for worker names and error messages."""
    if isinstance(source, str):
        return source
    description = getattr(source, "description", None)
    if isinstance(description, str):
        return description
    if isinstance(source, gymnasium.Env) and source.spec is not None:
        return source.spec.id
    if callable(source) and not is_environment(source):
        return getattr(source, "__qualname__", type(source).__name__)
    return type(source).__name__

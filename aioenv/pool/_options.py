"""A pool's options, documented and checked in one place: the pool classes, ``make_pool``
and ``AioVectorEnv`` all take them by these names. They are the workers' supervision and
the episode options (each defined, with its default, in its own class) and the pool's
own; the pools' signatures read the defaults from :data:`POOL_DEFAULTS`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..core._docs import documented_with
from ..core._errors import WorkerError
from ..core._messages import EpisodeOptions
from ..core._supervision import Supervision

__all__ = ["POOL_DEFAULTS", "POOL_OPTIONS", "PoolOptions"]


@documented_with(EpisodeOptions)
@documented_with(Supervision)
@dataclasses.dataclass(frozen=True)
class PoolOptions(EpisodeOptions, Supervision):
    """What a pool does besides handing out states: its workers' :class:`Supervision`,
    the :class:`EpisodeOptions`, and the pool's own options, whose entries come first
    below.

    :param check_actions: check each action against its env's action space before
        sending it (:class:`~aioenv.InvalidAction`; ``AioVectorEnv`` checks a whole batch
        before it sends any of it); default False.
    :param copy: True (the default): states own their observations. False: observations
        in shared memory are views, valid until the next action to their worker, and
        ``get_batch`` reuses its stacked array.
    """

    check_actions: bool = False
    copy: bool = True

    def __post_init__(self) -> None:
        Supervision.__post_init__(self)
        EpisodeOptions.__post_init__(self)
        object.__setattr__(self, "check_actions", bool(self.check_actions))
        object.__setattr__(self, "copy", bool(self.copy))

    def supervision(self, on_failure: Callable[[WorkerError], None] | None) -> Supervision:
        """The workers' supervision, reporting failures to ``on_failure``."""
        return Supervision(**{**_values(self, Supervision), "on_failure": on_failure})

    def episode(self) -> EpisodeOptions:
        return EpisodeOptions(**_values(self, EpisodeOptions))


def _values(options: PoolOptions, part: type[Any]) -> dict[str, Any]:
    """The options of ``part`` (one of the classes PoolOptions is made of), by name."""
    return {field.name: getattr(options, field.name) for field in dataclasses.fields(part)}


#: Every pool option at its default: what the pools' signatures read their defaults from.
POOL_DEFAULTS = PoolOptions()

#: The names of the pool options.
POOL_OPTIONS = frozenset(field.name for field in dataclasses.fields(PoolOptions))

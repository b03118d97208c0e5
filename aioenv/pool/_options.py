"""A pool's options, documented and checked in one place: the pool classes, ``make_pool``
and ``AioVectorEnv`` all take them by these names. They are the workers' supervision and
the episode options (each defined, with its default, in its own class) and the pool's
own; the pools' signatures read the defaults from :data:`POOL_DEFAULTS`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..core._errors import WorkerError
from ..core._messages import EpisodeOptions
from ..core._supervision import Supervision

__all__ = ["POOL_DEFAULTS", "POOL_OPTIONS", "PoolOptions"]


@dataclasses.dataclass(frozen=True)
class PoolOptions(EpisodeOptions, Supervision):
    """What a pool does besides handing out states: its workers' :class:`Supervision`,
    the :class:`EpisodeOptions`, and the pool's own options below them.

    :param cleanup_time: seconds each worker gets to close before it is terminated, then
        killed (default 5).
    :param step_timeout: seconds a step may take before the worker fails with
        :class:`~aioenv.WorkerTimeout` (its env is killed or abandoned); default None, no
        deadline.
    :param start_timeout: the same for building an env plus its first reset; default None:
        ``max(step_timeout, reset_timeout, 60)`` when either is set, else no deadline.
    :param reset_timeout: the same for a reset; default None: ``step_timeout``. A step
        that may also reset an env (autoreset ``"same_step"``; ``"next_step"`` after an
        episode ended) gets ``step_timeout + reset_timeout``; a rollout segment gets
        ``step_timeout`` per transition it plays.
    :param restart: ``"never"`` (default) or ``"on_failure"``: rebuild a worker's env after
        an env exception, a death or a timeout; the state in flight is replaced by the new
        env's reset state, marked in ``info["aioenv"]``. With ``"never"`` no restart budget
        applies: an env that raised is kept (``EnvError`` for that request), one that
        died or hung gives its worker up.
    :param max_restarts: a worker's restart budget (default 10). By default (no
        ``restart_window``) it is given up only in a crash loop: its env fails
        ``max_restarts + 1`` times in a row with no progress between (a successful step,
        reset or rollout segment; a new env's starting reset, a reconnect, is none), so a
        flaky env that keeps making progress is restarted for as long as it runs, while one
        that fails at every start or raises at every request is given up. The failure
        that finds the budget spent is raised instead, and the worker is given up.
    :param restart_window: None (default): the crash-loop rule above. Seconds: the rate
        rule instead, at most ``max_restarts`` restarts within any window that long (a
        sliding window over the times of the failures; progress does not count);
        ``math.inf``: ``max_restarts`` restarts over the worker's lifetime.
    :param restart_backoff: seconds before a restart (default 0), doubling for back-to-back
        failures, at most 10.
    :param on_failure: called with every failure (a :class:`~aioenv.WorkerError`),
        restarted or not; default None.
    :param episode_timeout: seconds an episode may last, from its reset's answer to its
        end, the env's time and the wait for the policy alike; default None, no budget.
        An episode past it ends truncated, as an episode cut short by a restart does, with
        ``info["aioenv"]["reason"] == "episode_timeout"``: a step in flight is abandoned
        and its env restarted, else the next step is not sent. A budget's end is no
        failure: it spends no restart and never gives a worker up.
    :param autoreset: ``"disabled"`` (default), ``"next_step"`` or ``"same_step"``: what a
        worker does when an episode ends (see the README's table).
    :param max_episode_steps: truncate episodes after this many steps; default None.
    :param check_actions: check each action against the worker's action space before
        sending it (:class:`~aioenv.InvalidAction`); default False.
    :param copy: True (default): states own their observations. False: observations in
        shared memory are views, valid until the next action to their worker, and
        ``get_batch`` reuses its stacked array.
    """

    check_actions: bool = False
    copy: bool = True

    def __post_init__(self) -> None:
        Supervision.__post_init__(self)
        EpisodeOptions.__post_init__(self)

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

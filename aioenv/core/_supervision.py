"""The supervision options every worker kind and the engine take, and the deadline rule:
:class:`Supervision` (each option's default and check, in one place), which deadline a
request gets (:func:`request_phase`) and the error of a request past it
(:func:`timeout_error`), and the episode budget's rule (:func:`budget_end`). How one
worker acts on them over time (restarts, budgets) is
:class:`aioenv.core._supervisor.Supervisor`'s.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any, Literal

from ._commands import is_reset
from ._environment import BatchStep, Step
from ._errors import WorkerError, WorkerTimeout
from ._messages import Autoreset, resets_next
from ._rollouts import Rollout
from ._seeds import checked_count

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "SUPERVISION_DEFAULTS",
    "Phase",
    "Supervision",
    "budget_end",
    "episode_ended",
    "report_failure",
    "request_phase",
    "timeout_error",
]

#: The deadline for building an env and its first reset when only ``step_timeout`` is
#: set: simulators can take far longer to start than to step.
DEFAULT_START_TIMEOUT = 60.0

#: Which deadline a request gets: building an env plus its first reset, a reset, a step,
#: a step that may also reset an env (autoreset), or a rollout segment.
Phase = Literal["start-up", "reset", "step", "step and reset", "rollout"]

_MAX_BACKOFF = 10.0


@dataclasses.dataclass(frozen=True)
class Supervision:
    """What to do about slow and failing workers: the one definition of these options,
    their defaults, checks and docs. The worker kinds, the pools, ``make_pool`` and
    ``AioVectorEnv`` take them by these names; their signatures read the defaults from
    :data:`SUPERVISION_DEFAULTS`, and their docs these entries
    (:func:`~aioenv.core._docs.documented_with`).

    :param cleanup_time: seconds a worker's env gets to close (``aclose``, or its pool's)
        before it is forced: terminated, then killed, where its kind can; default 5.
    :param step_timeout: seconds a step may take before its worker fails with
        :class:`~aioenv.WorkerTimeout` (its env is killed or abandoned); None (the
        default): no deadline.
    :param start_timeout: the same for building an env plus its first reset, after a
        restart too; None (the default): ``max(step_timeout, reset_timeout, 60)`` when
        either is set, else no deadline.
    :param reset_timeout: the same for a reset; None (the default): ``step_timeout``. A
        step that may also reset an env (autoreset ``"same_step"``, or ``"next_step"``
        after an episode ended) gets ``step_timeout + reset_timeout``; a rollout segment
        gets ``step_timeout`` per transition it plays.
    :param restart: ``"never"`` (the default) or ``"on_failure"``: rebuild a worker's env
        after an env exception, a death or a timeout. The request in flight is answered by
        the new env's reset, or, where it was a step of an episode still open, by a
        truncated step that ends that episode (the failures guide's "An episode cut
        short"); either is marked in ``info["aioenv"]``. With ``"never"`` no restart
        budget applies: an env that raised is kept (the request raises
        :class:`~aioenv.EnvError`), one that died or hung gives its worker up.
    :param max_restarts: a worker's restart budget (default 10). Without a
        ``restart_window`` (the default) a worker is given up only in a crash loop: its
        env fails ``max_restarts + 1`` times in a row with no progress between the
        failures (a state the env answered to a request after its start: a successful
        step, reset or rollout segment; the reset that starts a new env, after a restart
        or a reconnect, is none). A flaky env that keeps making progress is restarted for
        as long as it runs; one that fails at every start or raises at every request is
        given up. The failure that finds the budget spent is raised, and the worker is
        given up.
    :param restart_window: None (the default): the crash-loop rule above. Seconds: the
        rate rule instead, at most ``max_restarts`` restarts within any window that long
        (a sliding window over the times of the failures; progress does not count);
        ``math.inf``: ``max_restarts`` restarts over the worker's lifetime.
    :param restart_backoff: seconds before a restart (default 0), doubling for
        back-to-back failures, at most 10.
    :param on_failure: called with every failure (a :class:`~aioenv.WorkerError`),
        restarted or not; default None.
    :param episode_timeout: seconds an episode may last, from its reset's answer to its
        end, the env's time and the wait for the next action alike; None (the default):
        no budget. An episode past it ends truncated, as an episode cut short by a restart
        does, with ``info["aioenv"]["reason"] == "episode_timeout"``: a step in flight is
        abandoned and its env restarted, else the next step is not sent. A budget's end is
        no failure: it spends no restart and never gives a worker up. It times one env
        per worker (not with ``envs_per_worker``).
    """

    cleanup_time: float = 5.0
    step_timeout: float | None = None
    start_timeout: float | None = None
    reset_timeout: float | None = None
    restart: Literal["never", "on_failure"] = "never"
    #: The default restart budget: a worker is given up once its env fails
    #: ``max_restarts + 1`` (11) times in a row with no progress between the failures (a
    #: crash loop; see :class:`Supervisor`). An env that makes progress between its failures
    #: is restarted for as long as it does, however often it fails and however long the run.
    max_restarts: int = 10
    #: No window: the crash-loop rule above. A number of seconds asks for the rate rule
    #: instead (at most ``max_restarts`` restarts within any window that long).
    restart_window: float | None = None
    restart_backoff: float = 0.0
    on_failure: Callable[[WorkerError], None] | None = None
    episode_timeout: float | None = None

    def __post_init__(self) -> None:
        for name in ("cleanup_time", "restart_backoff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and value >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        names = (
            "step_timeout",
            "start_timeout",
            "reset_timeout",
            "restart_window",
            "episode_timeout",
        )
        for name in names:
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            ):
                raise ValueError(f"{name} must be None or a number > 0, got {value!r}")
        if self.restart not in ("never", "on_failure"):
            raise ValueError(f"restart must be 'never' or 'on_failure', got {self.restart!r}")
        max_restarts = checked_count(self.max_restarts, "max_restarts", 0)
        object.__setattr__(self, "max_restarts", max_restarts)
        if not (self.on_failure is None or callable(self.on_failure)):
            raise ValueError(
                f"on_failure must be None or a callable (called with each WorkerError), got "
                f"{self.on_failure!r}; restart='on_failure' restarts failed envs"
            )

    def under(self, own: Supervision) -> Supervision:
        """These options for a worker whose ``own`` deadlines win over these."""
        names = ("step_timeout", "start_timeout", "reset_timeout", "episode_timeout")
        winners = {name: getattr(own, name) or getattr(self, name) for name in names}
        return dataclasses.replace(self, **winners)

    @property
    def has_deadlines(self) -> bool:
        deadlines = (self.step_timeout, self.start_timeout, self.reset_timeout)
        return any(deadline is not None for deadline in deadlines)

    def deadline(self, phase: Phase, steps: int = 1) -> float | None:
        """Seconds a request of ``phase`` may take (None: no deadline); a rollout segment
        (or a start-up that plays one) gets one step deadline per transition, ``steps``."""
        step = self.step_timeout
        if phase == "step":
            return step
        if phase == "rollout":
            return None if step is None else step * steps
        reset = step if self.reset_timeout is None else self.reset_timeout
        if phase == "reset":
            return reset
        if phase == "step and reset":
            return None if step is None or reset is None else step + reset
        if self.start_timeout is not None:
            start = self.start_timeout
        elif step is not None or reset is not None:
            start = max(step or 0.0, reset or 0.0, DEFAULT_START_TIMEOUT)
        else:
            return None
        return start * steps

    def backoff(self, consecutive_failures: int) -> float:
        if self.restart_backoff <= 0:
            return 0.0
        # The doubling stops where a float's range ends (2 ** 1024 is past it, and would
        # raise OverflowError): the cap is reached long before.
        doublings = min(max(consecutive_failures - 1, 0), 1023)
        return float(min(self.restart_backoff * 2**doublings, _MAX_BACKOFF))


#: Every supervision option at its default: what the signatures that take these options
#: (the worker kinds', the pools') read their defaults from.
SUPERVISION_DEFAULTS = Supervision()


def report_failure(on_failure: Callable[[WorkerError], None] | None, error: WorkerError) -> None:
    """Pass ``error`` to the user's ``on_failure``. The callback's own exception becomes a
    warning: a broken callback must not break the supervision that called it."""
    if on_failure is None:
        return
    try:
        on_failure(error)
    except Exception as exc:
        warnings.warn(f"on_failure callback raised {exc!r}", RuntimeWarning, stacklevel=3)


def request_phase(action: Any, autoreset: Autoreset, episode_ended: bool) -> Phase:
    """Which deadline a request for ``action`` gets (once the env has started): a reset's,
    a step's, a rollout segment's, or a step's plus a reset's for a step that may also
    reset an env: under autoreset ``"same_step"`` any step, under ``"next_step"`` the one
    after a state that ended an episode (``episode_ended``, see :func:`episode_ended`;
    with several envs per worker, the step that resets those whose episode ended)."""
    if type(action) is Rollout:
        return "rollout"
    if is_reset(action):
        return "reset"
    if autoreset == "same_step" or resets_next(autoreset, episode_ended):
        return "step and reset"
    return "step"


def episode_ended(state: Any) -> bool:
    """Whether ``state`` ended an episode of some env of its worker (a state aioenv cannot
    read, a custom env's or a rollout segment, may have: True)."""
    if isinstance(state, Step):
        return state.terminated or state.truncated
    if isinstance(state, BatchStep):
        return bool(state.dones.any())
    return True


def budget_end(
    end: float | None, starts: bool, ended: bool, autoreset: str, now: float, seconds: float
) -> float | None:
    """When the open episode runs out of its budget (``episode_timeout``: ``seconds``),
    once a state is handed out at ``now``; ``end`` is when it would before (None: no
    episode is timed). The state ``starts`` an episode (a reset's, or a restarted env's
    first), and has ``ended`` one or not. An episode's end closes the budget (None), unless
    under same-step autoreset the step carries the next episode's start, which opens a new
    one, as a start does; a state of an episode not timed yet opens one; else the budget
    runs on. Every supervisor that times episodes follows this rule (a pool's worker, an
    engine's children)."""
    if ended and autoreset != "same_step":
        return None
    if starts or ended or end is None:
        return now + seconds
    return end


def timeout_error(
    name: str,
    worker_id: int | None,
    seq: int,
    phase: Phase,
    elapsed: float,
    timeout: float,
    remedy: str,
) -> WorkerTimeout:
    """The error of ``name``'s request ``seq`` of ``phase``, past its deadline: which
    deadline, how long it ran, and what was done about it (``remedy``)."""
    return WorkerTimeout(
        f"{name}: request {seq} ({phase}) ran "
        f"{elapsed:.2f} s, past its deadline of {timeout:g} s; {remedy}",
        worker_id=worker_id,
        seq=seq,
        elapsed=elapsed,
        timeout=timeout,
    )

"""Every env of an :class:`~aioenv.AioVectorEnv` stepped in the calling thread, with no pool
and no event loop: ``mode="inline"``, and the default's choice for envs whose step costs
less than handing it to another process.

The envs run in the :class:`~aioenv.env_side._vector_runner.VectorRunner` that a grouped process
worker runs in its child, so autoreset modes, seeds, reset masks, time limits, infos and
failures mean exactly what they mean there; only the pool around it is missing, and with it
its cost (an event loop run and the pool's bookkeeping per call, tens of microseconds: more
than a CartPole step of several envs). A step here costs about what ``SyncVectorEnv``'s
costs. Restarts (``restart="on_failure"`` and its budget) work in line too, env by env, as
a process worker of one env restarts its env (:mod:`aioenv.env_side._env_restarts`); what needs a
worker to abandon a step (deadlines: ``step_timeout`` and the like, ``episode_timeout``)
or another worker kind needs another mode.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..core._commands import is_reset
from ..core._environment import EnvSource, Stepped, VectorSource
from ..core._errors import EnvError, WorkerError, env_given_up, no_pool
from ..core._messages import ControlRequest, EpisodeOptions, Failure
from ..core._supervision import Supervision
from ..env_side._env_restarts import RESTART_OPTIONS, EnvRestarts
from ..env_side._vector_runner import VectorRunner

__all__ = ["INLINE_OPTIONS", "InlineEnvs"]

#: The pool options an inline vector env takes; the others configure a pool.
INLINE_OPTIONS = frozenset({"seed", "max_episode_steps"}) | RESTART_OPTIONS

#: Requests are numbered as a worker's are; there is only one "worker" here.
_WORKER_ID = 0


class InlineEnvs:
    """The envs of an inline vector env: one request at a time, answered in line.

    It takes the places of the pool and its event loop in the vector env (the same calls
    as :class:`~aioenv.vector._runtime.Runtime`): ``exchange`` answers a request at once.
    The pipelined calls go env by env (``by_env``): ``dispatch`` queues each env's
    request, ``collect`` and ``receive`` step the first ones queued when ``step_wait`` or
    ``recv`` asks for them. A :class:`Failure` becomes the :class:`EnvError` a grouped
    worker's would, named after this group."""

    batched = True
    by_env = True
    #: No children: nothing polls between steps.
    idle_spin = None
    #: No batch of every env's observations kept: each step's BatchStep has every env's.
    observations = None

    def __init__(
        self,
        sources: list[EnvSource],
        autoreset: object,
        seed: int | None = None,
        max_episode_steps: int | None = None,
        **supervision: Any,
    ) -> None:
        episode = EpisodeOptions(autoreset=autoreset, max_episode_steps=max_episode_steps)  # type: ignore[arg-type]
        options = Supervision(**supervision)
        self.autoreset: str = episode.autoreset
        self.num_envs = len(sources)
        self.name = f"inline envs 0-{self.num_envs - 1}"
        self.closed = False
        self._runner = VectorRunner(VectorSource(tuple(sources)), seed, episode)
        self._runner.cast = True  # its batches are the vector env's answers
        #: Each env's supervision (restarts, ``on_failure``); None: an env's error is the
        #: request's, and nothing else happens.
        self.restarts: EnvRestarts | None = None
        if options.restart == "on_failure" or options.on_failure is not None:
            self.restarts = EnvRestarts(self._runner, options)
        #: The pipelined calls' requests not yet answered, by env, in the order sent.
        self._queued: dict[int, Any] = {}
        #: The envs among them whose request is a reset (async_reset's), not an action.
        self._resets: set[int] = set()

    def start(self) -> tuple[list[Any], list[Any]]:
        """Build the envs; their observation and action spaces, one per env (the first
        control builds them, and an env that could not be built fails it)."""
        return self.get_attr("observation_space"), self.get_attr("action_space")

    def step(self, actions: Any) -> Stepped | None:
        """Step every env with its action of the batch ``actions`` (a WorkerError for an
        env's failure). The lockstep hot path: nothing but the runner's own work, the
        batch split once, by the runner; its arrays are new, handed out as they are. None
        where the batch does not hold one action per env: the vector env's general way
        splits it again and says so (``step() got 3 actions for 4 envs``), as it does for
        the envs of a pool."""
        runner, restarts = self._runner, self.restarts
        if restarts is not None:
            self._check_usable()
        rows = runner.split(actions)
        if len(rows) != self.num_envs:
            return None
        result = runner.step_rows(rows)
        if isinstance(result, Failure):
            raise self._failed(result)
        if restarts is not None and restarts.unsettled:
            restarts.progress(range(self.num_envs))
        parts = {_WORKER_ID: result} if result.infos or result.final_infos else {}
        return result.observations, result.rewards, result.terminated, result.truncated, parts

    def set_idle_spin(self, seconds: float) -> None:
        """Nothing polls: the envs step in the calling thread."""

    @property
    def pool(self) -> Any:
        raise no_pool("in line, in the calling thread")

    # What the vector env asks of its envs (see ``_vector_runtime.Envs``) -----------------
    def exchange(self, ids: list[int], requests: list[Any]) -> tuple[list[Any], list[WorkerError]]:
        """Answer the request (a batch of actions, or a reset): the envs' BatchStep, or
        the error."""
        self._check_usable()
        result = self._runner.handle(requests[0])
        if isinstance(result, Failure):
            return [], [self._failed(result)]
        restarts = self.restarts
        if restarts is not None and restarts.unsettled:
            restarts.progress_of(requests[0])
        return [result], []

    # The pipelined calls, env by env: ``send`` queues, ``recv`` steps ---------------------
    def dispatch(self, env_ids: list[int], requests: list[Any], drop: bool) -> None:
        """Queue ``requests[k]`` for env ``env_ids[k]`` (with ``drop``, after dropping
        what was queued): actions, or an ``async_reset``'s resets, each with that env's own
        seed. The envs step when their answers are taken, in the order queued."""
        self._check_usable()
        if drop:
            self.drop_queued()
        self._queued.update(zip(env_ids, requests, strict=True))
        if is_reset(requests[0]):
            self._resets.update(env_ids)

    def collect(self, ids: list[int]) -> tuple[list[Any], list[WorkerError]]:
        """``step_wait``: every env's queued action answered, in one BatchStep."""
        try:
            _, batch = self._answer_queued(len(self._queued))
        except WorkerError as error:
            return [], [error]
        return [batch], []

    def receive(self, count: int, held: dict[int, Any]) -> WorkerError | None:
        try:
            envs, batch = self._answer_queued(count)
        except WorkerError as error:
            return error
        held.update(dict.fromkeys(envs, batch))
        return None

    def _answer_queued(self, count: int) -> tuple[list[int], Any]:
        """Answer the first ``count`` requests queued (the envs sent to first are the first
        ready, as they would be if they had stepped meanwhile): those envs, in the order
        of their ids, and their BatchStep, a row each in that order. They are no longer
        queued, whatever happens; an env's failure is raised (a WorkerError), as a
        group's would be."""
        queued = self._queued
        envs = sorted(itertools.islice(queued, count))
        requests = [queued.pop(env) for env in envs]
        resets = bool(self._resets)  # some are async_reset's: each request is looked at
        if resets:
            self._resets.difference_update(envs)
        self._check_usable()
        result = self._runner.step_rows(requests, envs, resets)
        if isinstance(result, Failure):
            raise self._failed(result)
        restarts = self.restarts
        if restarts is not None and restarts.unsettled:
            restarts.progress(envs)
        return envs, result

    def drop_queued(self) -> None:
        self._queued.clear()
        self._resets.clear()

    def call_envs(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The answers of the one "worker": a list with an answer per env."""
        return [self._control(ControlRequest("call", name, args, kwargs))]

    def apply_envs(
        self, functions: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[Any]:
        if functions[0] is None:
            return [None]
        return [self._control(ControlRequest("apply", "", (functions[0], *args), kwargs))]

    def get_attr(self, name: str) -> list[Any]:
        return [self._control(ControlRequest("get", name))]

    def set_attr(self, name: str, values: Any) -> None:
        value = values[0] if isinstance(values, list) else values  # a PerEnv, or one value
        self._control(ControlRequest("set", name, (value,)))

    def has_pending(self, env: int) -> bool:
        """Whether env ``env`` has a pipelined request queued (the pipelined calls count
        inline envs one by one, not as one group)."""
        return env in self._queued

    @property
    def num_pending(self) -> int:
        """The envs with a pipelined request queued."""
        return len(self._queued)

    def close(self) -> None:
        """Close every env (an error closing one is the env's to report: not raised, as a
        pool's workers do not raise theirs either)."""
        if self.closed:
            return
        self.closed = True
        self.drop_queued()
        self._runner.close()

    def _failed(self, failure: Failure) -> WorkerError:
        """The error a request whose answer is ``failure`` raises: an env given up on
        (restarts on, its budget spent) raises the error that gave it up, as a pool's
        worker does; else the env's error, named after this group."""
        if self.restarts is not None:
            given_up = self.restarts.take_given_up()
            if given_up is not None:
                return given_up
        return self._error(failure)

    def _check_usable(self) -> None:
        """WorkerRemoved once an env was given up on: the vector env cannot go on."""
        restarts = self.restarts
        if restarts is not None and restarts.removed:
            index = min(restarts.removed)
            error = restarts.removed[index]
            raise env_given_up(f"env {index}", restarts.each[index].name, error, _WORKER_ID)

    def _control(self, request: ControlRequest) -> Any:
        self._check_usable()
        result = self._runner.control(request)
        if isinstance(result, Failure):
            raise self._error(result)
        return result

    def _error(self, failure: Failure) -> WorkerError:
        return EnvError.from_failure(failure, self.name, _WORKER_ID)

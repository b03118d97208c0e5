"""A real ``gymnasium.vector.VectorEnv`` over an aioenv pool, for synchronous code, with
EnvPool's pipelined ``send``/``recv`` (see :mod:`aioenv.vector._pipeline`).

The pool runs on an event loop in a daemon thread, so the vector env works from plain code
and from inside a running loop alike, and never holds up interpreter exit. ``reset`` and
``step`` follow gymnasium's conventions exactly: batched 5-tuple, info dicts with ``_key``
masks, the three autoreset modes, ``reset(seed=s)`` seeding env ``i`` with ``s + i``.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..core._docs import documented_with, option_docs
from ..core._environment import EnvSource, VectorSource
from ..core._errors import VectorEnvClosed, WorkerError
from ..core._gymnasium import GymnasiumFactory
from ..core._messages import autoreset_name
from ..env_side._infos import add_info_of
from ..loops._background import close_at_exit
from ..pool._factory import check_option_names
from ..pool._options import POOL_DEFAULTS, PoolOptions
from ..pool._pool import WorkerPool
from ._batches import Result, VectorBatches, check_batch
from ._choice import AUTO, ModeChoice, Placement, in_parent, place_envs
from ._grouping import LOCKSTEP_IDLE_SPIN, SpinTrial
from ._lanes import LaneView
from ._layout import EnvLayout
from ._pipeline import VectorCalls
from ._probe import Probe, probe_env
from ._runtime import Envs, Runtime, raised
from ._spaces import ObservationMode, check_env_spaces, observation_spaces

__all__ = ["VECTOR_KEYWORDS", "AioVectorEnv", "GymnasiumFactory", "VectorEnvClosed"]


@documented_with(
    PoolOptions, [name for name in option_docs(PoolOptions) if name not in ("autoreset", "copy")]
)
class AioVectorEnv(VectorCalls, VectorEnv):
    """A drop-in for ``SyncVectorEnv``/``AsyncVectorEnv`` that chooses where its envs step.

    ``AioVectorEnv(env_fns)`` takes a list of env factories (or ids), one per env, as
    gymnasium's vector envs do; ``AioVectorEnv(env, num_envs)`` builds ``num_envs`` envs
    from one id or factory. ``mode="auto"`` (the default) times a step of the env the
    vector env builds anyway for its spaces, and steps the envs ``"inline"`` (in the
    calling thread, at about ``SyncVectorEnv``'s cost) when handing them to other
    processes would cost more than it saves, else in ``"process"`` workers, a child per
    core, the envs split evenly between them; ``mode_choice.reason`` gives the figures.
    Restarts (``restart="on_failure"`` and its budget) work in line and in children, env
    by env; deadlines (``step_timeout=``, ``episode_timeout=``, ...) and other pool
    options rule out stepping
    in line: the envs then step in the children the rule places, or, where it would step them in
    line, are grouped as ``mode="process"`` groups them (an option that groups them
    itself decides: ``envs_per_worker``, ``envs_per_process``, ``episode_timeout``);
    async envs step as coroutines. ``batch_size`` below ``num_envs`` is placed by the
    same rule (inline envs step when ``recv`` asks for them). Other modes are those of
    :func:`aioenv.make_pool` (``"process"``, ``"thread"``, ``"sync"``, a list of modes);
    ``mode="coroutine"`` (old spelling ``"async"``) takes async gymnasium envs, whose
    ``reset``/``step`` are ``async def``, as well as plain ones. ``.pool`` is the pool
    behind any mode but ``"inline"``.
    ``envs_per_worker=k`` groups ``k`` consecutive envs in one worker (one message per
    worker and step); ``mode="process"`` groups them by default, ``k`` chosen from the
    cores (a core for the script, one child per other core: 16 envs on 2 cores run as 1
    worker of 16, on 16 cores as 8 workers of 2; ``envs_per_worker=1`` turns it off).
    ``autoreset_mode`` (or ``autoreset``) takes gymnasium's ``AutoresetMode``, its value
    (``"NextStep"``) or aioenv's name (``"next_step"``, the default). ``observation_mode``
    is gymnasium's: ``"same"``, ``"different"`` or ``(batched, single)`` spaces. Spaces are
    checked at construction (``RuntimeError``); whatever was started is closed again when
    the constructor fails. ``copy`` is gymnasium's: True (the default), each call returns
    observations of its own; False, arrays the vector env reuses, or views of a worker's
    shared memory, valid until the next call. Use ``with AioVectorEnv(...) as envs:`` or
    call ``close()``; an env left open is closed when it is garbage collected or at
    interpreter exit.

    PettingZoo parallel envs (factories or instances) are taken as **agent lanes**: lane
    ``i * A + j`` is agent ``j`` (``possible_agents`` order) of env ``i``, ``num_envs`` is
    ``envs * A``, the single spaces are one agent's; an absent agent's lane is zeroed and
    ``infos["active"]`` says which lanes acted; seeds, masks and ``call`` answers stay per
    env, and ``batch_size``/``send`` take whole envs' lanes (see the multi-agent guide).

    Besides lockstep ``step``, the envs can be driven EnvPool's way: ``async_reset()``,
    then ``recv()`` (the first ``batch_size`` envs to finish, ``infos["env_id"]`` saying
    which) and ``send(actions)`` to those envs, so the policy runs on one batch while the
    others step. ``batch_size`` (default ``num_envs``) is a multiple of the envs a worker
    steps (grouped process workers are grouped to fit it); below ``num_envs`` it needs an
    autoreset mode other than ``"disabled"``. gymnasium's older ``step_async(actions)`` /
    ``step_wait()`` pair works too. Lockstep calls (``step``, ``reset``) raise
    gymnasium's ``AlreadyPendingCallError`` while envs are in flight.

    The pool options it takes besides ``autoreset`` and ``copy`` (whose defaults and
    meaning are gymnasium's here, as above):
    """

    def __init__(
        self,
        env: EnvSource | Sequence[EnvSource],
        num_envs: int | None = None,
        *,
        mode: str | Sequence[str] = AUTO,
        autoreset: str | AutoresetMode | None = None,
        autoreset_mode: str | AutoresetMode | None = None,
        observation_mode: ObservationMode = "same",
        batch_size: int | None = None,
        copy: bool = True,
        **pool_options: Any,
    ) -> None:
        if autoreset is not None and autoreset_mode is not None:
            raise TypeError("pass autoreset_mode= or autoreset=, not both")
        chosen = autoreset_mode if autoreset_mode is not None else autoreset
        name = autoreset_name(chosen if chosen is not None else "next_step")
        check_option_names(pool_options, "AioVectorEnv()", VECTOR_KEYWORDS)
        if observation_mode != "same":  # its error (gymnasium's) before any env is built
            observation_spaces(observation_mode, None, 0)
        self.copy = bool(copy)
        # Checked here, the whole batch before any of it is sent, wherever the envs step.
        check_actions = bool(pool_options.pop("check_actions", POOL_DEFAULTS.check_actions))
        placed = place_envs(
            env,
            num_envs,
            mode,
            name,
            batch_size,
            pool_options,
            alike=observation_mode == "same",
            copy=self.copy,
        )
        self._setup(placed, observation_mode)
        self._batches.checks_actions = check_actions

    @classmethod
    def from_pool(
        cls,
        pool: WorkerPool[Any],
        observation_mode: ObservationMode = "same",
        batch_size: int | None = None,
    ) -> AioVectorEnv:
        """Wrap a pool that has not been used from an event loop yet (its autoreset mode
        and ``check_actions`` become the vector env's; ``batch_size`` as in the
        constructor). The vector env owns the pool from then on."""
        for worker in pool.workers:
            if worker.event_loop is not None:
                raise RuntimeError(
                    f"{worker.name} is already bound to an event loop; build the pool and "
                    "wrap it with AioVectorEnv.from_pool() before using it"
                )
        venv = cls.__new__(cls)
        venv.copy = pool.copy
        kinds = sorted({worker.kind for worker in pool.workers})
        choice = ModeChoice(kinds[0] if len(kinds) == 1 else kinds, 0, "from_pool")
        sizes = [worker.num_envs for worker in pool.workers]
        first = pool.workers[0].source
        if isinstance(first, VectorSource):
            first = first.sources[0]  # the group's envs are alike: its first tells
        probe = probe_env(first, in_child=not in_parent(kinds))
        if probe.agents is not None:
            raise TypeError(
                "AioVectorEnv.from_pool() takes a pool of gymnasium envs; for PettingZoo "
                "parallel envs pass their factories to AioVectorEnv(...), which makes their lanes"
            )
        runtime = Runtime(pool, alike=observation_mode == "same")
        venv._setup(Placement(runtime, sizes, probe, choice, batch_size), observation_mode)
        # Its pool's check_actions: a whole batch checked before any is sent, not as each goes.
        venv._batches.checks_actions, pool.check_actions = pool.check_actions, False
        return venv

    def _setup(self, placed: Placement, observation_mode: ObservationMode) -> None:
        envs = self._envs = placed.envs
        self.mode_choice = placed.choice
        # Children that poll between steps by the rule are tried asleep now and then.
        self._spin_trial = (
            SpinTrial(functools.partial(_spin_children, envs))
            if placed.spin_by_rule and envs.idle_spin is not None
            else None
        )
        # Closes the envs when this vector env is closed or garbage collected unclosed; at
        # interpreter exit, an exit hook registered after multiprocessing's closes them
        # first, while their children and their loop's thread are still there.
        self._finalizer = weakref.finalize(self, _close_envs, envs, id(self))
        self._finalizer.atexit = False
        close_at_exit(id(self), envs.close)
        try:
            self._layout = EnvLayout(placed.sizes, batched=envs.batched, by_env=envs.by_env)
            self._define(envs, placed.probe, observation_mode)
            self._start_pipeline(placed.batch_size, envs.autoreset)
            observations, actions = envs.start()
            batched = check_env_spaces(
                self.observation_mode,
                *self._env_spaces,
                self._layout.flatten(observations),
                self._layout.flatten(actions),
            )
            if batched is not None:
                self.observation_space = batched
        except BaseException:
            self._finalizer()  # closes the envs
            raise

    def _define(
        self,
        envs: Envs,
        probe: Probe,
        observation_mode: ObservationMode,
    ) -> None:
        metadata, render_mode, observation_space, action_space = probe[:4]
        lanes = self._lanes = None if probe.agents is None else LaneView(probe.agents, *probe[2:4])
        count = self._layout.num_envs
        self.num_envs = count if lanes is None else count * lanes.width
        # Like gymnasium's vector envs: make_vec sets the spec, a vector env built by hand
        # has none (the single env's spec would not rebuild it).
        self.spec = None
        self.metadata = metadata
        self.render_mode = render_mode
        # aioenv's names ("next_step", ...) are the members' in lower case
        self.autoreset_mode = AutoresetMode[envs.autoreset.upper()]
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.observation_mode = observation_mode
        self.single_action_space = action_space
        self.action_space = batch_space(action_space, self.num_envs)
        if lanes is not None and observation_mode != "same":
            raise ValueError(
                "the lanes of parallel envs share one agent's observation space: "
                f"observation_mode={observation_mode!r} needs gymnasium envs"
            )
        self.observation_space, self.single_observation_space = observation_spaces(
            observation_mode, observation_space, self.num_envs
        )
        # One env's spaces as its workers step it: a parallel env's, a batch of one agent's
        # per lane.
        spaces = (self.single_observation_space, self.single_action_space)
        self._env_spaces: tuple[Any, Any] = spaces if lanes is None else probe.env_spaces()
        self._batches = VectorBatches(
            self._layout,
            *self._env_spaces,
            add_info_of(count),
            copy=self.copy,
            latest=envs.observations,
        )

    @property
    def pool(self) -> WorkerPool[Any]:
        """The pool of workers behind this vector env (AttributeError where its envs step
        in line or through the engine, with none)."""
        return self._envs.pool

    @property
    def group_sizes(self) -> tuple[int, ...]:
        """How many envs each worker (or child process) steps, in the envs' order: ``(8,)``
        for 8 envs in line, ``(4, 4)`` for two children of 4. Parallel envs count as one
        env each, not as their lanes."""
        return tuple(self._layout.sizes)

    @property
    def idle_spin(self) -> float | None:
        """Seconds the children poll for their next step before they sleep (None without
        children). Where the rule chose it (not ``idle_spin=`` given), the vector env tries
        them asleep now and then while it steps, and keeps whichever was faster."""
        return self._envs.idle_spin

    @property
    def mode(self) -> str | Sequence[str]:
        """Where the envs step: the ``mode`` given, or what ``"auto"`` chose
        (``mode_choice.reason`` says why)."""
        return self.mode_choice.mode

    def __repr__(self) -> str:
        return f"AioVectorEnv(num_envs={self.num_envs}, mode={self.mode!r})"

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """Each env's ``np_random_seed`` (``(42, 43, ...)`` after ``reset(seed=42)``)."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Each env's ``np_random`` (copies, for process workers)."""
        return self.get_attr("np_random")

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        self._check_open()
        self._check_idle("reset()")
        ids, requests = self._layout.reset_requests(seed, options, "reset()")
        if self._spin_trial is not None:
            self._spin_trial.interrupted()
        # A reset's rewards are zeros and its flags False, as a step's result that the
        # lanes (for parallel envs) spread as they spread a step's.
        result = self._lane_result(self._batches.stepped(ids, self._exchange(ids, requests)))
        return result[0], result[4]

    def step(self, actions: Any) -> Result:
        self._check_open()
        if isinstance(actions, (str, bytes)):  # checked here: the hot path calls nothing
            check_batch(actions, "step()", self.num_envs)
        if self._pipelined or self._step_pending:  # else nothing can be in flight
            self._check_idle("step()")
        lanes = self._lanes
        if lanes is not None:
            return lanes.result(self._step(lanes.env_actions(actions)))
        return self._step(actions)

    def _step(self, actions: Any) -> Result:
        """A lockstep step of the envs, with a batch of env actions. Envs that step the
        whole batch in one call (in line, at about ``SyncVectorEnv``'s cost; the engine's
        children) do so; where the envs have no such step (a pool) or cannot take
        ``actions`` as they are, the general way splits them (or says why not)."""
        if self._batches.checks_actions:
            self._batches.check_actions(actions, range(self._layout.num_envs))
        if self._spin_trial is not None:
            self._spin_trial.step_started()
        try:
            batch = self._envs.step(actions)
        except WorkerError as error:
            failed = error
        else:
            if batch is None:
                workers, requests = self._batches.step_requests(actions)
                return self._batches.stepped(workers, self._exchange(workers, requests))
            observations, rewards, terminated, truncated, parts = batch
            infos = self._batches.infos_of(parts) if parts else {}
            return observations, rewards, terminated, truncated, infos
        # Raised outside the except clause: the env's own error, without the WorkerError
        # as the context it was raised in.
        raise raised([failed], self._layout.env_of)

    # Requests out, states in (their batched form: VectorBatches) ----------------------
    def _exchange(self, ids: list[int], actions: list[Any]) -> list[Any]:
        states, errors = self._envs.exchange(ids, actions)
        if errors:
            raise raised(errors, self._layout.env_of)
        return states

    def close_extras(self, **kwargs: Any) -> None:
        if "_finalizer" not in self.__dict__:
            # The constructor raised before it placed any env; gymnasium's __del__ still
            # calls close(), and there is nothing to close.
            return
        self._finalizer()

    def __enter__(self) -> AioVectorEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed or self._envs.closed:
            raise VectorEnvClosed(
                "this AioVectorEnv is closed (close() was called); make a new one to go on"
            )


#: The keywords of :class:`AioVectorEnv` itself (the others are pool and worker options).
VECTOR_KEYWORDS = frozenset(inspect.getfullargspec(AioVectorEnv.__init__).kwonlyargs)


def _close_envs(envs: Envs, key: int) -> None:
    """Close ``envs``, whose vector env ``key`` is closed or garbage collected, and
    withdraw their exit hook."""
    close_at_exit(key, None)
    envs.close()


def _spin_children(envs: Envs, spinning: bool) -> None:
    envs.set_idle_spin(LOCKSTEP_IDLE_SPIN if spinning else 0.0)

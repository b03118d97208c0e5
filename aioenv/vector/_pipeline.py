"""The calls of :class:`~aioenv.AioVectorEnv` beyond its lockstep ``reset`` and ``step``:
its pipelined face, EnvPool's ``async_reset`` / ``send`` / ``recv`` and gymnasium's
``step_async`` / ``step_wait``; and gymnasium's calls on a vector env's envs (``call``,
``get_attr``, ``set_attr``, ``render``) and aioenv's ``apply``: each goes to the envs
through their protocol (:class:`~aioenv.vector._runtime.Envs`), in order with their
steps, and its answers come back one per env, in the envs' order.

Which envs are in flight is the pool's to know (an action sent, its state not taken);
this module keeps only what the pool cannot: that the envs in flight were sent by the
pipelined calls (not left by an interrupted lockstep call), the states a failed ``recv``
had already taken (handed out by the next one, so none is lost), the envs of the last
``recv`` and whether a ``step_async`` waits for its ``step_wait``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

from ..core._errors import WorkerError
from ._batches import Result, VectorBatches, check_batch
from ._grouping import SpinTrial
from ._lanes import LaneView
from ._layout import EnvLayout
from ._runtime import Envs, raised

__all__ = ["VectorCalls"]


class VectorCalls:
    """The pipelined face of :class:`~aioenv.AioVectorEnv` (EnvPool's ``async_reset`` /
    ``send`` / ``recv``, gymnasium's older ``step_async`` / ``step_wait``), over what the
    vector env holds: its envs, its batches and its layout, and what the pipelined calls
    have under way (:meth:`_start_pipeline`); and the calls on the envs of a vector env,
    over its envs and their layout."""

    num_envs: int
    _envs: Envs
    _batches: VectorBatches
    _layout: EnvLayout
    _lanes: LaneView | None
    _spin_trial: SpinTrial | None
    #: VectorEnvClosed once the vector env or its envs are closed (the vector env's).
    _check_open: Callable[[], None]

    def _start_pipeline(self, batch_size: int | None, autoreset: str) -> None:
        """What the pipelined calls have under way, none yet.

        ``batch_size`` envs come back from each ``recv``; a worker's envs are sent and come
        back together, so ``batch_size`` is a whole number of workers. Where the layout's
        envs are sent to ``by_env``, they are sent and come back one by one (inline envs,
        which step when ``recv`` asks for them); the pipeline's units are then envs, not
        workers."""
        layout = self._layout
        by_env = layout.by_env
        num_envs = layout.num_envs
        size = num_envs if batch_size is None else batch_size
        if isinstance(size, np.integer):
            size = int(size)
        if type(size) is not int or not 1 <= size <= num_envs:
            raise ValueError(
                f"batch_size must be an int from 1 to num_envs={num_envs}, got {batch_size!r}"
            )
        # every worker steps as many (see ``group_size``)
        per_worker = 1 if by_env else layout.sizes[0]
        if size % per_worker:
            raise ValueError(
                f"batch_size={size} is not a multiple of envs_per_worker={per_worker}: a "
                "worker's envs are stepped and come back together; choose a multiple of "
                f"{per_worker} or pass envs_per_worker=1"
            )
        if size < num_envs and autoreset == "disabled":
            raise ValueError(
                f"batch_size={size} < num_envs={num_envs} needs envs that reset themselves: "
                "autoreset_mode='disabled' resets envs only through reset(options="
                "{'reset_mask': ...}), which waits for every env; use 'next_step' (EnvPool's "
                "convention) or 'same_step'"
            )
        #: What is sent and comes back together, counted: workers, or envs (``by_env``).
        self._units = num_envs if by_env else len(layout.sizes)
        #: The envs each recv returns (a parallel env's lanes counted as one env).
        self._batch_size = size
        self._workers_per_batch = size // per_worker
        #: The envs in flight were sent by async_reset/send/step_async.
        self._pipelined = False
        #: States a recv took before an env error stopped it, by worker id.
        self._held: dict[int, Any] = {}
        #: The env ids of the last recv, in its rows' order (send's default).
        self._last_env_ids: list[int] | None = None
        self._step_pending = False

    @staticmethod
    def _step_wait_pending(call: str) -> AlreadyPendingCallError:
        """The error of ``call`` made while a ``step_async`` waits for its ``step_wait``."""
        return AlreadyPendingCallError(
            f"{call} was called while step_async() waits for step_wait(); call step_wait() first",
            "step",
        )

    def _flying(self) -> list[int]:
        """The workers whose envs the pipelined calls have in flight (sent, not received);
        when there are none, the pool's pending states are no longer theirs."""
        if not self._pipelined:
            return []
        envs = self._envs
        flying = [w for w in range(self._units) if w in self._held or envs.has_pending(w)]
        if not flying:
            self._pipelined = False
        return flying

    def _check_idle(self, call: str) -> None:
        """Before a lockstep call: nothing of the pipelined calls may be in flight."""
        if self._step_pending:
            raise self._step_wait_pending(call)
        flying = self._flying()
        if flying:
            raise AlreadyPendingCallError(
                f"{call} was called while envs {self._env_ids_of(flying)} are in flight (sent "
                "by async_reset() or send(), not yet taken by recv()); recv() them first, or "
                "async_reset() to drop them and start over",
                "step",
            )

    def _targets(self, env_id: Any) -> list[int]:
        """The env ids a ``send`` goes to, checked: known and distinct."""
        if self._step_pending:
            raise self._step_wait_pending("send()")
        last = self._last_env_ids
        if (
            type(env_id) is np.ndarray
            and env_id.ndim == 1
            and env_id.dtype == np.int64
            and last is not None
            and env_id.tolist() == last
        ):
            return last  # the last recv's envs (its infos["env_id"]): checked by then
        if env_id is None:
            if last is None:
                raise NoAsyncCallError(
                    "send() without env_id sends to the envs of the last recv(), and there is "
                    "none (no recv() returned since the last reset, or it raised); pass "
                    "env_id=, or async_reset() and recv() first",
                    "step",
                )
            return last
        ids = np.asarray(env_id)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"send() takes env_id as a sequence of env indices, got {env_id!r}")
        env_ids = [int(i) for i in ids]
        num_envs = self._layout.num_envs
        unknown = [i for i in env_ids if not 0 <= i < num_envs]
        if unknown:
            raise ValueError(f"send(): env_id {unknown} not in 0..{num_envs - 1}")
        if len(set(env_ids)) != len(env_ids):
            raise ValueError(f"send(): env_id {env_ids} names an env twice")
        return env_ids

    def _env_ids_of(self, worker_ids: list[int]) -> list[int]:
        """The env ids stepped by these workers (these envs, ``by_env``)."""
        layout = self._layout
        if layout.by_env:
            return list(worker_ids)
        return [
            env
            for w in worker_ids
            for env in range(layout.starts[w], layout.starts[w] + layout.sizes[w])
        ]

    def _lane_result(self, result: Result) -> Result:
        """An env-level result as the vector env hands it out: its lanes', for parallel
        envs."""
        return result if self._lanes is None else self._lanes.result(result)

    @property
    def batch_size(self) -> int:
        """How many envs each :meth:`recv` returns (``num_envs`` unless given; lanes, for
        parallel envs)."""
        width = 1 if self._lanes is None else self._lanes.width
        return self._batch_size * width

    def async_reset(
        self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """Reset every env without waiting: the reset observations come back through
        :meth:`recv`, ``batch_size`` envs at a time. Seeds as in :meth:`reset` (env ``i``
        gets ``seed + i``). Starts over: whatever is in flight is waited for and dropped,
        an env error among it too (so this is also how to go on after one)."""
        self._check_open()
        if options is not None and "reset_mask" in options:
            raise ValueError(
                "async_reset() resets every env; reset(options={'reset_mask': ...}) resets some"
            )
        ids, requests = self._layout.reset_requests(seed, options, "async_reset()", pipelined=True)
        # Everything in flight is dropped.
        self._held.clear()
        self._last_env_ids = None
        self._step_pending = False
        self._pipelined = True
        self._envs.dispatch(ids, requests, True)

    def send(
        self, actions: Any, env_id: Sequence[int] | npt.NDArray[np.integer] | None = None
    ) -> None:
        """Send ``actions[k]`` to env ``env_id[k]`` and return at once; their results come
        back through :meth:`recv`. ``env_id=None``: the envs of the last ``recv``, in its
        rows' order (``info["env_id"]``). ``actions`` is a batch of ``len(env_id)`` actions
        (``batch_space(single_action_space, len(env_id))``). The envs of one worker
        (``envs_per_worker``) go together. An env that ended is reset by its autoreset
        mode: ``"next_step"`` ignores the action it is sent next and returns the reset
        observation (reward 0, both flags False), as EnvPool does; ``"same_step"`` has
        already returned it, with the final observation in ``info["final_obs"]``."""
        self._check_open()
        check_batch(actions, "send()", None)
        lanes = self._lanes
        if lanes is not None:
            env_id = None if env_id is None else lanes.env_ids(env_id)
            actions = lanes.env_actions(actions)
        env_ids = self._targets(env_id)
        if self._batches.checks_actions:
            self._batches.check_actions(actions, env_ids)
        workers, requests = self._batches.send_requests(actions, env_ids)
        envs = self._envs
        if self._pipelined and (self._held or envs.num_pending):
            busy = [w for w in workers if w in self._held or envs.has_pending(w)]
            if busy:
                raise AlreadyPendingCallError(
                    f"send() to envs {self._env_ids_of(busy)}, which are in flight (sent, not "
                    "yet taken by recv()); recv() them first (nothing was sent)",
                    "step",
                )
        leftovers = not self._pipelined  # of an interrupted lockstep call: dropped first
        self._pipelined = True
        self._envs.dispatch(workers, requests, leftovers)

    def recv(self) -> Result:
        """The first ``batch_size`` envs to finish what :meth:`send` or :meth:`async_reset`
        sent them: ``(observations, rewards, terminations, truncations, infos)`` with
        ``batch_size`` rows, in the order of ``infos["env_id"]`` (the envs' indices, an
        int array; it replaces an ``"env_id"`` info of the envs' own). Infos are
        gymnasium's vector infos over the rows. An env's error is raised as :meth:`step`
        raises it; the other envs stay in flight (the states already taken come with the
        next ``recv``): go on with them, or :meth:`async_reset`. An env whose worker
        failed for good (restarts off or spent) is given up on instead: the vector env
        cannot go on without it, and every later call raises ``WorkerRemoved``."""
        self._check_open()
        if self._step_pending:
            raise self._step_wait_pending("recv()")
        held = self._held
        # the pool owes no state the pipelined calls did not send (those are dropped first)
        in_flight = self._envs.num_pending + len(held) if self._pipelined else 0
        if in_flight < self._workers_per_batch:
            raise NoAsyncCallError(
                f"recv() would wait forever: it returns batch_size={self._batch_size} envs "
                f"and only {len(self._env_ids_of(self._flying()))} env(s) are in flight; "
                "async_reset() or send() actions first",
                "step",
            )
        error = self._envs.receive(self._workers_per_batch, held)
        if error is not None:
            self._last_env_ids = None
            raise raised([error], self._layout.env_of)
        workers = sorted(held)
        states = [held.pop(worker_id) for worker_id in workers]
        env_ids = self._last_env_ids = self._env_ids_of(workers)
        return self._lane_result(self._batches.received(workers, states, env_ids))

    def step_async(self, actions: Any) -> None:
        """Send every env its action and return at once; :meth:`step_wait` returns what
        :meth:`step` would have (gymnasium's pre-1.0 pair)."""
        self._check_open()
        if self._step_pending:
            raise AlreadyPendingCallError(
                "step_async() was called again before step_wait() took the last one's "
                "results; call step_wait() first",
                "step",
            )
        self._check_idle("step_async()")
        check_batch(actions, "step_async()", self.num_envs)
        if self._lanes is not None:
            actions = self._lanes.env_actions(actions)
        if self._batches.checks_actions:
            self._batches.check_actions(actions, range(self._layout.num_envs))
        workers, requests = self._batches.step_requests(actions, "step_async()")
        if self._spin_trial is not None:
            self._spin_trial.step_started()
        self._envs.dispatch(workers, requests, True)
        self._step_pending = True

    def step_wait(self) -> Result:
        """The results of the last :meth:`step_async`, as :meth:`step` returns them."""
        self._check_open()
        if not self._step_pending:
            raise NoAsyncCallError(
                "step_wait() was called without step_async(); call step_async(actions) first",
                "step",
            )
        # Every worker (inline envs: one group of every env, as the layout counts workers).
        workers = list(self._layout.all_workers)
        try:
            states, errors = self._envs.collect(workers)
        finally:
            self._step_pending = False
        if errors:
            raise raised(errors, self._layout.env_of)
        return self._lane_result(self._batches.stepped(workers, states))

    # The calls on the envs ------------------------------------------------------------------
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        self._check_open()
        return tuple(self._layout.flatten(self._answers(self._envs.call_envs, name, args, kwargs)))

    def apply(
        self,
        function: Callable[..., Any],
        *args: Any,
        env_ids: Sequence[int] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """Run ``function(env, *args, **kwargs)`` on each env (in its worker, in order with
        its steps) and return the results: ``env`` is the env as its factory built it,
        with its own wrappers, so that ``function`` can look at them or at its outermost
        wrapper (what :meth:`call`, :meth:`get_attr` and :meth:`set_attr` reach through,
        as gymnasium's ``get_wrapper_attr`` does). ``env_ids`` (default every env): those
        envs only, negative indices counting from the end, results in their order; the
        others are not touched. Parallel envs' ids are envs', as for :meth:`call`, not
        lanes'. ``function`` must pickle for process workers."""
        self._check_open()
        count = self._layout.num_envs
        ids = list(range(count) if env_ids is None else env_ids)
        for env in ids:
            if not -count <= env < count:
                raise IndexError(f"env index {env} is out of range for {count} envs")
        ids = [int(env) % count for env in ids]
        functions = self._layout.functions(function, ids)
        answers = self._answers(self._envs.apply_envs, functions, args, kwargs)
        per_env = self._layout.flatten(answers)
        return tuple(per_env[env] for env in ids)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        self._check_open()
        return tuple(self._layout.flatten(self._answers(self._envs.get_attr, name)))

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        self._check_open()
        if self._layout.batched:
            values = self._layout.values(values)
        self._answers(self._envs.set_attr, name, values)

    def _answers(self, ask: Callable[..., Any], *args: Any) -> Any:
        """``ask(*args)``'s answers; an env's error raised as itself, a note naming the env,
        as :meth:`step` and gymnasium's vector envs raise it."""
        try:
            return ask(*args)
        except WorkerError as error:
            failed = error
        raise raised([failed], self._layout.env_of)

    def render(self) -> tuple[Any, ...] | None:
        frames = self.call("render")
        return None if all(frame is None for frame in frames) else frames

"""The pipelined face of :class:`~aioenv.AioVectorEnv`: EnvPool's ``async_reset`` /
``send`` / ``recv`` and gymnasium's ``step_async`` / ``step_wait``.

Which envs are in flight is the pool's to know (an action sent, its state not taken);
this module keeps only what the pool cannot: that the envs in flight were sent by the
pipelined calls (not left by an interrupted lockstep call), the states a failed ``recv``
had already taken (handed out by the next one, so none is lost), the envs of the last
``recv`` and whether a ``step_async`` waits for its ``step_wait``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

from ._layout import EnvLayout
from ._runtime import Envs

__all__ = ["Pipeline", "info_rows"]


class Pipeline:
    """What the pipelined calls of one vector env have under way.

    ``batch_size`` envs come back from each ``recv``; a worker's envs are sent and come
    back together, so ``batch_size`` is a whole number of workers. Where the layout's
    envs are sent to ``by_env``, they are sent and come back one by one (inline envs,
    which step when ``recv`` asks for them); the pipeline's units are then envs, not
    workers."""

    def __init__(self, layout: EnvLayout, batch_size: int | None, autoreset: str) -> None:
        by_env = layout.by_env
        num_envs = layout.num_envs
        size = num_envs if batch_size is None else batch_size
        if isinstance(size, np.integer):
            size = int(size)
        if type(size) is not int or not 1 <= size <= num_envs:
            raise ValueError(
                f"batch_size must be an int from 1 to num_envs={num_envs}, got {batch_size!r}"
            )
        # every worker steps as many (see ``grouped``)
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
        self.layout = layout
        self.by_env = by_env
        #: What is sent and comes back together, counted: workers, or envs (``by_env``).
        self.units = num_envs if by_env else len(layout.sizes)
        self.batch_size = size
        self.workers_per_batch = size // per_worker
        #: The envs in flight were sent by async_reset/send/step_async.
        self.active = False
        #: States a recv took before an env error stopped it, by worker id.
        self.held: dict[int, Any] = {}
        #: The env ids of the last recv, in its rows' order (send's default).
        self.last_env_ids: list[int] | None = None
        self.step_pending = False

    def flying(self, envs: Envs) -> list[int]:
        """The workers whose envs the pipelined calls have in flight (sent, not received);
        when there are none, the pool's pending states are no longer theirs."""
        if not self.active:
            return []
        flying = [w for w in range(self.units) if w in self.held or envs.has_pending(w)]
        if not flying:
            self.active = False
        return flying

    def check_idle(self, envs: Envs, call: str) -> None:
        """Before a lockstep call: nothing of the pipelined calls may be in flight."""
        if self.step_pending:
            raise AlreadyPendingCallError(
                f"{call} was called while step_async() waits for step_wait(); call "
                "step_wait() first",
                "step",
            )
        flying = self.flying(envs)
        if flying:
            raise AlreadyPendingCallError(
                f"{call} was called while envs {self.envs(flying)} are in flight (sent by "
                "async_reset() or send(), not yet taken by recv()); recv() them first, or "
                "async_reset() to drop them and start over",
                "step",
            )

    def targets(self, env_id: Any) -> list[int]:
        """The env ids a ``send`` goes to, checked: known and distinct."""
        if self.step_pending:
            raise AlreadyPendingCallError(
                "send() was called while step_async() waits for step_wait(); call "
                "step_wait() first",
                "step",
            )
        last = self.last_env_ids
        if (
            type(env_id) is np.ndarray
            and env_id.ndim == 1
            and env_id.dtype == np.int64
            and last is not None
            and env_id.tolist() == last
        ):
            return last  # the last recv's envs (its infos["env_id"]): checked by then
        num_envs = self.layout.num_envs
        if env_id is None:
            if self.last_env_ids is None:
                raise NoAsyncCallError(
                    "send() without env_id sends to the envs of the last recv(), and there is "
                    "none (no recv() returned since the last reset, or it raised); pass "
                    "env_id=, or async_reset() and recv() first",
                    "step",
                )
            return self.last_env_ids
        ids = np.asarray(env_id)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"send() takes env_id as a sequence of env indices, got {env_id!r}")
        env_ids = [int(i) for i in ids]
        unknown = [i for i in env_ids if not 0 <= i < num_envs]
        if unknown:
            raise ValueError(f"send(): env_id {unknown} not in 0..{num_envs - 1}")
        if len(set(env_ids)) != len(env_ids):
            raise ValueError(f"send(): env_id {env_ids} names an env twice")
        return env_ids

    def check_not_flying(self, envs: Envs, worker_ids: list[int]) -> None:
        if not self.active or not (self.held or envs.num_pending):
            return
        busy = [w for w in worker_ids if w in self.held or envs.has_pending(w)]
        if busy:
            raise AlreadyPendingCallError(
                f"send() to envs {self.envs(busy)}, which are in flight (sent, not yet taken "
                "by recv()); recv() them first (nothing was sent)",
                "step",
            )

    def check_recv(self, envs: Envs) -> None:
        if self.step_pending:
            raise AlreadyPendingCallError(
                "recv() was called while step_async() waits for step_wait(); call "
                "step_wait() first",
                "step",
            )
        # the pool owes no state the pipelined calls did not send (those are dropped first)
        in_flight = envs.num_pending + len(self.held) if self.active else 0
        if in_flight < self.workers_per_batch:
            raise NoAsyncCallError(
                f"recv() would wait forever: it returns batch_size={self.batch_size} envs and "
                f"only {len(self.envs(self.flying(envs)))} env(s) are in flight; "
                "async_reset() or send() actions first",
                "step",
            )

    def envs(self, worker_ids: list[int]) -> list[int]:
        """The env ids stepped by these workers (these envs, ``by_env``)."""
        if self.by_env:
            return list(worker_ids)
        layout = self.layout
        return [
            env
            for w in worker_ids
            for env in range(layout.starts[w], layout.starts[w] + layout.sizes[w])
        ]

    def started(self) -> None:
        """Envs were sent by a pipelined call."""
        self.active = True

    def clear(self) -> None:
        """Everything in flight was dropped (async_reset)."""
        self.held.clear()
        self.last_env_ids = None
        self.step_pending = False


def info_rows(infos: dict[str, Any], rows: npt.NDArray[np.int64]) -> dict[str, Any]:
    """Infos indexed by env (gymnasium's vector form) cut down to the envs ``rows``, in
    that order. What is no array is kept as it is: gymnasium sets an env's value into a
    dict that another env made of the same key (under the env's index), and that value
    has no rows to cut."""
    return {
        key: info_rows(value, rows)
        if type(value) is dict
        else value[rows]
        if isinstance(value, np.ndarray)
        else value
        for key, value in infos.items()
    }

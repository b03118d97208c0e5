"""The pool↔worker seam: everything a pool asks of a worker, and nothing else.

:class:`Member` is a worker as pool-side code sees it (the pool and its helpers, the
collector): what it is (``name``, ``kind``, ``worker_id``, ``num_envs``, its spaces), its
health (``closed``, ``failure``, ``restarts``), and what a pool does to it: join it to the
pool's inbox, send it actions and control requests, seed its next reset, forget a
request, move it to a new event loop, close it. The pool never reaches into a worker and
never asks which kind it is; every :class:`~aioenv.workers.Worker` is a :class:`Member`.
(Before a worker joins, ``make_pool`` and the pool's checks use the
:class:`~aioenv.workers.Worker` itself: whether it is in a pool already, its event loop,
abandoning it.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from ..core._errors import WorkerError
from ..core._messages import ControlRequest, EpisodeOptions
from ..core._supervision import Supervision
from ._inbox import Inbox

__all__ = ["FirstReplyCheck", "Member"]

#: A pool's check of a worker's first reply: the error to raise in its place, or None.
FirstReplyCheck = Callable[[Any], "WorkerError | None"]


class Member(Protocol):
    """A worker, as its pool uses it."""

    @property
    def name(self) -> str:
        """The worker's name, for messages."""

    @property
    def kind(self) -> str:
        """The worker's kind (``"thread"``, ``"process"``, ...), for the pool's repr."""

    @property
    def answers_in_line(self) -> bool:
        """Its states are delivered inside ``send_action`` (it steps its env there), not
        later by the event loop: a consumer that takes them never has to wait, so it must
        give the loop a turn now and then or the other workers' states never come in."""

    @property
    def worker_id(self) -> int | None:
        """Its id in the pool (None before it joins one)."""

    @property
    def num_envs(self) -> int:
        """Envs it steps together."""

    @property
    def observation_space(self) -> Any:
        """Its env's observation space, once the env reported it (else None)."""

    @property
    def action_space(self) -> Any:
        """Its env's action space, once the env reported it (else None)."""

    @property
    def closed(self) -> bool:
        """It was closed (or is closing)."""

    @property
    def restarts(self) -> int:
        """How many times its env was rebuilt after a failure."""

    @property
    def failure(self) -> WorkerError | None:
        """The error every later action raises, once it failed for good."""

    def join_pool(
        self,
        inbox: Inbox,
        worker_id: int,
        supervision: Supervision,
        episode: EpisodeOptions | None = None,
        check_first_reply: FirstReplyCheck | None = None,
    ) -> None:
        """Deliver to the pool's ``inbox`` as worker ``worker_id``."""

    def send_action(self, action: Any) -> None:
        """Send an action, a reset, a rollout request or ``CLOSE``."""

    def seed_next_reset(self, seed: int) -> None:
        """Seed the next reset (unless it names its own seed)."""

    def control(self, request: ControlRequest) -> asyncio.Future[Any]:
        """Send a control request; the future gets its result."""

    def forget_request(self) -> None:
        """Stop waiting for the reply to the request in flight."""

    def enter_loop(self) -> None:
        """Bind to the running event loop (a pool about to wait on a new loop)."""

    async def aclose(self, cleanup_time: float | None = None) -> None:
        """Close the env and stop the worker."""

"""The exceptions aioenv raises. Every one is an :class:`AioEnvError`."""

from __future__ import annotations

from typing import Any

import gymnasium

from ._messages import Failure

__all__ = [
    "describe_failure",
    "env_given_up",
    "no_pool",
    "restart_failed",
    "AioEnvError",
    "ClosedError",
    "EnvError",
    "InvalidAction",
    "NoActionInFlight",
    "SpaceMismatch",
    "StateNotTaken",
    "TransportError",
    "UnknownWorker",
    "VectorEnvClosed",
    "WorkerDied",
    "WorkerPaused",
    "WorkerError",
    "WorkerRemoved",
    "WorkerTimeout",
]


class AioEnvError(Exception):
    """Base class of every error raised by aioenv."""


class ClosedError(AioEnvError):
    """The pool or worker was closed; it takes no more calls."""


def pool_closed() -> ClosedError:
    """What every call of a closed pool raises."""
    return ClosedError("the pool is closed; create a new pool to keep going")


class NoActionInFlight(AioEnvError):
    """``get_state``/``get_batch`` was called with nothing to wait for (it would hang)."""


class StateNotTaken(AioEnvError):
    """An action was sent to a worker whose previous state has not been taken yet."""


class UnknownWorker(AioEnvError, LookupError):
    """A worker id that the pool does not have."""


class WorkerRemoved(AioEnvError):
    """A call named a worker its pool gave up on, or a pool-wide call found none left.

    A worker is given up on when it fails for good: its env died or hung (or could not be
    restarted) with restarts off, or its restart budget is spent (by default, a crash
    loop: ``max_restarts + 1`` failures in a row with no progress between, an env that
    raises at every request included). Its last error is raised once, in
    place of its state; from then on it is out of ``pool.active_ids`` and in
    ``pool.removed``, and every call naming it raises this error. ``worker_id`` says which
    (None when the pool has no worker left), and ``__cause__`` is that last error.
    """

    def __init__(self, message: str, worker_id: int | None = None) -> None:
        super().__init__(message)
        self.worker_id = worker_id


class WorkerPaused(AioEnvError):
    """An action was sent to a paused worker; resume it first."""


class InvalidAction(AioEnvError, ValueError):
    """With ``check_actions=True``: an action outside the worker's action space (an
    ``AioVectorEnv``'s: one env's of the batch). Nothing was sent; the worker (the vector
    env's every env) is untouched."""


class WorkerError(AioEnvError):
    """A failure of one worker. ``worker_id`` says which (``None`` outside a pool)."""

    def __init__(self, message: str, *, worker_id: int | None) -> None:
        super().__init__(message)
        self.worker_id = worker_id

    def __reduce__(self) -> tuple[Any, ...]:
        # Its attributes as they are (the constructors take keywords), and its cause (the
        # env's own exception): an engine child's env errors travel to the parent. Made
        # again with BaseException's __new__ (whatever its constructor takes: it sets
        # ``args``) and its __setstate__, which sets each item of the state as an
        # attribute, ``__cause__`` too.
        state = {**self.__dict__, "__cause__": self.__cause__}
        return (type(self).__new__, (type(self), *self.args), state)


class EnvError(WorkerError):
    """The environment raised an exception (while being built, reset or stepped), or the
    worker found the caller's mistake (a rollout's policy raised, say), which the message
    names and which no restart follows.

    ``remote_traceback`` holds the full traceback text from the worker, and ``__cause__``
    is the original exception when it could be carried back (always for sync and thread
    workers; for process workers when it pickles).
    """

    def __init__(
        self,
        message: str,
        *,
        worker_id: int | None,
        remote_traceback: str,
        exception_type: str,
        during: str,
    ) -> None:
        super().__init__(message, worker_id=worker_id)
        self.remote_traceback = remote_traceback
        self.exception_type = exception_type
        self.during = during
        #: Which env of the worker's batch raised (``envs_per_worker``), else None.
        self.env: int | None = None
        #: The errors of the batch's other envs that raised in the same request.
        self.more: list[EnvError] = []

    @classmethod
    def from_failure(cls, failure: Failure, worker_name: str, worker_id: int | None) -> EnvError:
        """The error for a :class:`Failure` reported by ``worker_name``; its cause is the
        original exception when that came back."""
        error = cls(
            f"{worker_name}: {failure.blame} raised {failure.exception_type} during "
            f"{failure.during}: {failure.message}",
            worker_id=worker_id,
            remote_traceback=failure.traceback,
            exception_type=failure.exception_type,
            during=failure.during,
        )
        error.__cause__ = failure.exception
        error.env = failure.env
        error.more = [cls.from_failure(other, worker_name, worker_id) for other in failure.more]
        return error

    def __str__(self) -> str:
        return f"{self.args[0]}\n\nTraceback in the worker:\n{self.remote_traceback}"


class TransportError(WorkerError):
    """aioenv itself failed in the parent while handling a worker's message (decoding a
    reply, say); the env is not at fault. Raised in place of the state that was lost."""


class WorkerDied(WorkerError):
    """A process worker exited without being asked to (killed, crashed, ``os._exit``)."""

    def __init__(self, message: str, *, worker_id: int | None, exitcode: int | None) -> None:
        super().__init__(message, worker_id=worker_id)
        self.exitcode = exitcode


class WorkerTimeout(WorkerError):
    """A step (or reset, or start-up) ran past its deadline. The worker's env was then
    killed (process) or abandoned (thread); a late reply is never taken for a later one."""

    def __init__(
        self, message: str, *, worker_id: int | None, seq: int, elapsed: float, timeout: float
    ) -> None:
        super().__init__(message, worker_id=worker_id)
        self.seq = seq
        self.elapsed = elapsed
        self.timeout = timeout


class SpaceMismatch(WorkerError):
    """A worker's observation or action space differs from the rest of its pool."""


class VectorEnvClosed(ClosedError, gymnasium.error.ClosedEnvironmentError):
    """A call on an :class:`AioVectorEnv` after ``close()`` (gymnasium's
    ``ClosedEnvironmentError`` and aioenv's ``ClosedError`` both catch it)."""


def describe_failure(error: WorkerError) -> str:
    """``WorkerTimeout: <message>``: how a restart's reason reads."""
    return f"{type(error).__name__}: {error.args[0] if error.args else error}"


def no_pool(where: str) -> AttributeError:
    """What ``AioVectorEnv.pool`` raises where its envs step with no pool (``where``: how
    they step instead), saying how to have one."""
    return AttributeError(
        f"this AioVectorEnv steps its envs {where}, with no pool; pass mode='sync' or "
        "'thread' for one, or wrap a pool of your own: "
        "AioVectorEnv.from_pool(aioenv.make_pool(...))"
    )


def env_given_up(envs: str, name: str, error: WorkerError, worker_id: int) -> WorkerRemoved:
    """The error of every call on a vector env that gave up on ``envs`` (``name``'s, given
    up for ``error``): its pool's worker, or an env stepped in line whose restart budget
    was spent."""
    removed = WorkerRemoved(
        f"{envs} of the AioVectorEnv ({name}) failed for good and was given up on "
        f"({describe_failure(error)}); an AioVectorEnv has a fixed number of envs and cannot "
        "go on without it: close it and make a new one (restart='on_failure' rebuilds a "
        "failed env instead of giving it up, within its restart budget: max_restarts)",
        worker_id,
    )
    removed.__cause__ = error
    return removed


def restart_failed(name: str, worker_id: int | None, reason: str, exc: Exception) -> WorkerError:
    """The error of ``name`` (worker ``worker_id``), given up because no new env could be
    started at all (``exc``, its cause) after the failure ``reason``."""
    error = WorkerError(
        f"{name}: could not restart after {reason} ({type(exc).__name__}: {exc})",
        worker_id=worker_id,
    )
    error.__cause__ = exc
    return error

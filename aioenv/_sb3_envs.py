"""What :class:`aioenv.sb3.AioVecEnv` runs beside its envs, in their workers: the factory
each env is built by, and the functions ``get_attr``, ``env_method``, ``has_attr`` and
``env_is_wrapped`` run on an env, with Stable-Baselines3's meaning (``set_attr`` runs the
builtin ``setattr``).

This module imports neither Stable-Baselines3 nor torch, so that a process worker that
unpickles these functions does not import them either: only a probe env's build imports
SB3's ``Monitor`` module, to keep that env's episodes out of the user's monitor files.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium

from .core._environment import describe_source
from .vector._probe import probing

__all__ = ["EnvFactory", "call_method", "get_attr", "has_attr", "is_wrapped"]

_WRITER = "ResultsWriter"
_patch_lock = threading.Lock()


class EnvFactory:
    """An SB3 env factory as an env source: ``env_fn()`` builds the env, unchanged.

    The env a vector env builds besides its own, to read their spaces and time a step (its
    probe env), is built with SB3's ``Monitor`` writing nothing: its episodes are not the
    user's, and its monitor file is the one the vector env's own env of that factory
    writes."""

    def __init__(self, env_fn: Callable[[], Any]) -> None:
        self.env_fn = env_fn
        self.description = describe_source(env_fn)  # workers' and errors' name of the env

    def __call__(self) -> Any:
        if not probing():
            return self.env_fn()
        with _monitors_write_nothing():
            return self.env_fn()

    def __repr__(self) -> str:
        return f"EnvFactory({self.env_fn!r})"


@contextlib.contextmanager
def _monitors_write_nothing() -> Iterator[None]:
    """SB3 ``Monitor``s built by this thread in the block get no writer, so write nothing
    (``Monitor`` makes its writer when it is built, and keeps it). Other threads' monitors
    are built as usual: the stand-in asks :func:`probing`, which is per thread."""
    from stable_baselines3.common import monitor

    with _patch_lock:
        if _ProbeAwareWriter.users == 0:
            _ProbeAwareWriter.real = getattr(monitor, _WRITER)
            setattr(monitor, _WRITER, _ProbeAwareWriter)
        _ProbeAwareWriter.users += 1
    try:
        yield
    finally:
        with _patch_lock:
            _ProbeAwareWriter.users -= 1
            if _ProbeAwareWriter.users == 0:
                setattr(monitor, _WRITER, _ProbeAwareWriter.real)


class _ProbeAwareWriter:
    """SB3's ``ResultsWriter`` for everyone but a probe env's build, whose ``Monitor`` gets
    None: no writer, as a ``Monitor`` given no filename has (it then writes nothing, and
    opens no file)."""

    #: SB3's own ResultsWriter, and how many builds use the stand-in now.
    real: Any = None
    users = 0

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if not probing():
            return cls.real(*args, **kwargs)
        return None


# Run on an env as its factory built it (its outermost wrapper), as SB3's workers do ------
def get_attr(env: Any, name: str) -> Any:
    return env.get_wrapper_attr(name)


def call_method(env: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return env.get_wrapper_attr(name)(*args, **kwargs)


def has_attr(env: Any, name: str) -> bool:
    try:
        env.get_wrapper_attr(name)
    except AttributeError:
        return False
    return True


def is_wrapped(env: Any, wrapper_class: type) -> bool:
    """Whether one of the gymnasium wrappers around ``env`` is a ``wrapper_class``."""
    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False

"""One env built in the parent, as gymnasium's ``AsyncVectorEnv`` does, for a vector env's
spaces and metadata before any worker starts, and for how long one step of it takes (what
``AioVectorEnv``'s default mode is chosen by)."""

from __future__ import annotations

import asyncio
import copy
import inspect
import statistics
import threading
import time
import warnings
from collections.abc import Coroutine
from typing import Any, NamedTuple

from ..core._async_environment import AsyncGymnasiumEnvironment, as_async_environment
from ..core._environment import EnvSource, describe_source
from ..core._gymnasium import GymnasiumEnvironment, build_environment

__all__ = ["Probe", "probe_env"]

#: How long the probe env is stepped for its step time: at least ``_MIN_STEPS`` steps, then
#: until ``_MAX_STEPS`` or ``_BUDGET`` seconds, whichever comes first.
_MIN_STEPS = 3
_MAX_STEPS = 64
_BUDGET = 0.05
#: The first steps of a new env are slower (caches, lazy set-up): not counted.
_WARM_UP = 2


class Probe(NamedTuple):
    """What a vector env learns from its probe env before any worker starts."""

    metadata: dict[str, Any]
    render_mode: Any
    observation_space: Any
    action_space: Any
    #: The median time of one step (seconds), when it was timed; None for an async env,
    #: when not asked, or when the env raised while being timed.
    step_seconds: float | None = None
    #: The env's coroutines are ``async def`` (its steps cannot be timed in line).
    is_async: bool = False


def probe_env(source: EnvSource, *, timed: bool = False) -> Probe:
    """The metadata, render mode and spaces of the env ``source`` builds: a gymnasium env
    or an async gymnasium env (whose coroutines are not run: reading its attributes is
    enough). With ``timed``, a plain env is also reset and stepped with sampled actions
    for a few dozen milliseconds at most, for its median step time (the actions drawn
    beforehand, the first steps left out). The env is closed
    again, an async ``close`` awaited."""
    env = build_environment(source, as_async_environment)
    try:
        if not isinstance(env, (GymnasiumEnvironment, AsyncGymnasiumEnvironment)):
            raise TypeError(
                f"AioVectorEnv needs gymnasium envs (plain or async), and "
                f"{describe_source(source)} built a {type(env).__name__}; drive other envs "
                "with a pool (aioenv.make_pool)"
            )
        single = env.env
        is_async = isinstance(env, AsyncGymnasiumEnvironment)
        return Probe(
            dict(getattr(single, "metadata", {})),
            getattr(single, "render_mode", None),
            single.observation_space,
            single.action_space,
            _step_seconds(single) if timed and not is_async else None,
            is_async,
        )
    finally:
        _close(env)


def _step_seconds(env: Any) -> float | None:
    """The median time of a step of ``env`` with sampled actions, or None if it raised
    (the workers will raise it again, with the worker's name). The actions come from a
    seeded copy of the action space, so the space the vector env hands out is untouched;
    the probe's own warnings (gymnasium's env checker) are not shown, the real envs give
    their own."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            space = copy.deepcopy(env.action_space)
            space.seed(0)
            actions = [space.sample() for _ in range(_MAX_STEPS + _WARM_UP)]
            env.reset(seed=0)
            times: list[float] = []
            started = time.perf_counter()
            for action in actions:
                before = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(action)
                times.append(time.perf_counter() - before)
                if terminated or truncated:
                    env.reset()
                if len(times) >= _MIN_STEPS + _WARM_UP and time.perf_counter() - started > _BUDGET:
                    break
    except Exception:
        return None
    return statistics.median(times[_WARM_UP:])


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if not callable(close):
        return
    closing = close()
    if inspect.iscoroutine(closing):
        _run_aside(closing)


def _run_aside(coroutine: Coroutine[Any, Any, Any]) -> None:
    """Run ``coroutine`` to its end on a private event loop in a short-lived thread: the
    caller may be inside a running loop (where ``asyncio.run`` refuses to start), and the
    vector env's own loop does not exist yet. What the coroutine raises is raised here."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(coroutine)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, name="aioenv-probe-close")
    thread.start()
    thread.join()
    if raised:
        raise raised[0]

"""One env built in the parent, as gymnasium's ``AsyncVectorEnv`` does, for a vector env's
spaces and metadata before any worker starts."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any

from ._async_environment import AsyncGymnasiumEnvironment, as_async_environment
from ._environment import EnvSource, GymnasiumEnvironment, build_environment, describe_source

__all__ = ["probe_env"]


def probe_env(source: EnvSource) -> tuple[dict[str, Any], Any, Any, Any]:
    """The metadata, render mode and spaces of the env ``source`` builds: a gymnasium env
    or an async gymnasium env (whose coroutines are not run: reading its attributes is
    enough). The env is closed again, an async ``close`` awaited."""
    env = build_environment(source, as_async_environment)
    try:
        if not isinstance(env, (GymnasiumEnvironment, AsyncGymnasiumEnvironment)):
            raise TypeError(
                f"AioVectorEnv needs gymnasium envs (plain or async), and "
                f"{describe_source(source)} built a {type(env).__name__}; drive other envs "
                "with a pool (aioenv.make_pool)"
            )
        single = env.env
        return (
            dict(getattr(single, "metadata", {})),
            getattr(single, "render_mode", None),
            single.observation_space,
            single.action_space,
        )
    finally:
        _close(env)


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

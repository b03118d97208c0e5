"""One env built before any worker starts, as gymnasium's ``AsyncVectorEnv`` does, for a
vector env's spaces and metadata, and for how long one step of it takes (what
``AioVectorEnv``'s default mode is chosen by).

Where the vector env's envs may run in child processes, the probe env is built in a child
process of its own too, which ends whatever the env started when it exits (see
:mod:`aioenv.env_side._process_group`): nothing the probe env starts outlives the vector
env, as nothing a process worker's env starts outlives the worker. Where they run in the
parent's process, so does the probe env, in the calling thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import functools
import inspect
import socket
import statistics
import threading
import time
import warnings
from typing import Any, NamedTuple

import cloudpickle
from gymnasium import Space
from gymnasium.vector.utils import batch_space

from ..core import _pickling as pickling
from ..core._agents import AgentLanesEnv, is_parallel_env
from ..core._environment import EnvSource, describe_source
from ..core._gymnasium import (
    AsyncGymnasiumEnvironment,
    GymnasiumEnvironment,
    as_async_environment,
    build_environment,
    is_env_instance,
)
from ..core._registry import merge as merge_registry
from ..core._registry import snapshot as registry_snapshot
from ..engine._start import ChildStart, Context, resolve_context
from ..env_side._process_group import (
    end_own_group,
    exit_with_own_group_when_gone,
    lead_own_group,
)
from ..loops._inline import in_helper_thread

__all__ = ["Probe", "probe_env", "probing"]

#: How long the probe env is stepped for its step time: at least ``_MIN_STEPS`` steps, then
#: until ``_MAX_STEPS`` or ``_BUDGET`` seconds, whichever comes first.
_MIN_STEPS = 3
_MAX_STEPS = 64
_BUDGET = 0.05
#: The first steps of a new env are slower (caches, lazy set-up): not counted.
_WARM_UP = 2


#: True while this thread builds, steps and closes a probe env.
_PROBING: contextvars.ContextVar[bool] = contextvars.ContextVar("aioenv_probing", default=False)


def probing() -> bool:
    """Whether the env being built (or stepped) now in this thread is a probe env: one a
    vector env builds besides its own envs, to read their spaces and time a step, and
    throws away. A factory may leave out what only its real envs should do (writing a
    log of their episodes, say)."""
    return _PROBING.get()


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
    #: A PettingZoo parallel env's ``possible_agents`` (its lanes; the spaces above are
    #: one agent's); None for a gymnasium env.
    agents: tuple[Any, ...] | None = None

    def env_spaces(self) -> tuple[Space[Any], Space[Any]]:
        """The observation and action spaces of one env as its workers step it: the ones
        above, or for parallel envs (stepped as their agent lanes,
        :class:`~aioenv.core._agents.AgentLanesEnv`) a batch of one agent's per lane."""
        if self.agents is None:
            return self.observation_space, self.action_space
        lanes = len(self.agents)
        return batch_space(self.observation_space, lanes), batch_space(self.action_space, lanes)


def probe_env(
    source: EnvSource,
    *,
    timed: bool = False,
    in_child: bool = False,
    context: Context | str | None = None,
) -> Probe:
    """The metadata, render mode and spaces of the env ``source`` builds: a gymnasium env
    or an async gymnasium env (whose coroutines are not run: reading its attributes is
    enough). With ``timed``, a plain env is also reset and stepped with sampled actions
    for a few dozen milliseconds at most, for its median step time (the actions drawn
    beforehand, the first steps left out). The env is closed again, an async ``close``
    awaited, unless ``source`` is an env instance (the env a worker then steps).

    ``in_child``: build it in a child process started with ``context`` (a process
    worker's), which ends whatever the env started; here if the env cannot be pickled or
    its findings cannot come back. What the env raises is raised here, its traceback in
    the child as the cause."""
    if in_child:
        probe = _probe_in_child(source, timed, resolve_context(context))
        if probe is not None:
            return probe
    return _probe_here(source, timed)


def _probe_here(source: EnvSource, timed: bool) -> Probe:
    token = _PROBING.set(True)
    try:
        env = build_environment(source, _as_lanes_or_env)
        try:
            if not isinstance(env, (GymnasiumEnvironment, AsyncGymnasiumEnvironment)):
                raise TypeError(
                    f"AioVectorEnv needs gymnasium envs (plain or async), and "
                    f"{describe_source(source)} built a {type(env).__name__}; drive other envs "
                    "with a pool (aioenv.make_pool)"
                )
            single = env.env
            is_async = isinstance(env, AsyncGymnasiumEnvironment)
            lanes = single if isinstance(single, AgentLanesEnv) else None
            return Probe(
                dict(getattr(single, "metadata", {})),
                getattr(single, "render_mode", None),
                single.observation_space if lanes is None else lanes.single_observation_space,
                single.action_space if lanes is None else lanes.single_action_space,
                _step_seconds(single) if timed and not is_async else None,
                is_async,
                None if lanes is None else lanes.lane_agents,
            )
        finally:
            if not is_env_instance(source):  # an instance is the one to step
                _close(env)
    finally:
        _PROBING.reset(token)


def _as_lanes_or_env(obj: object) -> Any:
    """A parallel env as its lanes (see :mod:`aioenv.core._agents`), else as a worker
    would adapt it."""
    return as_async_environment(AgentLanesEnv(obj) if is_parallel_env(obj) else obj)


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
    """Close the probe env, dropping what its close raises (as a worker drops its env's)."""
    close = getattr(env, "close", None)
    if not callable(close):
        return
    with contextlib.suppress(Exception):
        closing = close()
        if inspect.iscoroutine(closing):
            # Run to its end on a private event loop in a short-lived thread: the caller
            # may be inside a running loop (where ``asyncio.run`` refuses to start), and
            # the vector env's own loop does not exist yet.
            in_helper_thread(functools.partial(asyncio.run, closing))


class RemoteTraceback(Exception):
    """The traceback of an exception raised in the probe env's child process."""

    def __str__(self) -> str:
        return f"\n\n{self.args[0]}"


def _probe_in_child(source: EnvSource, timed: bool, context: Context) -> Probe | None:
    """:func:`probe_env` in a child process; None if the env cannot travel there or its
    findings cannot come back."""
    try:
        payload = pickling.dumps(source)
    except Exception:
        return None
    arguments = [payload, registry_snapshot(), timed]
    child = ChildStart(context, "probe", arguments, "aioenv.vector._probe:_serve_probe")
    data = bytearray()
    try:
        child.start()
        child.socket.setblocking(True)
        while chunk := child.socket.recv(1 << 16):
            data += chunk
        child.join(None)  # it has closed the env and ended what the env started
    finally:
        child.alive.close()  # a child still running (the parent was interrupted) exits now
        exitcode = child.join(None)  # (None: its start failed, raised from here)
        child.close()  # and whatever is left of what the env started
    if not data:
        raise RuntimeError(
            f"AioVectorEnv: the process that built {describe_source(source)} to read its "
            f"spaces exited with code {exitcode} before it reported them"
        )
    try:
        kind, found, remote = cloudpickle.loads(bytes(data))
    except Exception:
        return None  # what it found (or raised) is made of classes this process lacks
    if kind == "raised":
        raise found from RemoteTraceback(remote)
    return found if kind == "probe" else None


def _serve_probe(
    sock: socket.socket, alive: socket.socket, payload: bytes, registry: bytes, timed: bool
) -> None:
    """The probe env's child process: build the env, send back ``("probe", Probe, "")``,
    ``("raised", exception, traceback)`` or ``("unsent", None, "")``, then end whatever the
    env started."""
    import traceback

    lead_own_group()
    threading.Thread(target=exit_with_own_group_when_gone, args=(alive,), daemon=True).start()
    try:
        try:
            merge_registry(registry)
            answer: tuple[str, Any, str] = (
                "probe",
                _probe_here(cloudpickle.loads(payload), timed),
                "",
            )
        except Exception as exc:
            answer = ("raised", exc, "".join(traceback.format_exception(exc)))
        try:
            data = cloudpickle.dumps(answer)
        except Exception:
            data = cloudpickle.dumps(("unsent", None, ""))
        sock.sendall(data)
    finally:
        sock.close()
        end_own_group()

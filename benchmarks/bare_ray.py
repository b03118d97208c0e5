"""W8's references: Ray's own call paths with nothing of aioenv's on them, measured in
the same run as aioenv's Ray rows, so that a Ray row can be read against what Ray itself
allows on the same machine.

Each actor holds ``envs_per_actor`` envs; the driver, one asyncio task per actor, sends
an actor its envs' actions in one call, awaits the observations (each env reset where
its episode ended), computes the next actions and calls again. An actor steps its envs
side by side, each in a thread of its own where it holds more than one, as aioenv's
actors do with envs that wait; so a round costs one env step plus one call's round trip.
Two call paths:

- ``compiled=False``: an actor method call (``actor.step.remote(actions)``), awaited as
  an ``ObjectRef``: the path aioenv's Ray workers take;
- ``compiled=True``: the same method in a compiled graph per actor
  (``experimental_compile(enable_asyncio=True)``), whose calls go through shared memory
  channels instead of Ray's task submission.

No supervision, episodes, errors or restarts: a bound, not a pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any

import numpy as np
from envs import EnvFactory, Policy
from machine import CpuAccount
from runners import Meter, Sample, Timing, run_coroutine


class _Envs:
    """An actor's envs: ``k`` envs from ``factory``, stepped side by side when ``k > 1``."""

    def __init__(self, factory: EnvFactory, k: int, seeds: list[int]) -> None:
        self.envs = [factory() for _ in range(k)]
        self.first = [env.reset(seed=seed)[0] for env, seed in zip(self.envs, seeds, strict=True)]
        self.threads = concurrent.futures.ThreadPoolExecutor(k) if k > 1 else None

    def ready(self) -> list[Any]:
        return self.first

    def step(self, actions: list[Any]) -> list[Any]:
        if self.threads is None:
            return [self._step(0, actions[0])]
        return list(self.threads.map(self._step, range(len(actions)), actions))

    def _step(self, index: int, action: Any) -> Any:
        env = self.envs[index]
        observation, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            observation, _ = env.reset()
        return observation


def run_bare_ray(
    env: EnvFactory,
    n: int,
    *,
    envs_per_actor: int,
    compiled: bool,
    num_cpus: float,
    policy: Policy,
    seed: int,
    timing: Timing,
    account: CpuAccount,
) -> Sample:
    """``n`` envs in ``n // envs_per_actor`` actors, each reserving ``num_cpus``, driven
    per actor over the call path ``compiled`` names (see the module's docstring)."""
    import ray

    from aioenv.workers.ray._host import init_ray

    init_ray(ray)  # the settings aioenv's own Ray rows start Ray with, if they did not
    return run_coroutine(
        _measure(ray, env, n, envs_per_actor, compiled, num_cpus, policy, seed, timing, account)
    )


async def _measure(
    ray: Any,
    env: EnvFactory,
    n: int,
    k: int,
    compiled: bool,
    num_cpus: float,
    policy: Policy,
    seed: int,
    timing: Timing,
    account: CpuAccount,
) -> Sample:
    started = time.perf_counter()
    actor_class = ray.remote(num_cpus=num_cpus)(_Envs)
    seeds = [seed + index for index in range(n)]
    actors = [actor_class.remote(env, k, seeds[i : i + k]) for i in range(0, n, k)]
    graphs: list[Any] = []
    try:
        firsts = await asyncio.gather(*(actor.ready.remote() for actor in actors))
        if compiled:
            from ray.dag import InputNode

            for actor in actors:
                with InputNode() as actions:
                    node = actor.step.bind(actions)
                graphs.append(node.experimental_compile(enable_asyncio=True))
        build_s = time.perf_counter() - started
        meter = Meter(timing, account)

        async def drive(index: int, observations: list[Any]) -> None:
            actor = actors[index]
            while meter.running():
                actions = policy.many(np.stack(observations)).tolist()
                if compiled:
                    observations = await (await graphs[index].execute_async(actions))
                else:
                    observations = await actor.step.remote(actions)
                if meter.running():  # a round that ends after the window closed is not counted
                    meter.count += k

        await asyncio.gather(*(drive(i, first) for i, first in enumerate(firsts)))
    finally:
        for graph in graphs:
            graph.teardown()
        for actor in actors:
            ray.kill(actor)
    return meter.sample(build_s)

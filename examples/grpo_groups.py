"""Groups of rollouts for GRPO-style training, fed to an async policy server.

Each task is an agent episode of a few turns; every turn calls a tool whose latency is
lognormal (mean 200 ms, sigma 1: most calls are quick, a few take seconds). The policy is a
simulated inference server with continuous batching: requests that arrive while a batch
runs wait for the next one, and a batch of ``n`` sequences takes 20 ms + 1 ms x ``n``.

Three ways to play the same rollouts (``--tasks`` tasks, ``--group-size`` rollouts each,
on ``--envs`` coroutine envs) are compared:

- first-ready (``aioenv.collect_groups``): every state that is ready goes to the server in
  one call while the other envs keep running; a free env takes the next rollout at once,
  and each group comes out as soon as its last member ends;
- lockstep: every env waits for the slowest tool call of the step before the server sees
  the batch, and a wave of rollouts ends with its longest one;
- one policy call per env: each env calls the server on its own (the server still batches
  the calls that meet, as continuous batching does).

It prints the throughput and how much of the time the policy server sat idle. Run with
``python examples/grpo_groups.py [--envs N --tasks T --group-size G --time-scale S]``;
``--time-scale`` multiplies every latency (0.25 runs four times faster, same shape).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import random
import time
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np

import aioenv

TOOL_MEAN = 0.200  # seconds
TOOL_SIGMA = 1.0
BATCH_LATENCY = 0.020  # seconds per batch
SEQUENCE_LATENCY = 0.001  # seconds per sequence in the batch


class ToolEnv:
    """An agent task as an async gymnasium env: ``reset(options=task)`` starts the task
    (``task["turns"]`` turns); each step waits for a tool call, reward 1 on the last."""

    observation_space = gymnasium.spaces.Box(0, 1000, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(4)

    def __init__(self, seed: int, scale: float) -> None:
        self.rng = random.Random(seed)
        self.scale = scale
        self.task: dict[str, Any] = {}
        self.turn = 0

    def _observation(self) -> np.ndarray[Any, Any]:
        return np.array([self.task["id"], self.turn], np.float32)

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
        self.task, self.turn = dict(options or {}), 0
        return self._observation(), {}

    async def step(
        self, action: int
    ) -> tuple[np.ndarray[Any, Any], float, bool, bool, dict[str, Any]]:
        await asyncio.sleep(tool_latency(self.rng) * self.scale)
        self.turn += 1
        done = self.turn >= self.task["turns"]
        return self._observation(), float(done), done, False, {}


def tool_latency(rng: random.Random) -> float:
    """Lognormal with mean TOOL_MEAN and sigma TOOL_SIGMA (of the log)."""
    return rng.lognormvariate(math.log(TOOL_MEAN) - TOOL_SIGMA**2 / 2, TOOL_SIGMA)


class PolicyServer:
    """A simulated inference server with continuous batching: one engine runs batches
    back to back; each batch takes every request waiting when it starts."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self._waiting: list[tuple[Sequence[Any], asyncio.Future[list[int]]]] = []
        self._wake = asyncio.Event()
        self.busy = 0.0  # seconds spent running batches
        self.batches = 0
        self.sequences = 0
        self.requests = 0

    async def generate(self, observations: Sequence[Any]) -> list[int]:
        """One action per observation, once the batch this request joins has run."""
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._waiting.append((observations, future))
        self.requests += 1
        self._wake.set()
        return await future

    async def serve(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                requests, self._waiting = self._waiting, []
                count = sum(len(observations) for observations, _ in requests)
                started = time.perf_counter()
                await asyncio.sleep((BATCH_LATENCY + SEQUENCE_LATENCY * count) * self.scale)
                self.busy += time.perf_counter() - started
                self.batches += 1
                self.sequences += count
                for observations, future in requests:
                    if not future.done():
                        future.set_result([int(o[1]) % 4 for o in observations])


@dataclasses.dataclass
class Run:
    name: str
    seconds: float
    steps: int
    rollouts: int
    server: PolicyServer

    def report(self) -> str:
        idle = 1 - self.server.busy / self.seconds
        mean_batch = self.server.sequences / max(self.server.batches, 1)
        return (
            f"{self.name}: {self.seconds:.1f} s, {self.steps / self.seconds:.1f} steps/s, "
            f"{self.rollouts / self.seconds:.2f} rollouts/s, policy server idle {idle:.0%} "
            f"({self.server.requests} requests in {self.server.batches} batches of "
            f"{mean_batch:.1f} sequences on average)"
        )


async def with_server(scale: float, play: Any) -> tuple[float, int, int, PolicyServer]:
    server = PolicyServer(scale)
    engine = asyncio.create_task(server.serve())
    started = time.perf_counter()
    try:
        steps, rollouts = await play(server)
    finally:
        engine.cancel()
    return time.perf_counter() - started, steps, rollouts, server


async def first_ready(args: argparse.Namespace, tasks: list[dict[str, Any]]) -> Run:
    """aioenv: first-ready batches to the server, groups out as soon as they end."""

    async def play(server: PolicyServer) -> tuple[int, int]:
        sources = [lambda i=i: ToolEnv(args.seed + i, args.time_scale) for i in range(args.envs)]
        async with aioenv.make_pool(sources, mode="coroutine") as pool:

            async def policy(batch: aioenv.Batch[Any]) -> list[int]:
                return await server.generate(list(batch.observations))

            groups = aioenv.collect_groups(pool, policy, tasks, group_size=args.group_size)
            order, steps, rollouts = [], 0, 0
            async for group in groups:  # a trainer would compute advantages here
                order.append(group.task_id)
                steps += len(group.trajectories)
                rollouts += len(group.members)
                if not group.complete:
                    print(f"  task {group.task_id} incomplete: {dict(group.failed)}")
        print(f"  groups out in the order they ended: {' '.join(map(str, order))}")
        return steps, rollouts

    seconds, steps, rollouts, server = await with_server(args.time_scale, play)
    return Run("first-ready (aioenv.collect_groups)", seconds, steps, rollouts, server)


def members(args: argparse.Namespace, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [task for task in tasks for _ in range(args.group_size)]


async def lockstep(args: argparse.Namespace, tasks: list[dict[str, Any]]) -> Run:
    """Waves of ``envs`` rollouts; every step waits for the slowest env of the wave."""
    envs = [ToolEnv(args.seed + i, args.time_scale) for i in range(args.envs)]

    async def play(server: PolicyServer) -> tuple[int, int]:
        todo, steps = members(args, tasks), 0
        for start in range(0, len(todo), len(envs)):
            wave = list(zip(envs, todo[start : start + len(envs)], strict=False))
            resets = await asyncio.gather(*(env.reset(options=task) for env, task in wave))
            observations = {i: observation for i, (observation, _) in enumerate(resets)}
            while observations:
                live = sorted(observations)
                actions = await server.generate([observations[i] for i in live])
                results = await asyncio.gather(
                    *(wave[i][0].step(action) for i, action in zip(live, actions, strict=True))
                )
                steps += len(live)
                for i, (observation, _, terminated, truncated, _) in zip(
                    live, results, strict=True
                ):
                    observations[i] = observation
                    if terminated or truncated:
                        del observations[i]
        return steps, len(todo)

    seconds, steps, rollouts, server = await with_server(args.time_scale, play)
    return Run("lockstep (every env waits for the slowest)", seconds, steps, rollouts, server)


async def per_env_calls(args: argparse.Namespace, tasks: list[dict[str, Any]]) -> Run:
    """Each env plays rollouts on its own, one policy call per env and step."""
    envs = [ToolEnv(args.seed + i, args.time_scale) for i in range(args.envs)]

    async def play(server: PolicyServer) -> tuple[int, int]:
        todo = members(args, tasks)
        todo.reverse()
        steps = 0

        async def agent(env: ToolEnv) -> None:
            nonlocal steps
            while todo:
                observation, _ = await env.reset(options=todo.pop())
                done = False
                while not done:
                    [action] = await server.generate([observation])
                    observation, _, terminated, truncated, _ = await env.step(action)
                    steps += 1
                    done = terminated or truncated

        await asyncio.gather(*(agent(env) for env in envs))
        return steps, len(members(args, tasks))

    seconds, steps, rollouts, server = await with_server(args.time_scale, play)
    return Run("one policy call per env", seconds, steps, rollouts, server)


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    tasks = [
        {"id": i, "turns": rng.randint(args.min_turns, args.max_turns)} for i in range(args.tasks)
    ]
    total = sum(task["turns"] for task in tasks) * args.group_size
    print(
        f"{args.envs} coroutine envs; {args.tasks} tasks x {args.group_size} rollouts "
        f"({args.tasks * args.group_size} rollouts, {total} steps); tool latency lognormal "
        f"mean {TOOL_MEAN * 1000:.0f} ms sigma {TOOL_SIGMA:g}; policy server "
        f"{BATCH_LATENCY * 1000:.0f} ms + {SEQUENCE_LATENCY * 1000:.0f} ms per sequence per "
        f"batch; time scale {args.time_scale:g}"
    )
    for method in (first_ready, lockstep, per_env_calls):
        run = await method(args, tasks)
        assert run.steps == total, (run.name, run.steps, total)
        print(run.report())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--min-turns", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=12)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    aioenv.run(main(parser.parse_args()))

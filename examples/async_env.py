"""Coroutine envs against a game server: each env holds a TCP connection to a small server
that this script starts itself on 127.0.0.1 (nothing leaves the machine).

The game is a walk on a line: the walker starts at 0 and moves -1 or +1 per step; reaching
+5 wins (reward 1), -5 loses (reward -1), and the server answers after a few milliseconds,
like a remote simulator would. Every env is an *async gymnasium env*: ``reset`` and
``step`` are ``async def`` and return gymnasium's tuples; ``mode="coroutine"`` runs them all as
tasks on one event loop. Run with ``python examples/async_env.py [--envs N --seconds S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from typing import Any

import gymnasium
import numpy as np

import aioenv

GOAL = 5


async def serve_one_player(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The server's side of one connection: ``reset`` and ``step <move>`` lines, answered
    with ``<position> <reward> <done>`` after a simulated delay."""
    position = 0
    try:
        while line := await reader.readline():
            command, *argument = line.decode().split()
            await asyncio.sleep(0.002)  # the simulator's work
            if command == "reset":
                position = 0
            else:
                position += 1 if argument[0] == "1" else -1
            reward = 1 if position >= GOAL else -1 if position <= -GOAL else 0
            writer.write(f"{position} {reward} {int(reward != 0)}\n".encode())
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


class RemoteWalk:
    """An async gymnasium env whose state lives on the server."""

    observation_space = gymnasium.spaces.Box(-GOAL, GOAL, shape=(1,), dtype=np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, port: int) -> None:
        self.port = port
        self._connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def _ask(self, request: str) -> tuple[np.ndarray[Any, Any], float, bool]:
        if self._connection is None:
            self._connection = await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = self._connection
        writer.write(f"{request}\n".encode())
        await writer.drain()
        position, reward, done = (await reader.readline()).split()
        return np.array([float(position)], dtype=np.float32), float(reward), done == b"1"

    async def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
        observation, _, _ = await self._ask("reset")
        return observation, {}

    async def step(
        self, action: int
    ) -> tuple[np.ndarray[Any, Any], float, bool, bool, dict[str, Any]]:
        observation, reward, done = await self._ask(f"step {int(action)}")
        return observation, reward, done, False, {}

    async def close(self) -> None:
        if self._connection is not None:
            _, writer = self._connection
            writer.close()
            await writer.wait_closed()


async def main(num_envs: int, seconds: float, seed: int) -> None:
    server = await asyncio.start_server(serve_one_player, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    rng = random.Random(seed)
    steps = wins = losses = 0
    async with (
        server,
        aioenv.make_pool(
            lambda: RemoteWalk(port), num_envs, mode="coroutine", autoreset="next_step"
        ) as pool,
    ):
        pool.reset()
        started = time.perf_counter()
        deadline = started + seconds
        async for step, worker_id in pool:
            steps += 1
            if step.done:
                wins += step.reward > 0
                losses += step.reward < 0
            if time.perf_counter() < deadline:
                pool.send_action(rng.randrange(2), worker_id)
        elapsed = time.perf_counter() - started
    print(f"{num_envs} coroutine envs on one loop, server on 127.0.0.1:{port}")
    print(f"episodes finished: {wins + losses} ({wins} won, {losses} lost)")
    print(f"{steps} steps in {elapsed:.2f} s: {steps / elapsed:,.0f} steps/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64, help="coroutine envs (default 64)")
    parser.add_argument("--seconds", type=float, default=2.0, help="how long to play (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="the random policy's seed")
    arguments = parser.parse_args()
    aioenv.run(main(arguments.envs, arguments.seconds, arguments.seed))

"""The event loop's CPU time per state of many coroutine envs, load-independent enough to
compare two versions of aioenv on a busy machine (a rate is not): N envs whose steps await
``wait`` seconds (``envs.AsyncSleepyEnv``) driven by a ``get_state`` or ``get_batch`` loop
on uvloop, the process's CPU time over a fixed number of states after a warm-up, the
median over repetitions. Compare versions by running the script against each in turn,
interleaved (``PYTHONPATH`` pointing at each version's tree). Run::

    python benchmarks/coroutine_cpu.py [--api state|batch] [--envs 1000] [--wait 0.01]
        [--states 60000] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import uvloop
from envs import AsyncSleepyEnv

import aioenv


async def cpu_per_state(api: str, envs: int, wait: float, states: int) -> float:
    """Seconds of process CPU time per state handed out, over ``states`` states."""
    async with aioenv.make_pool(lambda: AsyncSleepyEnv(wait), envs, seed=0, mode="async") as pool:
        pool.reset()
        for _, worker_id in await pool.get_batch(min_size=envs):
            pool.send_action(0, worker_id)

        async def run(count: int) -> int:
            taken = 0
            while taken < count:
                if api == "state":
                    item = await pool.get_state()
                    assert item is not None
                    ready = [item]
                else:
                    ready = list(await pool.get_batch())
                for step, worker_id in ready:
                    pool.send_action(aioenv.RESET if step.done else 0, worker_id)
                taken += len(ready)
            return taken

        await run(states // 3)  # warm-up: every env steps a few times first
        started = time.process_time()
        taken = await run(states)
        return (time.process_time() - started) / taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", choices=("state", "batch"), default="state")
    parser.add_argument("--envs", type=int, default=1000)
    parser.add_argument("--wait", type=float, default=0.01, help="seconds each step awaits")
    parser.add_argument("--states", type=int, default=60_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    figures = [
        uvloop.run(cpu_per_state(args.api, args.envs, args.wait, args.states))
        for _ in range(args.reps)
    ]
    print(
        f"{args.envs} envs awaiting {args.wait * 1e3:g} ms, {args.api}: "
        f"{statistics.median(figures) * 1e6:.1f} us CPU per state (median of {args.reps}; "
        f"{min(figures) * 1e6:.1f}-{max(figures) * 1e6:.1f})"
    )


if __name__ == "__main__":
    main()

"""What putting a large value in Ray's object store once saves, for ``pool.set_attr``.

A 10 MB value (a dict holding float32 arrays, like policy weights) is set on 8 Ray workers,
once as aioenv sends it (one ``ray.put``, every actor call carries the reference) and once
with the sharing turned off (each actor call carries its own copy of the value, which Ray
serializes and stores once per call). Figures: the median wall time of ``set_attr``.

    python benchmarks/ray_shared_values.py [--reps 7] [--workers 8] [--megabytes 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import numpy as np
from envs import noop

import aioenv
from aioenv.workers.ray import _calls


async def measure(pool: aioenv.WorkerPool[Any], value: Any, reps: int) -> list[float]:
    times: list[float] = []
    for rep in range(reps + 1):
        started = time.perf_counter()
        await pool.set_attr("weights", value)
        if rep:  # the first one warms up
            times.append(time.perf_counter() - started)
    return times


async def main(reps: int, workers: int, megabytes: float) -> None:
    floats = int(megabytes * 1e6 / 4)
    value = {
        "layer1": np.ones(floats // 2, np.float32),
        "layer2": np.ones(floats - floats // 2, np.float32),
    }
    options = {"mode": "ray", "num_cpus": 0.25}
    async with aioenv.make_pool(noop(), workers, **options) as pool:
        pool.reset()
        await pool.get_batch(min_size=workers)
        threshold = _calls.SHARE_THRESHOLD
        results: dict[str, list[float]] = {"put once": [], "a copy per actor": []}
        for _ in range(2):  # interleaved, so drifts of a shared machine spread over both
            _calls.SHARE_THRESHOLD = threshold
            results["put once"] += await measure(pool, value, reps)
            _calls.SHARE_THRESHOLD = 1 << 62
            results["a copy per actor"] += await measure(pool, value, reps)
        _calls.SHARE_THRESHOLD = threshold
    print(f"set_attr of a {megabytes:g} MB value on {workers} Ray workers, {2 * reps} runs each:")
    for label, times in results.items():
        print(
            f"  {label:<17} median {statistics.median(times) * 1e3:7.1f} ms "
            f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f})"
        )
    once, copies = (statistics.median(times) for times in results.values())
    print(
        f"  saving: {copies / once:.1f}x faster; serialized {megabytes:g} MB instead of "
        f"{workers * megabytes:g} MB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--megabytes", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(main(args.reps, args.workers, args.megabytes))

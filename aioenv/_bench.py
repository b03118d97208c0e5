"""What ``aioenv bench`` measures: steps per second of one gymnasium env under each worker
mode, under grouped process workers and :class:`~aioenv.AioVectorEnv`, and under
gymnasium's own vector envs on the same env, so a user sees which mode suits their env.
Each measurement builds its pool (or vector env), resets every env, then counts env steps
for a fixed wall-clock window with random actions drawn ahead of time from a seeded
action space. :func:`bench` runs the command: it measures each row and prints the table
(or the JSON report)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv
from tqdm import tqdm

from .loops import run
from .pool._factory import make_pool
from .vector._env import AioVectorEnv
from .vector._grouping import envs_per_worker
from .vector._grouping import usable_cores as cores

__all__ = ["GROUPED_ROW", "GYMNASIUM_ROWS", "VECTOR_ROW", "bench", "row_label"]

#: The gymnasium rows every bench runs last; the last one is the reference of the ratios.
GYMNASIUM_ROWS = ("gymnasium SyncVectorEnv", "gymnasium AsyncVectorEnv")
#: Process workers stepping several envs each, grouped as ``AioVectorEnv`` groups them.
GROUPED_ROW = "process grouped"
#: ``AioVectorEnv`` with its defaults, stepped in lockstep like gymnasium's vector envs.
VECTOR_ROW = "AioVectorEnv"

_ACTIONS = 64  # actions drawn ahead of time, cycled: the policy costs the same everywhere
_IN_PROCESS = frozenset({"aioenv sync", "aioenv coroutine", "aioenv inline", GYMNASIUM_ROWS[0]})


@dataclasses.dataclass(frozen=True)
class Measurement:
    """``steps`` env transitions counted in ``seconds`` of wall-clock time."""

    label: str
    steps: int
    seconds: float
    #: What the row chose and why (:data:`VECTOR_ROW`: ``AioVectorEnv.mode_choice.reason``).
    choice: str = ""

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0


def grouping(num_envs: int) -> int:
    """How many envs each process worker of the grouped row steps: ``AioVectorEnv``'s
    choice on this machine."""
    return envs_per_worker(num_envs, cores())


def bench(arguments: argparse.Namespace) -> int:
    """``aioenv bench`` as ``arguments`` ask: every row measured (a progress bar on a
    terminal, unless ``--json``), then the table or the JSON report printed; the exit code."""
    rows: list[str] = [*arguments.modes, GROUPED_ROW, VECTOR_ROW, *GYMNASIUM_ROWS]
    results: list[Measurement] = []
    quiet = arguments.json or not sys.stdout.isatty()
    with tqdm(total=len(rows), unit="row", disable=quiet, leave=False) as progress:
        for row in rows:
            progress.set_description(row)
            results.append(measure(row, arguments))
            progress.update()
    if arguments.json:
        print(json.dumps(report(arguments, results), indent=2))
    else:
        print("\n".join(table(arguments, results)))
    return 0


def measure(row: str, arguments: argparse.Namespace) -> Measurement:
    """One row: a worker mode, :data:`GROUPED_ROW`, :data:`VECTOR_ROW` or one of
    :data:`GYMNASIUM_ROWS`, stepping ``arguments.workers`` envs for ``arguments.seconds``
    (with ``aioenv bench``'s ``env_id``, ``envs_per_process`` and ``seed``)."""
    if row in GYMNASIUM_ROWS or row == VECTOR_ROW:
        return _measure_vector(row, arguments)
    return Measurement(row, *run(_drive_pool(row, arguments)))


async def _drive_pool(row: str, arguments: argparse.Namespace) -> tuple[int, float]:
    """The steps a pool of the row's workers took in ``arguments.seconds``, driven with
    ``get_batch``, and the seconds it took them."""
    env_id, seconds, seed = arguments.env_id, arguments.seconds, arguments.seed
    num_envs = arguments.workers
    if row == GROUPED_ROW:
        per_worker = grouping(num_envs)
        options: dict[str, Any] = {"envs_per_worker": per_worker}
        workers, mode = num_envs // per_worker, "process"
    else:
        # Ray's actors reserve no CPU: the row measures the hand-off on this machine, where
        # one CPU each would leave those past the cluster's CPUs waiting forever.
        rows = {"process": {"envs_per_process": arguments.envs_per_process}, "ray": {"num_cpus": 0}}
        options = rows.get(row, {})
        workers, mode = num_envs, row
    async with make_pool(
        env_id, workers, mode=mode, seed=seed, autoreset="next_step", **options
    ) as pool:
        pool.reset()
        await pool.get_batch(min_size=workers)
        envs_per_state = options.get("envs_per_worker", 1)
        actions = _sampled(pool.workers[0].action_space, seed)
        for worker_id in range(workers):
            pool.send_action(actions[worker_id % _ACTIONS], worker_id)
        steps, turn = 0, 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            batch = await pool.get_batch()
            steps += len(batch.states) * envs_per_state
            for worker_id in batch.worker_ids.tolist():
                turn += 1
                pool.send_action(actions[turn % _ACTIONS], worker_id)
        return steps, time.perf_counter() - started


def _measure_vector(label: str, arguments: argparse.Namespace) -> Measurement:
    """A vector env (gymnasium's ``SyncVectorEnv``, ``AsyncVectorEnv`` with shared memory where
    its spaces allow, or ``AioVectorEnv``) stepped in lockstep for ``arguments.seconds``."""
    env_id, seconds, seed = arguments.env_id, arguments.seconds, arguments.seed
    num_envs = arguments.workers
    factories: list[Callable[[], gymnasium.Env[Any, Any]]] = [
        functools.partial(gymnasium.make, env_id)
    ] * num_envs
    vector: gymnasium.vector.VectorEnv[Any, Any, Any]
    choice = ""
    if label == VECTOR_ROW:
        vector = AioVectorEnv(env_id, num_envs)
        choice = vector.mode_choice.reason
    elif label == GYMNASIUM_ROWS[0]:
        vector = SyncVectorEnv(factories)
    else:
        try:
            vector = AsyncVectorEnv(factories, shared_memory=True)
        except (TypeError, ValueError):  # spaces it cannot hold (Sequence, Graph, custom)
            vector = AsyncVectorEnv(factories, shared_memory=False)
    try:
        vector.reset(seed=seed)
        actions = _sampled(vector.action_space, seed)
        steps, turn = 0, 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            vector.step(actions[turn % _ACTIONS])
            turn += 1
            steps += num_envs
        return Measurement(label, steps, time.perf_counter() - started, choice)
    finally:
        vector.close()


def _sampled(space: gymnasium.Space[Any], seed: int) -> list[Any]:
    space.seed(seed)
    return [space.sample() for _ in range(_ACTIONS)]


def recommendation(env_id: str, num_envs: int, results: Sequence[Measurement]) -> str:
    """One line: the fastest aioenv row for this env on this machine, and what to make of
    it when gymnasium's in-process loop is faster still."""

    def rate(result: Measurement) -> str:
        return f"{result.steps_per_s:,.0f} steps/s"

    labelled = [
        dataclasses.replace(result, label=row_label(result.label, num_envs)) for result in results
    ]
    ours = [result for result in labelled if not result.label.startswith("gymnasium")]
    best = max(ours, key=lambda result: result.steps_per_s)
    line = (
        f"for {env_id} with {num_envs} envs on this machine ({cores()} cores): "
        f"use {best.label} ({rate(best)})"
    )
    if best.label in _IN_PROCESS:
        line += ", as the env steps faster than a hand-off to another worker costs"
    fastest = max(labelled, key=lambda result: result.steps_per_s)
    if fastest is not best:
        line += (
            f"; {fastest.label} is faster still ({rate(fastest)}): "
            "keep it unless you need first-ready stepping, deadlines or restarts"
        )
    chosen = next((result.choice for result in results if result.choice), "")
    if chosen:
        line += f"; AioVectorEnv's default chose {chosen}"
    return line


def row_label(row: str, num_envs: int) -> str:
    """The label a row has in the table: aioenv's rows say so, the grouped row says how."""
    if row in GYMNASIUM_ROWS:
        return row
    if row == GROUPED_ROW:
        per_worker = grouping(num_envs)
        return f"aioenv process, {per_worker} env{'s' if per_worker > 1 else ''} per worker"
    return f"aioenv {row}"


def report(arguments: argparse.Namespace, results: list[Measurement]) -> dict[str, Any]:
    """``aioenv bench --json``'s report of ``results``, measured as ``arguments`` asked."""
    return {
        "env": arguments.env_id,
        "workers": arguments.workers,
        "envs_per_process": arguments.envs_per_process,
        "seconds": arguments.seconds,
        "seed": arguments.seed,
        "steps_per_s": {result.label: result.steps_per_s for result in results},
        "steps": {result.label: result.steps for result in results},
        "recommendation": recommendation(arguments.env_id, arguments.workers, results),
        "vector_choice": next((r.choice for r in results if r.label == VECTOR_ROW), ""),
    }


def table(arguments: argparse.Namespace, results: list[Measurement]) -> list[str]:
    """``aioenv bench``'s table of ``results`` (the last row is the reference), and its
    recommendation."""
    reference = results[-1].steps_per_s  # gymnasium's AsyncVectorEnv
    lines = [
        f"aioenv bench {arguments.env_id}: {arguments.workers} envs, "
        f"{arguments.seconds:g} s per row (process mode: {arguments.envs_per_process} "
        "env(s) per process)",
        f"{'row':<34}{'steps/s':>12}{'vs AsyncVectorEnv':>20}",
    ]
    for result in results:
        label = row_label(result.label, arguments.workers)
        ratio = f"{result.steps_per_s / reference:.2f}x" if reference > 0 else "-"
        lines.append(f"{label:<34}{result.steps_per_s:>12,.0f}{ratio:>20}")
    lines.append(recommendation(arguments.env_id, arguments.workers, results))
    return lines

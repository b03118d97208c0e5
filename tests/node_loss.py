"""A Ray node lost while a pool's steps are in flight: the run through the loss and what
the states must show, shared by the simulated cluster's tests (test_ray_cluster) and the
cluster across network namespaces (test_hosts)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import envs

import aioenv

#: Nodes notice a lost peer within about a second (Ray's default takes tens of seconds).
FAST_FAILURE_DETECTION = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 200,
    "health_check_failure_threshold": 3,
}
STEPS_AFTER_LOSS = 12  # steps each surviving worker takes after the node is lost


def node_of(actor_id: str) -> str:
    import ray

    return str(ray._private.state.actors(actor_id=actor_id)["Address"]["NodeID"])


async def run_through_node_loss(
    pool: aioenv.WorkerPool[Any], remove_node: Callable[[], None], lost: set[int], gate: str
) -> tuple[dict[int, list[Any]], dict[int, aioenv.WorkerDied]]:
    """Step every worker; the envs on the node to be lost (workers ``lost``) wait at
    ``gate``, so their steps are in flight when the node goes, while the others step on.
    Then open the gate and go on until every worker still standing took
    ``STEPS_AFTER_LOSS`` steps. Returns the states each worker delivered (in order) and the
    WorkerDied each failed one raised."""
    workers = range(len(pool))
    states: dict[int, list[Any]] = {worker_id: [] for worker_id in workers}
    died: dict[int, aioenv.WorkerDied] = {}
    for worker_id in workers:
        pool.send_action(aioenv.RESET, worker_id)
    for _ in workers:
        state, worker_id = await pool.get_state()
        states[worker_id].append(state)
    remaining = dict.fromkeys(workers, STEPS_AFTER_LOSS)
    in_flight = set(workers)
    for worker_id in workers:
        pool.send_action(1, worker_id)
    removal: asyncio.Future[None] | None = None
    while in_flight:
        if removal is None and all(len(states[i]) > 1 for i in workers if i not in lost):
            # Every other worker has stepped: the lost ones' steps are surely in flight.
            removal = asyncio.ensure_future(asyncio.to_thread(remove_node))
            removal.add_done_callback(lambda _: envs.open_gate(gate))
        try:
            state, worker_id = await pool.get_state()
        except aioenv.WorkerDied as error:
            assert error.worker_id is not None
            died[error.worker_id] = error
            in_flight.discard(error.worker_id)
            continue
        states[worker_id].append(state)
        in_flight.discard(worker_id)
        if remaining[worker_id] > 0:
            remaining[worker_id] -= 1
            pool.send_action(1, worker_id)
            in_flight.add(worker_id)
    assert removal is not None
    await removal
    return states, died


def assert_steps_continue(states: list[Any], start: int = 0) -> None:
    """Nothing lost, nothing repeated: each state is the step after the one before."""
    assert [state["t"] for state in states] == list(range(start, start + len(states)))

"""Ray workers on a multi-node cluster that loses a node mid-run.

The cluster (``ray.cluster_utils.Cluster``: a head and worker nodes, all processes on this
machine) cannot share the session's local Ray instance: a driver talks to one cluster, so
this module stops that instance and starts its own. Each test adds the nodes it needs,
each offering a custom resource that places actors on it, then removes one while steps are
in flight. The scenarios run on one event loop each (the loop integration is covered on
both loops in test_ray).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray_support
from envs import Counter, Gated
from node_loss import (
    FAST_FAILURE_DETECTION,
    STEPS_AFTER_LOSS,
    assert_steps_continue,
    node_of,
    run_through_node_loss,
)
from support import SESSION_HELPERS, direct_children, wait_until

import aioenv
from aioenv.core._seeds import restart_seed

# A scenario takes about 20 s on an idle 2-core machine, most of it Ray starting worker
# processes, and up to 125 s beside three CPU-bound processes (as beside the rest of the suite).
pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

MiB = 1024**2


class LocalCluster:
    """A head node that runs no actor, and worker nodes added by name."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        ray_support.quiet()
        self._helpers = set(SESSION_HELPERS)
        self.cluster = self._started(
            lambda: Cluster(
                initialize_head=True,
                connect=True,
                head_node_args={
                    "num_cpus": 0,
                    "object_store_memory": 80 * MiB,
                    "include_dashboard": False,
                    "_system_config": FAST_FAILURE_DETECTION,
                },
            )
        )
        self.nodes: dict[str, Any] = {}

    def _started(self, start: Callable[[], Any]) -> Any:
        before = direct_children()
        result = start()
        SESSION_HELPERS.update(direct_children() - before)  # the cluster's own processes
        return result

    def add_node(self, name: str, resource: str) -> str:
        """A worker node offering ``resource`` (and ``name``); returns its node id. The
        actors reserve no CPU; the node's two CPUs let its raylet start two actor processes
        at once (Ray starts as many at a time as a node has CPUs), so the replacements for a
        lost node's actors start together."""
        node = self._started(
            lambda: self.cluster.add_node(
                num_cpus=2, resources={resource: 100, name: 100}, object_store_memory=80 * MiB
            )
        )
        self.cluster.wait_for_nodes()
        self.nodes[name] = node
        return str(node.node_id)

    def remove_node(self, name: str) -> None:
        self.cluster.remove_node(self.nodes.pop(name))

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()
        ours = SESSION_HELPERS - self._helpers
        assert wait_until(
            lambda: not (ours & {abs(pid) for pid in ray_support._all_children()}), timeout=20
        ), "the test cluster's processes did not exit"
        SESSION_HELPERS.difference_update(ours)


@pytest.fixture(scope="module")
def cluster(ray_session: None) -> Iterator[LocalCluster]:
    ray_support.stop()  # the shared instance, if a test before started it
    cluster = LocalCluster()
    yield cluster
    cluster.shutdown()


@pytest.fixture
def no_live_actors(cluster: LocalCluster) -> Iterator[None]:
    yield
    assert wait_until(lambda: not ray_support.live_actors()), ray_support.live_actors()


def on_node(name: str, env: Any, count: int) -> list[aioenv.RayWorker[Any]]:
    return [aioenv.RayWorker(env, num_cpus=0, resources={name: 1}) for _ in range(count)]


@pytest.mark.usefixtures("no_live_actors")
def test_losing_a_node_without_restarts_fails_exactly_its_workers(
    cluster: LocalCluster, gate: str
) -> None:
    cluster.add_node("lost_a", "pool_a")
    cluster.add_node("kept_a", "pool_a")

    async def scenario() -> None:
        workers = on_node("lost_a", lambda: Gated(gate), 2) + on_node("kept_a", Counter, 2)
        async with aioenv.get_worker_pool(workers) as pool:
            states, died = await run_through_node_loss(
                pool, lambda: cluster.remove_node("lost_a"), {0, 1}, gate
            )
            assert set(died) == {0, 1}
            for worker_id in (0, 1):
                assert "died" in str(died[worker_id]) and "Ray actor" in str(died[worker_id])
                assert [state["t"] for state in states[worker_id]] == [0]
                with pytest.raises(aioenv.WorkerRemoved) as removed:  # given up on: gone
                    pool.send_action(1, worker_id)
                assert removed.value.__cause__ is died[worker_id]
                assert worker_id not in pool.active_ids and worker_id in pool.removed
            for worker_id in (2, 3):  # the other node's workers lost nothing
                assert_steps_continue(states[worker_id])
                assert len(states[worker_id]) == 2 + STEPS_AFTER_LOSS

    asyncio.run(scenario())


@pytest.mark.usefixtures("no_live_actors")
def test_losing_a_node_with_restarts_recreates_its_actors_on_the_surviving_node(
    cluster: LocalCluster, gate: str
) -> None:
    cluster.add_node("lost_b", "pool_b")
    kept = cluster.add_node("kept_b", "pool_b")
    seeds = aioenv.worker_seeds(11, 4)

    async def scenario() -> None:
        # Placed with a node's own resource, but allowed on any node offering "pool_b":
        # a soft node affinity is what lets a restart land elsewhere.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        def near(
            name: str, env: Any, worker_seeds: list[int | None]
        ) -> list[aioenv.RayWorker[Any]]:
            strategy = NodeAffinitySchedulingStrategy(cluster.nodes[name].node_id, soft=True)
            return [
                aioenv.RayWorker(
                    env,
                    seed=seed,
                    num_cpus=0,
                    resources={"pool_b": 1},
                    actor_options={"scheduling_strategy": strategy},
                )
                for seed in worker_seeds
            ]

        workers = near("lost_b", lambda: Gated(gate), seeds[:2]) + near(
            "kept_b", Counter, seeds[2:]
        )
        async with aioenv.get_worker_pool(workers, restart="on_failure") as pool:
            states, died = await run_through_node_loss(
                pool, lambda: cluster.remove_node("lost_b"), {0, 1}, gate
            )
            assert died == {}
            for worker_id in range(4):
                assert node_of(pool.workers[worker_id].actor_id) == kept  # type: ignore[attr-defined]
                assert len(states[worker_id]) == 2 + STEPS_AFTER_LOSS
            for worker_id in (0, 1):  # reset on a new actor, then on from there
                assert pool.workers[worker_id].restarts == 1
                assert [state["t"] for state in states[worker_id][:2]] == [0, 0]
                assert states[worker_id][1]["seed"] == restart_seed(seeds[worker_id], 1)
                assert_steps_continue(states[worker_id][1:])
            for worker_id in (2, 3):
                assert pool.workers[worker_id].restarts == 0
                assert_steps_continue(states[worker_id])

    asyncio.run(scenario())

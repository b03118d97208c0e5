"""Hosts that come and go, tested as hosts: network namespaces linked to this one
(tests/netns.py), a Ray node and env servers on them, and a host lost mid-run by its link
going down (nothing tells the other side: no close, no reset) and its processes killed.

- A Ray cluster whose head runs in this namespace and a worker node on another host:
  actors placed on the remote node, the node's link cut while their steps are in flight.
  The pool goes on; the lost envs restart on the head, where Ray can place them.
- ``aioenv serve`` on two hosts and a pool of :class:`aioenv.RemoteEnv` over both: one
  host's link cut and its server killed. Its sessions fail by their step deadline, not by
  hanging, and their restarts open sessions on the other host.

Making namespaces needs root: elsewhere these tests skip, saying so. They run alone
(``make test-hosts``), after the rest of the suite, and nothing of them is left behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from envs import Counter, Gated
from netns import Host, hosts, why_no_hosts
from node_loss import (
    FAST_FAILURE_DETECTION,
    STEPS_AFTER_LOSS,
    assert_steps_continue,
    node_of,
    run_through_node_loss,
)
from ray_support import QUIET_ENVIRONMENT
from support import children_of, process_running, wait_until

import aioenv

NO_HOSTS = why_no_hosts()
pytestmark = [
    pytest.mark.hosts,
    pytest.mark.skipif(NO_HOSTS is not None, reason=f"no test hosts: {NO_HOSTS}"),
    pytest.mark.timeout(300),
]

MiB = 1024**2
BIN = Path(sys.executable).parent


def descendants(pid: int) -> set[int]:
    found, stack = set(), [pid]
    while stack:
        for child in children_of(stack.pop()):
            found.add(abs(child))
            if child > 0:
                stack.append(child)
    return found


def stop(process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """SIGTERM ``process`` and wait for it and every process it started to end."""
    started = descendants(process.pid)
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout)
    assert wait_until(lambda: not any(process_running(pid) for pid in started), timeout), (
        f"processes of {process.args[:3]} outlived it"
    )


# A Ray node on another host ------------------------------------------------------------
class RayAcrossHosts:
    """A Ray head in this namespace (the driver's host, at the link's address) and a
    worker node on ``far``. Both offer the resource ``pool``; the head runs what is placed
    nowhere else. Each node has a temp dir of its own; the namespaces keep their ports
    apart."""

    def __init__(self, far: Host, temp: Path) -> None:
        with socket.socket() as probe:  # a port free on this side's end of the link
            probe.bind((far.gateway, 0))
            port = probe.getsockname()[1]
        self.address = f"{far.gateway}:{port}"
        common = ["--block", "--disable-usage-stats", "--num-cpus", "2"]
        common += ["--object-store-memory", str(80 * MiB)]
        head = [
            *("--head", "--port", str(port), "--node-ip-address", far.gateway),
            *("--include-dashboard=false", "--temp-dir", str(temp / "head")),
            *("--resources", json.dumps({"pool": 100, "head": 100})),
            *("--system-config", json.dumps(FAST_FAILURE_DETECTION)),
        ]
        self.log = temp / "ray-start.log"  # what the nodes' `ray start` said
        with self.log.open("wb") as log:
            self.head = subprocess.Popen(
                [str(BIN / "ray"), "start", *common, *head],
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        node = [
            *("--address", self.address, "--node-ip-address", far.address),
            *("--resources", json.dumps({"pool": 100, "far": 100})),
        ]
        with self.log.open("ab") as log:
            self.far = far.start(
                [str(BIN / "ray"), "start", *common, *node], stdout=log, stderr=subprocess.STDOUT
            )

    def connect(self) -> dict[str, str]:
        """Connect this process as the driver; the ids of the head and far nodes."""
        import ray

        if ray.is_initialized():
            ray.shutdown()  # a session's local instance: a driver talks to one cluster
        ip, port = self.address.split(":")
        deadline = time.monotonic() + 120
        while True:  # until the head listens
            assert self.head.poll() is None, f"the Ray head exited: {self.log}"
            assert time.monotonic() < deadline, f"the Ray head did not start: {self.log}"
            try:
                socket.create_connection((ip, int(port)), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        ray.init(address=self.address, _node_ip_address=ip, logging_level="error")
        nodes: dict[str, str] = {}
        while len(nodes) < 2:
            assert time.monotonic() < deadline, f"the far node did not join: {ray.nodes()}"
            for node in ray.nodes():
                if node["Alive"]:
                    role = "far" if "far" in node["Resources"] else "head"
                    nodes[role] = node["NodeID"]
            time.sleep(0.2)
        return nodes

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        stop(self.head)


@pytest.fixture
def ray_across_hosts(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Host, dict[str, str]]]:
    """The far host, and the ids of the Ray nodes ("head", "far")."""
    pytest.importorskip("ray")
    # The same authentication for the nodes and the driver, whatever is in ~/.ray: with
    # RAY_AUTH_MODE unset, `ray start --head` turns tokens on where a token file exists
    # (a local Ray instance started since writes one), and a driver without it is refused.
    for name, value in QUIET_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    # Ray's sockets live in its temp dir, whose path must stay short (a socket's path
    # holds at most 107 bytes): not under pytest's tmp_path.
    temp = Path(tempfile.mkdtemp(prefix="aioenv-ray-"))
    try:
        with hosts(1) as (far,):
            cluster = RayAcrossHosts(far, temp)
            try:
                yield far, cluster.connect()
            finally:
                cluster.shutdown()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_a_ray_node_whose_link_is_cut_loses_only_its_envs_which_restart_on_the_head(
    ray_across_hosts: tuple[Host, dict[str, str]], gate: str
) -> None:
    import ray_support
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    far, nodes = ray_across_hosts

    def near(node: str, env: Any, count: int) -> list[aioenv.RayWorker[Any]]:
        # Placed on a node, softly: a restart may land on any node offering "pool".
        strategy = NodeAffinitySchedulingStrategy(nodes[node], soft=True)
        return [
            aioenv.RayWorker(
                env,
                num_cpus=0,
                resources={"pool": 1},
                actor_options={"scheduling_strategy": strategy},
            )
            for _ in range(count)
        ]

    placed: list[str] = []

    async def scenario() -> None:
        workers = near("far", lambda: Gated(gate), 2) + near("head", Counter, 2)
        async with aioenv.get_worker_pool(workers, restart="on_failure") as pool:

            def lose_the_far_host() -> None:
                # Workers 0 and 1 have reset, and their steps are in flight (at the gate).
                placed.extend(node_of(pool.workers[i].actor_id) for i in (0, 1))  # type: ignore[attr-defined]
                far.cut()  # the head hears nothing more from it: no close, no reset
                far.kill_all()

            states, died = await run_through_node_loss(pool, lose_the_far_host, {0, 1}, gate)
            assert placed == [nodes["far"]] * 2 and died == {}
            for worker_id in range(4):
                assert node_of(pool.workers[worker_id].actor_id) == nodes["head"]  # type: ignore[attr-defined]
                assert len(states[worker_id]) == 2 + STEPS_AFTER_LOSS
            for worker_id in (0, 1):  # reset on a new actor, then on from there
                assert pool.workers[worker_id].restarts == 1
                assert [state["t"] for state in states[worker_id][:2]] == [0, 0]
                assert_steps_continue(states[worker_id][1:])
            for worker_id in (2, 3):  # the head's envs lost nothing
                assert pool.workers[worker_id].restarts == 0
                assert_steps_continue(states[worker_id])
        assert wait_until(lambda: not ray_support.live_actors(), 60), ray_support.live_actors()

    asyncio.run(scenario())


# Env servers on two hosts ----------------------------------------------------------------
def serving_on(host: Host) -> tuple[subprocess.Popen[bytes], str]:
    """``aioenv serve`` of CartPole on ``host``, pinging its clients every second; its URL
    once it answers."""
    url = f"http://{host.address}:8000"
    server = host.start(
        [
            *(sys.executable, "-m", "aioenv", "serve", "CartPole-v1", "--mode", "thread"),
            *("--host", host.address, "--port", "8000", "--keepalive", "1"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        assert server.poll() is None, f"the server on {host.namespace} exited"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                if answer.status == 200:
                    return server, url
        except OSError:
            assert time.monotonic() < deadline, f"the server on {host.namespace} did not start"
            time.sleep(0.2)


STEP_TIMEOUT = 3.0


def test_a_remote_env_pool_over_two_hosts_goes_on_when_one_host_is_cut_off() -> None:
    pytest.importorskip("websockets")
    pytest.importorskip("uvicorn")
    pytest.importorskip("starlette")
    spaces = {
        "observation_space": gymnasium.make("CartPole-v1").observation_space,
        "action_space": gymnasium.spaces.Discrete(2),
    }
    with hosts(2) as (lost, kept):
        servers = [serving_on(host) for host in (lost, kept)]
        urls = [url for _, url in servers]

        def fleet() -> aioenv.RemoteEnv:
            return aioenv.RemoteEnv(urls, connect_timeout=2.0, **spaces)

        async def scenario() -> None:
            async with aioenv.make_pool(
                fleet,
                4,
                mode="coroutine",
                step_timeout=STEP_TIMEOUT,
                reset_timeout=30.0,
                restart="on_failure",
            ) as pool:
                await pool.reset_all(seed=0)
                assert sorted(await pool.get_attr("url")) == sorted(urls * 2)
                on_lost = {i for i, url in enumerate(await pool.get_attr("url")) if url == urls[0]}

                lost.cut()  # first, so that nothing of the kill reaches this side
                lost.kill_all()
                sent = time.monotonic()
                for worker_id in range(4):
                    pool.send_action(1, worker_id)
                answered: dict[int, tuple[Any, float]] = {}
                for _ in range(4):
                    state, worker_id = await pool.get_state()
                    answered[worker_id] = (state, time.monotonic() - sent)
                for worker_id, (state, after) in answered.items():
                    if worker_id in on_lost:  # failed by its deadline, then restarted
                        assert state.truncated and "WorkerTimeout" in state.info["aioenv"]["reason"]
                        assert after >= STEP_TIMEOUT * 0.9
                    else:
                        assert state.reward == 1.0 and "aioenv" not in state.info
                assert pool.restarts == len(on_lost)

                for worker_id in on_lost:
                    pool.send_action(aioenv.RESET, worker_id)
                    await pool.get_state()
                assert await pool.get_attr("url") == [urls[1]] * 4  # all on the host left
                for _ in range(3):  # and on they go
                    for worker_id in range(4):
                        pool.send_action(0, worker_id)
                    for _ in range(4):
                        state, _ = await pool.get_state()
                        assert "aioenv" not in state.info  # no failure, no restart

        try:
            asyncio.run(scenario())
            assert servers[1][0].poll() is None, "the kept host's server went down"
        finally:
            for server, _ in servers:
                if server.poll() is None:
                    stop(server)
        assert not kept.pids() - {os.getpid()}, "the kept host's server left processes"

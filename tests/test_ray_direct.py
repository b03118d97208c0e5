"""A Ray actor's direct connection (aioenv.workers.ray._channel, _actor): steps go
on it, not as actor calls; each slow env of an actor answers as soon as it is done;
control requests, which go as calls, keep their order with the steps; a connection
without the actor's secret gets nothing; an actor that cannot be reached is driven
through actor calls, with a warning."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import envs
import pytest
from envs import Counter, SlowSteps
from ray_support import on_direct_connections
from support import eventually

import aioenv
from aioenv.wire._ray_messages import TOKEN_BYTES
from aioenv.workers.ray import _channel as channel_module
from aioenv.workers.ray._actor import TIMED_REQUESTS, accepted

F = TypeVar("F", bound=Callable[..., Any])

OFF_CPU = {"num_cpus": 0}


def ray_test(function: F) -> F:
    """Needs Ray (skipped where it cannot be imported) and runs on the shared instance."""
    return pytest.mark.ray(pytest.mark.usefixtures("ray_local")(function))  # type: ignore[no-any-return]


@pytest.fixture
def serve_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the actor methods called through Ray from this process, in order."""
    import ray.actor

    called: list[str] = []
    remote = ray.actor.ActorMethod._remote

    def record(method: Any, *args: Any, **kwargs: Any) -> Any:
        called.append(method._method_name)
        return remote(method, *args, **kwargs)

    monkeypatch.setattr(ray.actor.ActorMethod, "_remote", record)
    return called


@ray_test
async def test_steps_go_on_the_direct_connection_not_as_actor_calls(
    serve_calls: list[str],
) -> None:
    async with aioenv.make_pool(Counter, 4, mode="ray", envs_per_actor=2, **OFF_CPU) as pool:
        await pool.reset_all()
        assert await eventually(lambda: on_direct_connections(pool), 60)
        before = serve_calls.count("serve")
        for t in range(1, 21):
            for worker_id in range(4):
                pool.send_action(1, worker_id)
            states = [await pool.get_state() for _ in range(4)]
            assert sorted(state["t"] for state, _ in states) == [t] * 4
        assert serve_calls.count("serve") == before  # no actor call per step
        assert "run_channel" in serve_calls and "open_channel" in serve_calls


@ray_test
async def test_an_actor_out_of_reach_is_driven_by_actor_calls_with_a_warning(
    serve_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refused(address: str, port: int, token: bytes) -> socket.socket:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(channel_module, "connect", refused)
    monkeypatch.setattr(channel_module, "_UNREACHED", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with aioenv.make_pool(Counter, 2, mode="ray", **OFF_CPU) as pool:
            await pool.reset_all()

            def warned() -> list[str]:
                return [str(w.message) for w in caught if "no direct connection" in str(w.message)]

            # Both actors out of reach; one warning for their node.
            assert await eventually(lambda: serve_calls.count("run_channel") == 2, 60)
            assert await eventually(lambda: len(warned()) == 1, 60)
            assert re.search(r"Ray actor \w+ at [\d.]+:\d+ \(ConnectionRefusedError", warned()[0])
            before = serve_calls.count("serve")
            for t in range(1, 6):
                pool.send_action(1, 0)
                state, _ = await pool.get_state()
                assert state["t"] == t
            assert serve_calls.count("serve") == before + 5  # a call per step
            assert not on_direct_connections(pool)


@ray_test
async def test_direct_connection_false_never_asks_the_actor_to_listen(
    serve_calls: list[str],
) -> None:
    async with aioenv.make_pool(Counter, 1, mode="ray", direct_connection=False, **OFF_CPU) as pool:
        await pool.reset_all()
        pool.send_action(1, 0)
        state, _ = await pool.get_state()
        assert state["t"] == 1
    assert "open_channel" not in serve_calls and "run_channel" not in serve_calls


@ray_test
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "calls"])
async def test_an_actor_answers_each_slow_env_as_soon_as_it_is_done(
    gate: str, direct: bool
) -> None:
    """Two slow envs safe in threads in one actor: worker 0's step 6 waits at a gate.
    On the direct connection worker 1 steps on meanwhile, its steps answered one by one;
    as actor calls, a call returns with its last answer, so neither step is answered
    before the gate opens (the negative is certain, not timed: nothing opens the gate
    until the test does)."""
    pause = 0.002  # above the actor's side-by-side threshold (1 ms), whatever the machine
    sources = [
        lambda: SlowSteps(pause, gate, wait_at=6),
        lambda: SlowSteps(pause, gate, wait_at=None),
    ]
    async with aioenv.make_pool(
        sources, mode="ray", envs_per_actor=2, direct_connection=direct, **OFF_CPU
    ) as pool:
        await pool.reset_all()
        if direct:
            assert await eventually(lambda: on_direct_connections(pool), 60)
        for _ in range(TIMED_REQUESTS + 1):  # steps 1-5, timed by the actor as slow
            for worker_id in (0, 1):
                pool.send_action(1, worker_id)
            for _ in range(2):
                await pool.get_state()
        pool.send_action(1, 0)  # step 6: waits at the gate
        pool.send_action(1, 1)
        if direct:
            for t in range(6, 16):
                state, worker_id = await pool.get_state()
                assert (worker_id, state["t"]) == (1, t)
                pool.send_action(1, 1)
        else:
            with pytest.raises(asyncio.TimeoutError):  # the call answers both once the gate opens
                await asyncio.wait_for(pool.get_state(), 2.0)
        envs.open_gate(gate)
        while True:
            state, worker_id = await pool.get_state()
            if worker_id == 0:
                break
        assert state["t"] == 6


@ray_test
async def test_a_control_between_steps_sees_every_step_before_it() -> None:
    """Steps go on the connection, control requests as actor calls: a control waits
    until its actor has answered the steps sent before it, and the steps after it wait
    for its answer, so every read sees exactly the steps sent before it."""
    async with aioenv.make_pool(Counter, 4, mode="ray", envs_per_actor=2, **OFF_CPU) as pool:
        await pool.reset_all()
        assert await eventually(lambda: on_direct_connections(pool), 60)
        for t in range(1, 8):
            for worker_id in range(4):
                pool.send_action(1, worker_id)
            # Sent while the steps are in flight: each worker finishes its step first.
            assert list(await pool.get_attr("t")) == [t] * 4
            assert sorted([(await pool.get_state())[0]["t"] for _ in range(4)]) == [t] * 4


def test_a_connection_without_the_actors_secret_is_closed_unread() -> None:
    token = b"s" * TOKEN_BYTES
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = listener.getsockname()
        result: list[socket.socket | None] = []
        accepting = threading.Thread(
            target=lambda: result.append(accepted(listener, token, time.monotonic() + 30))
        )
        accepting.start()
        with socket.create_connection(address) as stranger:
            stranger.sendall(b"x" * TOKEN_BYTES)
            stranger.settimeout(30)
            assert stranger.recv(1) == b""  # closed without a word
            with socket.create_connection(address) as parent:
                parent.sendall(token)
                accepting.join(30)
        (connection,) = result
        assert connection is not None
        connection.close()


def test_no_connection_by_the_deadline_is_none() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        assert accepted(listener, b"s" * TOKEN_BYTES, time.monotonic() + 0.05) is None

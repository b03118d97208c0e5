"""``aioenv serve`` against OpenEnv's own client, and :class:`aioenv.RemoteEnv` against
OpenEnv's own server and against ``aioenv serve``: sessions, errors as the protocol's
error frames, restarts, the session cap, idle sessions, workers gone with their client."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import envs
import gymnasium
import numpy as np
import pytest
from support import process_running

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("websockets")
pytest.importorskip("openenv")
httpx = pytest.importorskip("httpx")

from openenv.core.env_server.http_server import create_fastapi_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment as OpenEnvEnvironment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402

import aioenv  # noqa: E402
from aioenv.serve import ServeOptions, build_app  # noqa: E402
from aioenv.wire._openenv_json import space_from_schema, space_schema  # noqa: E402

HANG = 20.0  # a hanging step outlives every deadline below, and ends with its worker
# A factory of the test envs' module, which travels to worker processes by value (a
# function of this module would have them import this module, and OpenEnv with it).
breakable = functools.partial(envs.Tattling, hang=HANG)
# A short step deadline; starting a process on a busy machine may take longer.
DEADLINES = {"step_timeout": 1.0, "reset_timeout": 30.0, "start_timeout": 30.0}


@contextlib.asynccontextmanager
async def serving(app: Any, keepalive: float | None = None) -> AsyncIterator[str]:
    """``app`` served by uvicorn on this loop at a free port, pinging its WebSocket
    clients every ``keepalive`` seconds (uvicorn's default when None); its base URL."""
    pings = (
        {} if keepalive is None else {"ws_ping_interval": keepalive, "ws_ping_timeout": keepalive}
    )
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", **pings
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert not task.done(), "the server stopped while starting"
            assert time.monotonic() < deadline, "the server did not start"
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


def aioenv_app(**options: Any) -> Any:
    return build_app(breakable, ServeOptions(**{"mode": "process", **options}))


async def gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while process_running(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def client(url: str) -> GenericEnvClient:
    return GenericEnvClient(base_url=url, message_timeout_s=30.0)


# aioenv serve, driven by OpenEnv's GenericEnvClient --------------------------------------
async def test_generic_client_resets_steps_and_reads_the_state() -> None:
    async with serving(aioenv_app()) as url, client(url) as env:
        first = await env.reset(seed=3, options={"level": 2})
        # [t, generation]: the generation counts the envs built before this one where its
        # class came from (a class pickled by value brings the parent's count along).
        t, generation = first.observation["observation"]
        assert t == 0.0
        assert first.observation["info"]["options"] == {"level": 2}
        assert first.observation["terminated"] is False and first.done is False
        pid = first.observation["info"]["pid"]
        assert pid != os.getpid()  # a process worker
        step = await env.step({"action": 0})
        assert step.observation == {
            "observation": [1.0, generation],
            "info": {"t": 1},
            "terminated": False,
            "truncated": False,
        }
        assert step.reward == 1.0 and step.done is False
        state = await env.state()
        assert state["step_count"] == 1 and isinstance(state["episode_id"], str)


@pytest.mark.parametrize(
    ("action", "options", "cause"),
    [(1, {}, "lost its state"), (2, {}, "WorkerDied"), (3, DEADLINES, "Timeout")],
    ids=["raises", "dies", "hangs"],
)
async def test_a_failed_env_is_an_error_frame_and_the_next_reset_goes_on(
    action: int, options: dict[str, Any], cause: str
) -> None:
    async with serving(aioenv_app(**options)) as url, client(url) as env:
        pid = (await env.reset()).observation["info"]["pid"]
        with pytest.raises(RuntimeError, match="EXECUTION_ERROR") as failed:
            await env.step({"action": action})
        assert cause in str(failed.value) and "reset to go on" in str(failed.value)
        with pytest.raises(RuntimeError, match="reset first"):
            await env.step({"action": 0})
        again = await env.reset()
        assert again.observation["observation"][0] == 0.0
        if action != 1:  # a dead or hung env's process is replaced
            assert again.observation["info"]["pid"] != pid
            assert await gone(pid)
        assert (await env.step({"action": 0})).observation["observation"][0] == 1.0


async def test_sessions_over_the_cap_are_refused_with_capacity_reached() -> None:
    async with serving(aioenv_app(max_sessions=1)) as url:
        async with client(url) as first:
            await first.reset()
            async with client(url) as second:
                with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
                    await second.reset()
        async with client(url) as third:  # the first one's place is free again
            assert (await third.reset()).observation["observation"][0] == 0.0


async def test_a_bad_message_is_answered_with_its_error_frame_and_the_session_goes_on() -> None:
    from websockets.asyncio.client import connect

    async with (
        serving(aioenv_app()) as url,
        connect(url.replace("http", "ws") + "/ws") as socket,
    ):
        for raw, code in [
            ("not json", "INVALID_JSON"),
            ("[1, 2]", "VALIDATION_ERROR"),  # JSON, but not an object
            ('{"type": "jump"}', "UNKNOWN_TYPE"),
            ('{"type": "step", "data": []}', "VALIDATION_ERROR"),
        ]:
            await socket.send(raw)
            frame = json.loads(await asyncio.wait_for(socket.recv(), 30))
            assert frame["type"] == "error" and frame["data"]["code"] == code, (raw, frame)
        await socket.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        frame = json.loads(await asyncio.wait_for(socket.recv(), 60))
        assert frame["type"] == "observation", frame


async def test_an_idle_session_is_closed_with_its_worker() -> None:
    async with serving(aioenv_app(idle_timeout=0.5)) as url, client(url) as env:
        pid = (await env.reset()).observation["info"]["pid"]
        assert await gone(pid)
        # The client reads the frame saying so, or, if it saw the socket closed first,
        # reconnects: a new session, whose env has no episode going on.
        with pytest.raises(RuntimeError, match="session idle for 0.5 s|in a new session"):
            await env.step({"action": 0})


async def test_a_client_that_leaves_takes_its_worker_and_what_its_env_started_with_it() -> None:
    factory = functools.partial(envs.Spawning, hang=HANG)
    async with serving(build_app(factory, ServeOptions(mode="process"))) as url:
        env = client(url)
        info = (await env.reset()).observation["info"]
        assert process_running(info["pid"]) and process_running(info["helper"])
        await env.close()
        assert await gone(info["pid"])
        assert await gone(info["helper"])


async def test_stopping_the_server_stops_every_worker() -> None:
    async with serving(aioenv_app()) as url:
        envs_ = [client(url) for _ in range(2)]
        pids = [(await env.reset()).observation["info"]["pid"] for env in envs_]
    for pid in pids:
        assert await gone(pid)
    for env in envs_:
        with contextlib.suppress(Exception):
            await env.close()


async def test_http_endpoints_serve_a_fresh_env_per_request() -> None:
    async with (
        serving(aioenv_app(mode="thread")) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        reset = (await http.post("/reset", json={"seed": 1})).json()
        assert reset["observation"]["observation"][0] == 0.0 and reset["done"] is False
        step = (await http.post("/step", json={"action": {"action": 0}})).json()
        assert step["observation"]["observation"][0] == 1.0 and step["reward"] == 1.0
        assert (await http.get("/state")).json() == {"episode_id": None, "step_count": 0}
        assert (await http.get("/health")).json() == {"status": "healthy"}
        bad = await http.post("/step", json={"action": 0})
        assert bad.status_code == 422
        failed = await http.post("/step", json={"action": {"action": 1}})
        assert failed.status_code == 500 and "lost its state" in failed.json()["detail"]
        schema = (await http.get("/schema")).json()
        action = space_from_schema(schema["action"]["properties"]["action"])
        assert action == gymnasium.spaces.Discrete(4)


async def test_http_requests_count_toward_the_session_cap() -> None:
    async with (
        serving(aioenv_app(mode="thread", max_sessions=1)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
        client(url) as env,
    ):
        await env.reset()
        refused = await http.post("/reset", json={})
        assert refused.status_code == 503 and refused.json()["code"] == "CAPACITY_REACHED"
        await env.close()
        assert (await http.post("/reset", json={})).status_code == 200


# RemoteEnv ---------------------------------------------------------------------------------
class Move(Action):
    step_by: int


class Position(Observation):
    position: int = 0


class Walk(OpenEnvEnvironment[Move, Position, State]):
    """An OpenEnv env: its position moves by each action's ``step_by``; done at 3."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self.position = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **_: Any) -> Position:
        self._state = State(episode_id=episode_id, step_count=0)
        self.position = 0 if seed is None else seed
        return Position(position=self.position, done=False, reward=0.0)

    def step(self, action: Move, **_: Any) -> Position:  # type: ignore[override]
        if action.step_by < 0:
            raise ValueError("cannot walk backwards")
        self._state.step_count += 1
        self.position += action.step_by
        return Position(position=self.position, done=self.position >= 3, reward=1.0)

    @property
    def state(self) -> State:
        return self._state


async def test_remote_envs_drive_openenvs_own_server() -> None:
    app = create_fastapi_app(Walk, Move, Position, max_concurrent_envs=4)
    async with serving(app) as url:

        def remote() -> aioenv.RemoteEnv:
            return aioenv.RemoteEnv(
                url,
                observation_space=gymnasium.spaces.Dict(),
                action_space=gymnasium.spaces.Dict(),
                wrap_action=False,
            )

        async with aioenv.make_pool(remote, 2, mode="coroutine") as pool:
            batch = await pool.reset_all(seed=1)
            assert [state.observation["position"] for state in batch.states] == [1, 2]
            for worker_id in (0, 1):
                pool.send_action({"step_by": 1}, worker_id)
            ended = {wid: state for state, wid in [await pool.get_state() for _ in range(2)]}
            assert ended[0].observation["position"] == 2 and not ended[0].terminated
            assert ended[1].observation["position"] == 3 and ended[1].terminated
            assert ended[0].reward == 1.0
            pool.send_action({"step_by": -1}, 0)
            with pytest.raises(aioenv.EnvError, match="cannot walk backwards") as failed:
                await pool.get_state()
            assert isinstance(failed.value.__cause__, ConnectionError)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(*arguments: str, temp: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """``aioenv serve ARGUMENTS`` as its own process (the command line), once it listens;
    the test envs' module is importable there. ``temp``: its temporary files' folder."""
    port = free_port()
    tests = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])
    server = subprocess.Popen(
        [sys.executable, "-m", "aioenv", "serve", *arguments, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": path, **({"TMPDIR": temp} if temp else {})},
    )
    deadline = time.monotonic() + 30
    while True:
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            _, stderr = server.communicate()
            pytest.fail(f"aioenv serve did not start: {stderr.decode()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return server, f"http://127.0.0.1:{port}"
        time.sleep(0.05)


def stop_server(server: subprocess.Popen[bytes], how: signal.Signals) -> int:
    server.send_signal(how)
    try:
        return server.wait(30)
    finally:
        server.kill()
        server.communicate()


@pytest.fixture
def served_cartpole() -> Iterator[str]:
    server, url = start_server("CartPole-v1")
    try:
        yield url
    finally:
        # uvicorn stops gracefully; then the exit status says SIGTERM ended it.
        assert stop_server(server, signal.SIGTERM) == 128 + signal.SIGTERM


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
async def test_a_stopped_or_killed_server_leaves_no_worker_and_no_helper(
    how: signal.Signals, tmp_path: Path
) -> None:
    server, url = start_server("--factory", "envs:Spawning", temp=str(tmp_path))
    try:
        env = client(url)
        info = (await env.reset()).observation["info"]
        assert process_running(info["pid"]) and process_running(info["helper"])
        assert os.listdir(tmp_path)  # multiprocessing's folder, for its forkserver's socket
    finally:
        status = stop_server(server, how)
    with contextlib.suppress(Exception):
        await env.close()
    assert await gone(info["pid"])
    assert await gone(info["helper"])
    if how != signal.SIGKILL:  # a process killed outright removes nothing
        # SIGTERM: the status of aioenv's exit; SIGINT: KeyboardInterrupt's, raised again by
        # uvicorn once it stopped (-SIGINT), or by none where it came while uvicorn
        # started and its run took it (0).
        expected = {signal.SIGTERM: (128 + signal.SIGTERM,), signal.SIGINT: (0, -signal.SIGINT)}
        assert status in expected[how]
        assert os.listdir(tmp_path) == []


async def test_a_pool_of_remote_envs_drives_aioenv_serve(served_cartpole: str) -> None:
    url = served_cartpole
    remote = aioenv.RemoteEnv(url)  # reads the spaces from /schema
    assert remote.action_space == gymnasium.spaces.Discrete(2)
    assert remote.observation_space == gymnasium.make("CartPole-v1").observation_space
    factory = functools.partial(aioenv.RemoteEnv, url, observation_space=remote.observation_space)
    async with aioenv.make_pool(
        functools.partial(factory, action_space=remote.action_space), 3, mode="coroutine"
    ) as pool:
        batch = await pool.reset_all(seed=0)
        expected, _ = gymnasium.make("CartPole-v1").reset(seed=0)
        first = batch.states[0].observation
        assert first.dtype == np.float32 and np.array_equal(first, expected)
        resetting: set[int] = set()
        for _, worker_id in batch:
            pool.send_action(1, worker_id)
        for _ in range(30):
            state, worker_id = await pool.get_state()
            assert state.observation.shape == (4,)
            assert state.reward == (0.0 if worker_id in resetting else 1.0)
            resetting.discard(worker_id)
            if state.done:
                resetting.add(worker_id)
            pool.send_action(aioenv.RESET if state.done else 1, worker_id)
        await pool.drain()


async def test_a_remote_env_that_fails_reconnects_as_its_restart() -> None:
    app = aioenv_app(mode="thread", **DEADLINES)
    server = app.state.aioenv_server
    async with serving(app) as url:
        spaces = {
            "observation_space": gymnasium.spaces.Box(0, 10**6, (2,), np.float64),
            "action_space": gymnasium.spaces.Discrete(4),
        }
        remote = functools.partial(aioenv.RemoteEnv, url, **spaces)
        async with aioenv.make_pool(remote, 1, mode="coroutine", restart="on_failure") as pool:
            (first,) = (await pool.reset_all()).states
            assert first.observation[0] == 0.0
            (session,) = server.sessions
            pool.send_action(1, 0)  # the served env raises: an error frame, a failed env
            cut, _ = await pool.get_state()
            assert cut.truncated and "lost its state" in cut.info["aioenv"]["reason"]
            pool.send_action(aioenv.RESET, 0)
            again, _ = await pool.get_state()
            assert again.observation[0] == 0.0
            (new_session,) = server.sessions
            assert new_session is not session  # the restart opened a session of its own
            pool.send_action(0, 0)
            stepped, _ = await pool.get_state()
            assert stepped.observation[0] == 1.0 and stepped.reward == 1.0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve"], "give either ENV_ID or --factory"),
        (["serve", "CartPole-v1", "--factory", "math:sqrt"], "give either ENV_ID or --factory"),
        (["serve", "--factory", "no_such_module_here:make"], "cannot find the factory"),
        (["serve", "--factory", "math"], "takes MODULE:FUNCTION"),
        (["serve", "--factory", "math:pi"], "not a callable"),
        (["serve", "NoSuchEnv-v0"], "unknown env id"),
        (["serve", "CartPole-v1", "--mode", "fast"], "unknown mode"),
        (["serve", "CartPole-v1", "--port", "70000"], "port number"),
        (["serve", "CartPole-v1", "--keepalive", "0"], "seconds > 0"),
    ],
)
def test_serve_refuses_bad_arguments_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from aioenv._cli import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert says in error and error.count("\n") == 1


def test_serve_gives_uvicorn_its_keepalive_and_its_pools_the_cleanup_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aioenv._cli import main

    served: list[Any] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, *_: served.append(server.config))
    main(["serve", "CartPole-v1", "--keepalive", "3", "--cleanup-time", "7"])
    (config,) = served
    assert (config.ws_ping_interval, config.ws_ping_timeout) == (3.0, 3.0)
    pool = config.app.state.aioenv_server.new_pool()
    try:
        assert pool.cleanup_time == 7.0 and pool.workers[0].cleanup_time == 7.0
    finally:
        pool.workers[0].abandon()


async def test_a_client_that_leaves_mid_step_takes_its_hung_worker_with_it() -> None:
    # No step deadline: only the leaving ends the step. The env, busy, cannot close: its
    # worker is ended at once, not after the cleanup time (longer than the wait below).
    async with serving(aioenv_app(cleanup_time=HANG * 3)) as url:
        env = client(url)
        pid = (await env.reset()).observation["info"]["pid"]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(env.step({"action": 3}), 1.0)  # hangs for HANG s
        await env.close()
        assert await gone(pid, timeout=HANG / 2)


async def test_an_env_without_spaces_is_served_its_states_as_observations() -> None:
    app = build_app(envs.Counter, ServeOptions(mode="thread"))
    async with serving(app) as url, client(url) as env:
        first = await env.reset(seed=5)
        assert first.observation["observation"]["seed"] == 5
        step = await env.step({"action": [1, 2]})  # a list arrives as an array
        assert step.observation["observation"]["total"] == 3 and step.done is False


@pytest.mark.parametrize(
    ("factory", "action"),
    [
        (envs.Steered, (2, np.array([0.5, -0.25], np.float32))),
        (envs.DictSteered, {"gear": 2, "vector": np.array([0.5, -0.25], np.float32)}),
    ],
    ids=["tuple", "dict"],
)
async def test_tuple_and_dict_values_arrive_as_values_of_their_spaces(
    factory: Any, action: Any
) -> None:
    # The env raises for an action outside its space: a Tuple's parts must arrive as a
    # tuple, a Box inside one as an array of its dtype.
    async with serving(build_app(factory, ServeOptions(mode="thread"))) as url:
        remote = await asyncio.to_thread(aioenv.RemoteEnv, url)  # reads /schema
        try:
            await remote.reset(seed=0)
            observation, *_ = await remote.step(action)
            np.testing.assert_array_equal(observation, [2.0, 0.5, -0.25])
        finally:
            await remote.close()
    async with serving(build_app(envs.DictObservation, ServeOptions(mode="thread"))) as url:
        remote = await asyncio.to_thread(aioenv.RemoteEnv, url)
        try:
            await remote.reset(seed=0)
            observation, *_ = await remote.step(1)
            position = observation["position"]  # was a list
            assert isinstance(position, np.ndarray) and position.dtype == np.float32
            assert remote.observation_space.contains(observation), observation
        finally:
            await remote.close()


@pytest.mark.parametrize(
    "space",
    [
        gymnasium.spaces.Box(-np.inf, np.inf, (2, 3), np.float32),
        gymnasium.spaces.Box(0, 255, (2,), np.uint8),
        gymnasium.spaces.Box(0, np.inf, (2,), np.int64),  # high: int64's largest
        gymnasium.spaces.Box(-(2**62) - 1, 2**62 + 1, (1,), np.int64),
        gymnasium.spaces.Box(0, 2**64 - 1, (2,), np.uint64),
        gymnasium.spaces.Discrete(5, start=-2),
        gymnasium.spaces.MultiDiscrete([3, 4], np.int32, start=[1, -1]),
        gymnasium.spaces.MultiBinary([2, 3]),
        gymnasium.spaces.Tuple((gymnasium.spaces.Discrete(2), gymnasium.spaces.MultiBinary(2))),
    ],
    ids=str,
)
def test_spaces_arrive_through_the_schema_as_they_are(space: gymnasium.Space[Any]) -> None:
    # What RemoteEnv reads from aioenv serve's /schema: the JSON of space_schema.
    back = space_from_schema(json.loads(json.dumps(space_schema(space))))
    assert back == space
    for bound in ("low", "high"):  # exactly: == on a Box compares its bounds with allclose
        if isinstance(space, gymnasium.spaces.Box):
            np.testing.assert_array_equal(getattr(back, bound), getattr(space, bound))


CARTPOLE_SPACES = {
    "observation_space": gymnasium.make("CartPole-v1").observation_space,
    "action_space": gymnasium.spaces.Discrete(2),
}


def test_given_spaces_win_over_the_schemas_even_empty_ones() -> None:
    # An empty Dict, as OpenEnv's own servers' envs are given, is falsy; no schema here.
    remote = aioenv.RemoteEnv("http://127.0.0.1:9", observation_space=gymnasium.spaces.Dict())
    assert remote.observation_space == gymnasium.spaces.Dict()
    remote = aioenv.RemoteEnv("http://127.0.0.1:9", action_space=gymnasium.spaces.Tuple(()))
    assert remote.action_space == gymnasium.spaces.Tuple(())


def test_a_restart_on_the_servers_side_is_noted_apart_from_this_sides() -> None:
    remote = aioenv.RemoteEnv("http://127.0.0.1:9", **CARTPOLE_SPACES)  # never connects
    note = {"restarted": True, "reason": "WorkerTimeout: ..."}
    envelope = {"observation": [0, 0, 0, 0], "info": {"aioenv": note, "mine": 1}}
    data = {"observation": {**envelope, "terminated": False, "truncated": False}}
    observation, reward, terminated, truncated, info = remote._result(data)
    assert info == {"aioenv_server": note, "mine": 1}
    assert observation.dtype == np.float32 and reward == 0.0
    assert not terminated and not truncated


async def test_a_numpy_seed_reaches_the_served_env() -> None:
    async with serving(build_app("CartPole-v1", ServeOptions(mode="thread"))) as url:
        remote = aioenv.RemoteEnv(url, **CARTPOLE_SPACES)
        try:
            observation, _ = await remote.reset(seed=np.int64(7))  # as a numpy draw gives it
        finally:
            await remote.close()
    expected, _ = gymnasium.make("CartPole-v1").reset(seed=7)
    np.testing.assert_array_equal(observation, expected)


async def test_a_lost_connection_is_a_failure_of_the_remote_env() -> None:
    remote = functools.partial(aioenv.RemoteEnv, **CARTPOLE_SPACES)
    async with serving(build_app("CartPole-v1", ServeOptions(mode="thread"))) as url:
        pool = aioenv.make_pool(functools.partial(remote, url), 1, mode="coroutine")
        await pool.reset_all()
    try:  # the server is gone, with the session
        pool.send_action(0, 0)
        with pytest.raises(aioenv.EnvError) as failed:
            await pool.get_state()
        assert isinstance(failed.value.__cause__, ConnectionError)
    finally:
        await pool.aclose()


@pytest.fixture(autouse=True)
def no_news_of_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's remote envs start knowing nothing of any server (a port the system
    gives one test may have been another's, whose failures this process remembers)."""
    monkeypatch.setattr(aioenv._remote, "SERVERS", aioenv._remote._Servers())


def sessions(app: Any) -> int:
    return len(app.state.aioenv_server.sessions)


async def test_a_fleet_fails_over_to_the_server_left_and_is_given_up_with_none_left() -> None:
    apps = [build_app("CartPole-v1", ServeOptions(mode="thread")) for _ in range(2)]
    stacks = [contextlib.AsyncExitStack() for _ in apps]
    async with stacks[0], stacks[1]:
        urls = [
            await stack.enter_async_context(serving(app))
            for stack, app in zip(stacks, apps, strict=True)
        ]
        fleet = functools.partial(aioenv.RemoteEnv, urls, **CARTPOLE_SPACES)
        options = {"mode": "coroutine", "restart": "on_failure", "max_restarts": 2}
        async with aioenv.make_pool(fleet, 2, **options) as pool:
            await pool.reset_all(seed=0)
            assert [sessions(app) for app in apps] == [1, 1]  # one session at each server
            await stacks[0].aclose()  # the first server goes away, with its session

            for worker_id in (0, 1):
                pool.send_action(1, worker_id)
            answers = [await pool.get_state(), await pool.get_state()]
            cut = [(state, worker_id) for state, worker_id in answers if state.truncated]
            assert len(cut) == 1, "the step whose server went away is cut short, alone"
            ((state, moved),) = cut
            assert "was lost" in state.info["aioenv"]["reason"]
            assert pool.restarts == 1  # the failover is a restart
            pool.send_action(aioenv.RESET, moved)
            again, _ = await pool.get_state()
            assert again.observation.shape == (4,) and not again.truncated
            assert sessions(apps[1]) == 2  # the new env's session, at the server left

            await stacks[1].aclose()  # no server left: every restart fails, until given up
            for _ in range(30):
                if not pool.active_ids:
                    break
                worker_id = pool.active_ids[0]
                pool.send_action(aioenv.RESET, worker_id)
                with contextlib.suppress(aioenv.WorkerError):
                    await pool.get_state()
            assert sorted(pool.removed) == [0, 1]
            for error in pool.removed.values():
                assert all(url.replace("http", "ws") in str(error) for url in urls)


async def test_a_server_that_failed_is_tried_again_only_after_the_others() -> None:
    knocks = 0

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal knocks
        knocks += 1
        writer.close()

    dead = await asyncio.start_server(refuse, "127.0.0.1", 0)
    dead_url = f"http://127.0.0.1:{dead.sockets[0].getsockname()[1]}"
    try:
        async with serving(build_app("CartPole-v1", ServeOptions(mode="thread"))) as live_url:
            fleet = functools.partial(aioenv.RemoteEnv, [dead_url, live_url], **CARTPOLE_SPACES)
            first, second = fleet(), fleet()
            await first.reset(seed=0)  # tries the dead server first, as it is listed
            assert knocks == 1 and first.url == live_url
            await second.reset(seed=1)  # the dead one is passed over, beside a busier one
            assert knocks == 1 and second.url == live_url
            await first.close()
            await second.close()
        with pytest.raises(ConnectionError) as refused:  # none left: each is tried once
            await fleet().reset()
        assert knocks == 2
        said = str(refused.value)
        assert said.index(live_url[len("http") :]) < said.index(dead_url[len("http") :])
    finally:
        dead.close()
        await dead.wait_closed()


def test_a_fleet_needs_urls_it_can_reach() -> None:
    with pytest.raises(ValueError, match="at least one server URL"):
        aioenv.RemoteEnv([], **CARTPOLE_SPACES)
    with pytest.raises(ValueError, match="'ftp://host'"):
        aioenv.RemoteEnv(["http://host:1", "ftp://host"], **CARTPOLE_SPACES)


class Link:
    """A TCP relay to ``upstream`` whose link can be cut: once cut, what either end sends
    goes nowhere, and neither end hears that it is gone (no FIN, no reset), as when a
    client's machine drops off the network."""

    def __init__(self, upstream: str) -> None:
        self.host, port = upstream.removeprefix("http://").split(":")
        self.port = int(port)
        self.cut = False
        self.writers: list[asyncio.StreamWriter] = []
        self.pumps: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        self.relay = await asyncio.start_server(self._join, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.relay.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc_info: object) -> None:
        self.relay.close()
        for pump in self.pumps:
            pump.cancel()
        for writer in self.writers:
            writer.close()
        await asyncio.gather(*self.pumps, return_exceptions=True)

    async def _join(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self.writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.ensure_future(self._pump(source, sink))
            self.pumps.add(pump)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            if not self.cut:
                sink.write(data)


async def test_a_client_whose_link_is_cut_is_dropped_by_the_keepalive() -> None:
    app = aioenv_app(idle_timeout=600)  # not the idle deadline: the keepalive drops it
    async with serving(app, keepalive=0.5) as url:
        link = Link(url)
        async with link as relayed:
            env = client(relayed)
            pid = (await env.reset()).observation["info"]["pid"]
            assert sessions(app) == 1
            link.cut = True
            # uvicorn's default pings (every 20 s, 20 s for the pong) would take up to 40 s.
            assert await gone(pid, timeout=15)
            assert sessions(app) == 0


def test_importing_aioenv_imports_nothing_of_the_serve_extra() -> None:
    code = "import sys, aioenv; print(sorted({'starlette', 'uvicorn', 'websockets'} & set(sys.modules)))"
    imported = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert imported.stdout.strip() == "[]"


def test_the_public_serve_module_names_its_own_names() -> None:
    import aioenv.serve

    for name in aioenv.serve.__all__:
        assert getattr(aioenv.serve, name).__module__ == "aioenv.serve", name
    app = aioenv.serve.build_app("CartPole-v1", aioenv.serve.ServeOptions(max_sessions=1))
    assert {route.path for route in app.routes} >= {"/ws", "/reset", "/step", "/state"}

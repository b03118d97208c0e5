"""Envs served over OpenEnv's protocol, seen from the client's end.

:class:`RemoteEnv` is a coroutine env (an async gymnasium env) that plays one session of a
server speaking OpenEnv's WebSocket protocol (``/ws``: ``reset``, ``step``, ``state``,
``close``), ``aioenv serve``'s or OpenEnv's own, or of one of a fleet of such servers. A
pool of them drives many servers with aioenv's deadlines, restarts and first-ready
batches: a lost connection or an error frame is a failure of that env, and the restart
that follows connects a new session. The JSON both ends exchange is
:mod:`aioenv.wire._openenv_json`'s.

``websockets`` (the ``serve`` extra) is imported when a session connects, never when
``aioenv`` is.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import gymnasium

from .core._restarts import RESTART_KEY
from .wire._openenv_json import jsonable, space_from_schema, value_from_json

__all__ = ["RemoteEnv"]

#: Where a remote env's info carries the note of a restart on the server's side.
SERVER_RESTART_KEY = "aioenv_server"


class _Servers:
    """What this process knows of the env servers its :class:`RemoteEnv` sessions reach,
    by base URL: how many sessions are open (or opening) at each, and when each last
    failed (a session refused or lost).

    A fleet's env opens its session at the server with the fewest sessions among those
    that have not failed, and tries one that failed within :data:`PASS_OVER` seconds only
    after the others, the one that failed longest ago first: a server that went away costs
    new sessions nothing while another is up, and one brought back takes sessions again
    once its failure is that old (a session opened there forgets it at once). It is the
    process's, not one env's, because a restart builds a new env from its factory and a
    server's failure is news to all of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # coroutine envs may live on several threads' loops
        self._sessions: collections.Counter[str] = collections.Counter()
        self._failed: dict[str, float] = {}

    def order(self, urls: tuple[str, ...]) -> list[str]:
        """``urls`` in the order a new session tries them."""
        with self._lock:
            recent = time.monotonic() - PASS_OVER
            failed = {url: at for url, at in self._failed.items() if at > recent}

            def rank(url: str) -> tuple[bool, float, int]:
                return url in failed, failed.get(url, 0.0), self._sessions[url]

            return sorted(urls, key=rank)  # stable: ties keep the given order

    def claim(self, url: str) -> None:
        with self._lock:
            self._sessions[url] += 1

    def opened(self, url: str) -> None:
        with self._lock:
            self._failed.pop(url, None)

    def release(self, url: str, *, failed: bool) -> None:
        with self._lock:
            # Counter's -= keeps the positive counts only: a server left with no session
            # is dropped.
            self._sessions -= collections.Counter([url])
            if failed:
                self._failed[url] = time.monotonic()


#: Seconds a server that refused or lost a session is tried only after the others.
PASS_OVER = 30.0
#: The servers this process's remote envs reach.
SERVERS = _Servers()


class RemoteEnv:
    """An env served over OpenEnv's WebSocket protocol, as a coroutine env: one session
    of a server at ``base_url`` (``http://``, ``https://``, ``ws://`` or ``wss://``; the
    session is at ``/ws`` under it), or of one of a fleet's servers (a list of such URLs).
    Run it with ``mode="coroutine"``::

        pool = aioenv.make_pool(lambda: aioenv.RemoteEnv("http://host:8000"), 64,
                                mode="coroutine", step_timeout=30, restart="on_failure")

    ``reset(seed, options)`` sends ``{"seed": seed, "options": options}`` (the keys that
    are set); ``step(action)`` sends ``action`` as the step's data: with ``wrap_action``
    (the default, what ``aioenv serve`` expects) as ``{"action": action}``, else as it is
    (a dict, for OpenEnv's own envs). Observations are what the server sends: for
    ``aioenv serve``, the env's own observation, info, terminated and truncated; for
    other servers, the observation dict, the reward, ``terminated`` = ``done`` and the
    server's metadata as info (a restart on the server's side, which ``aioenv serve`` notes
    under the info key ``"aioenv"``, arrives under ``"aioenv_server"``, so that the key
    ``"aioenv"`` speaks of this side's pool only). An error frame, a lost connection or a
    closed session raises :class:`ConnectionError` (a failure of this env, so the pool's
    deadlines and restarts apply; a restart connects a new session).

    A fleet (several URLs, serving the same env): the session opens at the server with the
    fewest of this process's sessions; a server that refused or lost a session is tried
    only after the others for the next 30 s (the one that failed longest ago first), and
    opening a session tries each server in that order, so it fails only when every server
    does. A
    session lost with its server fails the env as above: the episode in flight is cut
    short (a server's episode cannot move), and the restart's session opens at another
    server, so a failover is a restart and counts toward the pool's restart budget; once
    no server is left, every restart fails and the budget gives the worker up.

    Spaces come from the server's ``/schema`` where it describes them (``aioenv serve``
    does, for the usual gymnasium spaces), read once when the env is built, from the first
    server that answers; else from ``observation_space``/``action_space`` (given spaces
    win over the schema's).

    :param headers: extra HTTP headers for the handshake (``Authorization``, say).
    :param connect_timeout: seconds to open the session at one server (the schema request
        included).
    :param max_message_size: the largest frame accepted, in bytes.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        observation_space: gymnasium.Space[Any] | None = None,
        action_space: gymnasium.Space[Any] | None = None,
        wrap_action: bool = True,
        headers: dict[str, str] | None = None,
        connect_timeout: float = 10.0,
        max_message_size: int = 100 * 2**20,
    ) -> None:
        given = [base_url] if isinstance(base_url, str) else list(base_url)
        if not given:
            raise ValueError("RemoteEnv needs at least one server URL, got none")
        #: The servers' base URLs (``http(s)://host:port``, the session is at ``/ws``).
        self.urls = tuple(dict.fromkeys(_http_url(url) for url in given))
        #: The base URL of the server whose session is open, else None.
        self.url: str | None = None
        self.wrap_action = wrap_action
        self.headers = dict(headers or {})
        self.connect_timeout = connect_timeout
        self.max_message_size = max_message_size
        self._connection: Any = None
        self.observation_space = observation_space
        self.action_space = action_space
        if observation_space is None or action_space is None:
            observed, acted = self._schema_spaces()
            self.observation_space = observed if observation_space is None else observation_space
            self.action_space = acted if action_space is None else action_space

    def _schema_spaces(self) -> tuple[gymnasium.Space[Any] | None, gymnasium.Space[Any] | None]:
        """The spaces ``/schema`` describes, from the first server that answers (None where
        it says nothing of one, or no server has such an endpoint): ``aioenv serve``'s
        action schema is ``{"action": space}``, its observation schema ``{"observation":
        space, ...}``."""
        import urllib.error
        import urllib.request

        schema = None
        for url in SERVERS.order(self.urls):
            request = urllib.request.Request(f"{url}/schema", headers=self.headers)
            try:
                with urllib.request.urlopen(request, timeout=self.connect_timeout) as response:
                    schema = json.loads(response.read())
                break
            except (urllib.error.URLError, OSError, ValueError):
                continue
        if not isinstance(schema, dict):
            return None, None

        def inner(part: str) -> gymnasium.Space[Any] | None:
            properties = (schema.get(part) or {}).get("properties") or {}
            return space_from_schema(properties.get(part))

        return inner("observation"), inner("action")

    async def _connect(self) -> Any:
        if self._connection is not None:
            return self._connection
        from websockets.asyncio.client import connect

        refused = []
        for url in SERVERS.order(self.urls):
            SERVERS.claim(url)
            try:
                self._connection = await connect(
                    _ws_url(url),
                    open_timeout=self.connect_timeout,
                    max_size=self.max_message_size,
                    additional_headers=self.headers or None,
                )
            except Exception as exc:
                SERVERS.release(url, failed=True)
                refused.append(f"{_ws_url(url)}: {exc}")
                continue
            except BaseException:  # cancelled (a deadline): no session, nothing learned
                SERVERS.release(url, failed=False)
                raise
            SERVERS.opened(url)
            self.url = url
            return self._connection
        raise ConnectionError(f"cannot open a session at {'; nor at '.join(refused)}")

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        connection = await self._connect()
        try:
            await connection.send(json.dumps(message))
            reply = json.loads(await connection.recv())
        except Exception as exc:
            where = self._where()
            await self._drop(server_failed=True)
            raise ConnectionError(f"the session at {where} was lost: {exc}") from exc
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            where = self._where()
            # A full server is passed over as a failed one is; an env's error is no news
            # of its server.
            await self._drop(server_failed=data.get("code") == "CAPACITY_REACHED")
            raise ConnectionError(
                f"the server at {where} answered {message['type']} with an error: "
                f"{data.get('message', 'no message')} (code {data.get('code', 'unknown')})"
            )
        data = reply.get("data")
        return data if isinstance(data, dict) else {}

    def _where(self) -> str:
        return _ws_url(self.url) if self.url is not None else "(no server)"

    async def _drop(self, *, server_failed: bool = False) -> None:
        connection, self._connection = self._connection, None
        url, self.url = self.url, None
        if url is not None:
            SERVERS.release(url, failed=server_failed)
        if connection is not None:
            with contextlib.suppress(Exception):  # the session is gone either way
                await connection.close()

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        data = {
            key: value for key, value in (("seed", seed), ("options", options)) if value is not None
        }
        observation, _, _, _, info = self._result(
            await self._request({"type": "reset", "data": jsonable(data)})
        )
        return observation, info

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        payload = {"action": jsonable(action)} if self.wrap_action else jsonable(action)
        if not isinstance(payload, dict):
            raise TypeError(
                f"RemoteEnv(wrap_action=False) sends the action as the step's data, which must "
                f"be a dict; got {type(action).__name__}"
            )
        return self._result(await self._request({"type": "step", "data": payload}))

    async def state(self) -> dict[str, Any]:
        """The server's state of this session (``aioenv serve``: the episode id and its
        step count)."""
        return await self._request({"type": "state"})

    async def close(self) -> None:
        try:
            if self._connection is not None:
                with contextlib.suppress(Exception):  # already gone: no goodbye to say
                    await self._connection.send(json.dumps({"type": "close"}))
        finally:
            await self._drop()

    def _result(self, data: dict[str, Any]) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        observation = data.get("observation")
        reward = float(data.get("reward") or 0.0)
        done = bool(data.get("done", False))
        if isinstance(observation, dict) and {"observation", "terminated", "truncated"} <= set(
            observation
        ):  # aioenv serve's envelope
            info = observation.get("info")
            info = dict(info) if isinstance(info, dict) else {}
            if RESTART_KEY in info:
                # The server's pool restarted its env: said under a key of its own, so this
                # side's pool never takes the note for one of its own restarts.
                info[SERVER_RESTART_KEY] = info.pop(RESTART_KEY)
            # Arrays travel as lists: back to the space's dtype where an array space says
            # which (a MultiBinary's is always int8), inside a Dict or a Tuple too.
            value, space = observation["observation"], self.observation_space
            return (
                value if space is None else value_from_json(value, space),
                reward,
                bool(observation["terminated"]),
                bool(observation["truncated"]),
                info,
            )
        metadata = data.get("metadata")
        return observation, reward, done, False, metadata if isinstance(metadata, dict) else {}


def _http_url(base_url: str) -> str:
    """``base_url`` as the server's ``http(s)://`` base (the scheme checked)."""
    scheme, separator, rest = base_url.rstrip("/").partition("://")
    if not separator or scheme not in ("http", "https", "ws", "wss") or not rest:
        raise ValueError(f"RemoteEnv needs http(s):// or ws(s):// base URLs, got {base_url!r}")
    return f"{'https' if scheme in ('https', 'wss') else 'http'}://{rest}"


def _ws_url(http_url: str) -> str:
    """The session endpoint of the server at ``http_url``."""
    return f"ws{http_url.removeprefix('http')}/ws"

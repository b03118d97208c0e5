"""Envs served over OpenEnv's protocol, seen from both ends.

:class:`RemoteEnv` is a coroutine env (an async gymnasium env) that plays one session of a
server speaking OpenEnv's WebSocket protocol (``/ws``: ``reset``, ``step``, ``state``,
``close``), ``aioenv serve``'s or OpenEnv's own. A pool of them drives many servers with
aioenv's deadlines, restarts and first-ready batches: a lost connection or an error frame
is a failure of that env, and the restart that follows connects a new session.

The helpers below also give ``aioenv serve`` its wire format: JSON values for observations
and infos (numpy arrays as lists), and gymnasium spaces written into the JSON schema the
server publishes at ``/schema`` (under ``x-aioenv-space``), so a client rebuilds them.

``websockets`` (the ``serve`` extra) is imported when a session connects, never when
``aioenv`` is.
"""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

import gymnasium
import numpy as np

from .core._restarts import RESTART_KEY

__all__ = ["RemoteEnv", "jsonable", "space_from_schema", "space_schema"]

#: The schema key that carries a gymnasium space's description.
SPACE_KEY = "x-aioenv-space"
#: Where a remote env's info carries the note of a restart on the server's side.
SERVER_RESTART_KEY = "aioenv_server"


def jsonable(value: Any) -> Any:
    """``value`` as JSON can carry it: numpy arrays as (nested) lists, numpy scalars as
    Python numbers, tuples as lists, mapping keys as strings; anything else JSON cannot
    hold as its ``repr``."""
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # JSON has no nan or infinity
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return repr(value)


def space_schema(space: Any) -> dict[str, Any]:
    """A JSON schema for values of gymnasium ``space``, with the space itself under
    :data:`SPACE_KEY` where it is one :func:`space_from_schema` rebuilds (Box, Discrete,
    MultiDiscrete, MultiBinary, and Dict/Tuple of those); ``{}`` (any value) otherwise."""
    described = _describe_space(space)
    if described is None:
        return {}
    return {**_value_schema(described), SPACE_KEY: described}


def space_from_schema(schema: Any) -> gymnasium.Space[Any] | None:
    """The gymnasium space ``schema`` describes under :data:`SPACE_KEY`, else None."""
    if not isinstance(schema, dict) or not isinstance(schema.get(SPACE_KEY), dict):
        return None
    return _build_space(schema[SPACE_KEY])


def _describe_space(space: Any) -> dict[str, Any] | None:
    spaces = gymnasium.spaces
    if isinstance(space, spaces.Discrete):
        return {"kind": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Box):
        return {
            "kind": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": jsonable(space.low),
            "high": jsonable(space.high),
        }
    if isinstance(space, spaces.MultiDiscrete):
        return {"kind": "MultiDiscrete", "nvec": jsonable(space.nvec), "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiBinary):
        return {"kind": "MultiBinary", "n": jsonable(space.n)}
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space)
        parts = {str(key): _describe_space(sub) for key, sub in items}
        if any(part is None for part in parts.values()):
            return None
        kind = "Dict" if isinstance(space, spaces.Dict) else "Tuple"
        return {"kind": kind, "spaces": parts}
    return None


def _value_schema(described: dict[str, Any]) -> dict[str, Any]:
    kind = described["kind"]
    if kind == "Discrete":
        first = described["start"]
        return {"type": "integer", "minimum": first, "maximum": first + described["n"] - 1}
    if kind == "Dict":
        properties = {k: _value_schema(v) for k, v in described["spaces"].items()}
        return {"type": "object", "properties": properties}
    if kind == "Tuple":
        return {
            "type": "array",
            "prefixItems": [_value_schema(v) for v in described["spaces"].values()],
        }
    return {"type": "array"}  # Box, MultiDiscrete, MultiBinary: (nested) lists of numbers


def _build_space(described: dict[str, Any]) -> gymnasium.Space[Any] | None:
    spaces = gymnasium.spaces
    kind = described.get("kind")
    if kind == "Discrete":
        return spaces.Discrete(described["n"], start=described.get("start", 0))
    if kind == "Box":
        dtype = np.dtype(described["dtype"])
        low = np.asarray(_finite_or_inf(described["low"]), dtype=np.float64)
        high = np.asarray(_finite_or_inf(described["high"]), dtype=np.float64)
        return spaces.Box(low.astype(dtype), high.astype(dtype), tuple(described["shape"]), dtype)
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(described["nvec"]), dtype=described["dtype"])
    if kind == "MultiBinary":
        return spaces.MultiBinary(described["n"])
    if kind in ("Dict", "Tuple"):
        parts = {key: _build_space(part) for key, part in described["spaces"].items()}
        if any(part is None for part in parts.values()):
            return None
        if kind == "Dict":
            return spaces.Dict(parts)  # type: ignore[arg-type]
        return spaces.Tuple(list(parts.values()))  # type: ignore[arg-type]
    return None


def _finite_or_inf(value: Any) -> Any:
    # jsonable() writes infinite bounds as their repr ('inf', '-inf').
    if isinstance(value, list):
        return [_finite_or_inf(item) for item in value]
    return float(value) if isinstance(value, str) else value


class RemoteEnv:
    """An env served over OpenEnv's WebSocket protocol, as a coroutine env: one session
    of the server at ``base_url`` (``http://``, ``https://``, ``ws://`` or ``wss://``; the
    session is at ``/ws`` under it). Run it with ``mode="coroutine"``::

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

    Spaces come from the server's ``/schema`` where it describes them (``aioenv serve``
    does, for the usual gymnasium spaces), read once when the env is built; else from
    ``observation_space``/``action_space`` (given spaces win over the schema's).

    :param headers: extra HTTP headers for the handshake (``Authorization``, say).
    :param connect_timeout: seconds to open the session (the schema request included).
    :param max_message_size: the largest frame accepted, in bytes.
    """

    def __init__(
        self,
        base_url: str,
        *,
        observation_space: gymnasium.Space[Any] | None = None,
        action_space: gymnasium.Space[Any] | None = None,
        wrap_action: bool = True,
        headers: dict[str, str] | None = None,
        connect_timeout: float = 10.0,
        max_message_size: int = 100 * 2**20,
    ) -> None:
        url = base_url.rstrip("/")
        scheme, separator, rest = url.partition("://")
        if not separator or scheme not in ("http", "https", "ws", "wss"):
            raise ValueError(
                f"RemoteEnv needs an http(s):// or ws(s):// base URL, got {base_url!r}"
            )
        secure = scheme in ("https", "wss")
        self.base_url = url
        self.ws_url = f"{'wss' if secure else 'ws'}://{rest}/ws"
        self.http_url = f"{'https' if secure else 'http'}://{rest}"
        self.wrap_action = wrap_action
        self.headers = dict(headers or {})
        self.connect_timeout = connect_timeout
        self.max_message_size = max_message_size
        self._connection: Any = None
        self.observation_space = observation_space
        self.action_space = action_space
        if observation_space is None or action_space is None:
            observed, acted = self._schema_spaces()
            self.observation_space = observation_space or observed
            self.action_space = action_space or acted

    def _schema_spaces(self) -> tuple[gymnasium.Space[Any] | None, gymnasium.Space[Any] | None]:
        """The spaces ``/schema`` describes (None where it says nothing of one, or there is
        no such endpoint): ``aioenv serve``'s action schema is ``{"action": space}``, its
        observation schema ``{"observation": space, ...}``."""
        import urllib.error
        import urllib.request

        request = urllib.request.Request(f"{self.http_url}/schema", headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=self.connect_timeout) as response:
                schema = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None, None
        if not isinstance(schema, dict):
            return None, None

        def inner(part: str, key: str) -> gymnasium.Space[Any] | None:
            properties = (schema.get(part) or {}).get("properties") or {}
            return space_from_schema(properties.get(key))

        return inner("observation", "observation"), inner("action", "action")

    async def _connect(self) -> Any:
        if self._connection is None:
            from websockets.asyncio.client import connect

            try:
                self._connection = await connect(
                    self.ws_url,
                    open_timeout=self.connect_timeout,
                    max_size=self.max_message_size,
                    additional_headers=self.headers or None,
                )
            except Exception as exc:
                raise ConnectionError(f"cannot open a session at {self.ws_url}: {exc}") from exc
        return self._connection

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        connection = await self._connect()
        try:
            await connection.send(json.dumps(message))
            reply = json.loads(await connection.recv())
        except Exception as exc:
            await self._drop()
            raise ConnectionError(f"the session at {self.ws_url} was lost: {exc}") from exc
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            await self._drop()
            raise ConnectionError(
                f"the server at {self.ws_url} answered {message['type']} with an error: "
                f"{data.get('message', 'no message')} (code {data.get('code', 'unknown')})"
            )
        data = reply.get("data")
        return data if isinstance(data, dict) else {}

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # the session is gone either way
                await connection.close()

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        data: dict[str, Any] = {}
        if seed is not None:
            data["seed"] = seed
        if options is not None:
            data["options"] = jsonable(options)
        observation, _, _, _, info = self._result(
            await self._request({"type": "reset", "data": data})
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
        if self._connection is not None:
            with contextlib.suppress(Exception):  # already gone: no goodbye to say
                await self._connection.send(json.dumps({"type": "close"}))
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
            return (
                self._observation(observation["observation"]),
                reward,
                bool(observation["terminated"]),
                bool(observation["truncated"]),
                info,
            )
        metadata = data.get("metadata")
        return observation, reward, done, False, metadata if isinstance(metadata, dict) else {}

    def _observation(self, value: Any) -> Any:
        # Arrays travel as lists: back to the space's dtype where a Box says which.
        space = self.observation_space
        if isinstance(space, (gymnasium.spaces.Box, gymnasium.spaces.MultiDiscrete)):
            return np.asarray(value, dtype=space.dtype)
        if isinstance(space, gymnasium.spaces.MultiBinary):
            return np.asarray(value, dtype=np.int8)
        return value

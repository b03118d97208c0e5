"""``aioenv serve``'s sessions and OpenEnv's protocol as they speak it, with no web
framework (:mod:`aioenv.serve` serves them over starlette, and runs them with uvicorn).

Each WebSocket session at ``/ws`` gets its own one-worker pool (process workers by
default), so OpenEnv clients get aioenv's isolation, deadlines and restarts: an env that
raises, dies or runs past its deadline is answered with the protocol's error frame and
restarted by the pool, and the client resets to go on. The HTTP endpoints ``/reset``,
``/step`` and ``/state`` are stateless, as OpenEnv's own are: each request is served by a
fresh env, closed before the answer goes out.

Messages (OpenEnv's): the client sends ``{"type": "reset", "data": {"seed": ...,
"options": ...}}``, ``{"type": "step", "data": {"action": value}}``, ``{"type": "state"}``
or ``{"type": "close"}``; the server answers ``{"type": "observation", "data":
{"observation": {"observation": ..., "info": {...}, "terminated": ..., "truncated": ...},
"reward": ..., "done": ...}}``, ``{"type": "state", "data": {"episode_id": ...,
"step_count": ...}}`` or ``{"type": "error", "data": {"message": ..., "code": ...}}``.

This module holds the server's options, its sessions (each one's pool, and its answer to
each message) and what the protocol says, which needs no web framework: the error codes
OpenEnv's clients read, :class:`SessionError` (a request answered with the protocol's
error frame), the checks of a request's data, a session's episode (what its ``state``
reports, and whether a step may come: :class:`Session`'s), the observation payload a
reset or a step is answered with, and the document ``/schema`` publishes. The starlette
app and its endpoints are :mod:`aioenv.serve`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from .core._commands import Reset
from .core._environment import EnvSource, Step
from .core._errors import AioEnvError
from .core._restarts import restart_note
from .core._supervision import SUPERVISION_DEFAULTS
from .pool._factory import make_pool
from .pool._pool import WorkerPool
from .wire._openenv_json import jsonable, space_schema, value_from_json

__all__ = [
    "CAPACITY_REACHED",
    "SESSION_ERROR",
    "VALIDATION_ERROR",
    "ServeOptions",
    "Server",
    "Session",
    "SessionError",
    "request_body",
    "schema_document",
    "session_message",
    "step_body_action",
]


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """How ``aioenv serve`` runs its sessions.

    :param mode: the worker kind of each session's env (a pool mode; default ``"process"``).
    :param max_sessions: sessions (WebSocket sessions and HTTP requests in flight together)
        served at once; one more is refused with ``CAPACITY_REACHED``.
    :param idle_timeout: seconds a session may wait for its client's next message before
        it is closed (its worker with it); None: never.
    :param keepalive: seconds between the server's pings of each WebSocket client, and the
        most it waits for the pong: a client whose link is cut (no close, no reset; its
        machine gone, say) is dropped, its worker with it, within twice this. None: no
        pings. :func:`serve` gives it to uvicorn; an ASGI server of your own has its own
        setting (uvicorn's ``ws_ping_interval`` and ``ws_ping_timeout``).
    :param step_timeout: the pools' ``step_timeout``, ``reset_timeout``, ``start_timeout``.
    :param cleanup_time: seconds a session's env gets to close when its client leaves
        between requests (the pools' ``cleanup_time``); a client that leaves mid-request
        leaves a busy env, whose worker is ended at once.
    :param name: what ``/metadata`` calls the env.
    """

    mode: str = "process"
    max_sessions: int = 8
    idle_timeout: float | None = 300.0
    keepalive: float | None = 20.0
    step_timeout: float | None = SUPERVISION_DEFAULTS.step_timeout
    reset_timeout: float | None = SUPERVISION_DEFAULTS.reset_timeout
    start_timeout: float | None = SUPERVISION_DEFAULTS.start_timeout
    cleanup_time: float = SUPERVISION_DEFAULTS.cleanup_time
    name: str = "env"

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {self.max_sessions}")
        for field in (
            "idle_timeout",
            "keepalive",
            "step_timeout",
            "reset_timeout",
            "start_timeout",
        ):
            value = getattr(self, field)
            if value is not None and not value > 0:
                raise ValueError(f"{field} must be a number of seconds > 0 or None, got {value}")
        if not self.cleanup_time >= 0:
            raise ValueError(
                f"cleanup_time must be a number of seconds >= 0, got {self.cleanup_time}"
            )


#: OpenEnv's error codes, as its clients read them.
INVALID_JSON = "INVALID_JSON"
UNKNOWN_TYPE = "UNKNOWN_TYPE"
VALIDATION_ERROR = "VALIDATION_ERROR"
EXECUTION_ERROR = "EXECUTION_ERROR"
CAPACITY_REACHED = "CAPACITY_REACHED"
SESSION_ERROR = "SESSION_ERROR"


class SessionError(Exception):
    """A request this session answers with the protocol's error frame."""

    def __init__(self, message: str, code: str = EXECUTION_ERROR) -> None:
        super().__init__(message)
        self.code = code


def request_body(raw: bytes) -> dict[str, Any]:
    """An HTTP request's JSON object, from its body's bytes (an empty body is ``{}``, as
    OpenEnv's default request)."""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise SessionError("the body must be a JSON object", VALIDATION_ERROR)
    return body


def session_message(raw: str) -> dict[str, Any]:
    """A WebSocket session's message, from its text: a JSON object
    (``{"type": ..., "data": {...}}``), else the error frame that says what it is not."""
    try:
        message = json.loads(raw)
    except ValueError as exc:
        raise SessionError(f"Invalid JSON: {exc}", INVALID_JSON) from None
    if not isinstance(message, dict):
        raise SessionError(
            'a message is a JSON object: {"type": ..., "data": {...}}', VALIDATION_ERROR
        )
    return message


def step_body_action(body: dict[str, Any]) -> dict[str, Any]:
    """The step's data an HTTP ``/step`` body carries: ``{"action": {"action": value}}``."""
    action = body.get("action")
    if not isinstance(action, dict) or "action" not in action:
        raise SessionError('the body must be {"action": {"action": value}}', VALIDATION_ERROR)
    return action


def observation_payload(state: Any, reward: float | None) -> dict[str, Any]:
    """OpenEnv's observation payload: aioenv's envelope as its observation."""
    if isinstance(state, Step):
        observation, info = state.observation, state.info
        terminated, truncated = bool(state.terminated), bool(state.truncated)
    else:  # a custom Environment's state: no flags of its own to report
        observation, info, terminated, truncated = state, {}, False, False
    envelope = {
        "observation": jsonable(observation),
        "info": jsonable(info),
        "terminated": terminated,
        "truncated": truncated,
    }
    return {"observation": envelope, "reward": reward, "done": terminated or truncated}


def schema_document(observation_space: Any, action_space: Any) -> dict[str, Any]:
    """What ``/schema`` answers: the JSON schemas of a step's action, of the observation
    payload (a reset's too) and of a session's state, the spaces given under their
    values' schemas (None: a space not known, any value)."""
    observation = {
        "type": "object",
        "properties": {
            "observation": space_schema(observation_space),
            "info": {"type": "object"},
            "terminated": {"type": "boolean"},
            "truncated": {"type": "boolean"},
        },
    }
    return {
        "action": {
            "type": "object",
            "properties": {"action": space_schema(action_space)},
            "required": ["action"],
        },
        "observation": observation,
        "reset_observation": observation,
        "state": {
            "type": "object",
            "properties": {
                "episode_id": {"type": ["string", "null"]},
                "step_count": {"type": "integer"},
            },
        },
    }


class Session:
    """One client's env: a one-worker pool built at the first reset, rebuilt after a
    failure the pool could not recover from; and where its episode stands: what its
    ``state`` message reports (the episode's id, its steps so far) and whether a step may
    come now (not before the first reset, nor after the episode ended or its env failed,
    until the next reset)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.pool: WorkerPool[Any] | None = None
        #: The client left while its env was busy: the env is not asked to close (it
        #: would answer only after the request it is busy with), its worker is ended.
        self.abandoned = False
        self.needs_reset = True
        self.episode_id: str | None = None
        self.step_count = 0

    async def reset(self, data: dict[str, Any]) -> dict[str, Any]:
        """The observation payload of a reset of ``data``, which begins a new episode, of
        the id ``data`` gives or a fresh one."""
        # Its data checked (its seed an int or None, its options an object or None), as the
        # command the env's worker takes.
        seed, options = data.get("seed"), data.get("options")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise SessionError(f"seed must be an int, got {seed!r}", VALIDATION_ERROR)
        if options is not None and not isinstance(options, dict):
            raise SessionError(f"options must be an object, got {options!r}", VALIDATION_ERROR)
        state = await self._request(Reset(seed=seed, options=options))
        episode_id = data.get("episode_id")
        self.episode_id = str(episode_id) if episode_id is not None else uuid.uuid4().hex
        self.step_count = 0
        self.needs_reset = False
        await self.server.learn_spaces(self.pool)
        return observation_payload(state, reward=None)

    async def step(self, data: dict[str, Any]) -> dict[str, Any]:
        """The observation payload of a step of ``data`` the env answered, counted in the
        episode (which ends with it where it is done). Raises the protocol's error for a
        step whose ``data`` has no action, or a step that cannot come now; and where the
        env failed and was restarted instead."""
        if "action" not in data:
            raise SessionError('a step\'s data is {"action": value}', VALIDATION_ERROR)
        if self.needs_reset:
            if self.episode_id is None:
                raise SessionError(
                    "this session has no episode yet: reset first (a client that reconnected, "
                    "its session closed as idle or its link dropped, is in a new session)"
                )
            raise SessionError(
                "no episode is going on (the last one ended, or its env failed): reset first"
            )
        # A JSON action as the env takes it (value_from_json, for the action space once it
        # is known).
        spaces = self.server.spaces
        action = value_from_json(data["action"], spaces[1] if spaces is not None else None)
        state = await self._request(action)
        note = restart_note(state) if isinstance(state, Step) else None
        if note is not None:
            self.needs_reset = True
            raise SessionError(f"the env failed and was restarted ({note}); reset to go on")
        self.step_count += 1
        reward = float(state.reward) if isinstance(state, Step) else 0.0
        result = observation_payload(state, reward=reward)
        self.needs_reset = bool(result["done"])
        return result

    def state(self) -> dict[str, Any]:
        return {"episode_id": self.episode_id, "step_count": self.step_count}

    async def answer(self, kind: Any, data: Any) -> dict[str, Any]:
        """The answer to the client's message of type ``kind`` (its ``data`` checked)."""
        if not isinstance(data, dict):
            raise SessionError("a message's data must be an object", VALIDATION_ERROR)
        if kind == "reset":
            return {"type": "observation", "data": await self.reset(data)}
        if kind == "step":
            return {"type": "observation", "data": await self.step(data)}
        if kind == "state":
            return {"type": "state", "data": self.state()}
        raise SessionError(f"Unknown message type: {kind}", UNKNOWN_TYPE)

    async def _request(self, request: Any) -> Any:
        if self.pool is None:
            self.pool = self.server.new_pool()
        try:
            self.pool.send_action(request, 0)
            answer = await self.pool.get_state(worker_id=0)
        except AioEnvError as exc:
            # The pool could not recover (its restarts spent, say): a fresh one next time.
            self.needs_reset = True
            await self.aclose()
            raise SessionError(f"{type(exc).__name__}: {exc}; reset to go on") from exc
        assert answer is not None  # no timeout given
        return answer[0]

    async def aclose(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            if self.abandoned:
                pool.cleanup_time = 0.0
            await pool.aclose()


class Server:
    def __init__(self, source: EnvSource, options: ServeOptions) -> None:
        self.source = source
        self.options = options
        self.sessions: set[Session] = set()
        self.spaces: tuple[Any, Any] | None = None
        self._spaces_lock = asyncio.Lock()

    def new_pool(self) -> WorkerPool[Any]:
        options = self.options
        return make_pool(
            self.source,
            1,
            mode=options.mode,
            step_timeout=options.step_timeout,
            reset_timeout=options.reset_timeout,
            start_timeout=options.start_timeout,
            cleanup_time=options.cleanup_time,
            restart="on_failure",
            autoreset="disabled",
        )

    async def learn_spaces(self, pool: WorkerPool[Any] | None) -> None:
        if self.spaces is not None or pool is None:
            return
        async with self._spaces_lock:
            if self.spaces is None:
                try:
                    observed = await pool.get_attr("observation_space")
                    acted = await pool.get_attr("action_space")
                except Exception:
                    return  # an env without spaces: its actions go as they come
                self.spaces = (observed[0], acted[0])

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        if len(self.sessions) >= self.options.max_sessions:
            raise SessionError(
                f"the server serves at most {self.options.max_sessions} sessions at once",
                CAPACITY_REACHED,
            )
        session = Session(self)
        self.sessions.add(session)
        try:
            yield session
        finally:
            self.sessions.discard(session)
            # Shielded: a client gone mid-request must not leave its worker behind.
            await asyncio.shield(session.aclose())

    async def aclose(self) -> None:
        sessions, self.sessions = list(self.sessions), set()
        await asyncio.gather(*(session.aclose() for session in sessions))

"""``aioenv serve``: an env server that speaks OpenEnv's protocol (the ``serve`` extra).

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

This module holds the server: its options, its sessions (each one's pool, and its answer
to each message), the starlette app and its endpoints (:func:`aioenv.serve.serve` runs it
with uvicorn). What the protocol says (its error codes, the checks of a request's data,
the observation payload, a session's episode and the ``/schema`` document) is
:mod:`aioenv.wire._openenv_protocol`'s, which needs no web framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from .core._environment import EnvSource
from .core._errors import AioEnvError
from .core._supervision import SUPERVISION_DEFAULTS
from .pool._factory import make_pool
from .pool._pool import WorkerPool
from .wire._openenv_json import value_from_json
from .wire._openenv_protocol import (
    CAPACITY_REACHED,
    SESSION_ERROR,
    UNKNOWN_TYPE,
    VALIDATION_ERROR,
    Episode,
    SessionError,
    observation_payload,
    request_body,
    reset_command,
    schema_document,
    session_message,
    step_body_action,
)

__all__ = ["ServeOptions", "build_app"]


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


class _Session:
    """One client's env: a one-worker pool built at the first reset, rebuilt after a
    failure the pool could not recover from."""

    def __init__(self, server: _Server) -> None:
        self.server = server
        self.pool: WorkerPool[Any] | None = None
        #: The client left while its env was busy: the env is not asked to close (it
        #: would answer only after the request it is busy with), its worker is ended.
        self.abandoned = False
        self.episode = Episode()

    async def reset(self, data: dict[str, Any]) -> dict[str, Any]:
        state = await self._request(reset_command(data))
        self.episode.begin(data)
        await self.server.learn_spaces(self.pool)
        return observation_payload(state, reward=None)

    async def step(self, data: dict[str, Any]) -> dict[str, Any]:
        self.episode.check_step(data)
        state = await self._request(self.server.action(data["action"]))
        return self.episode.stepped(state)

    async def answer(self, kind: Any, data: Any) -> dict[str, Any]:
        """The answer to the client's message of type ``kind`` (its ``data`` checked)."""
        if not isinstance(data, dict):
            raise SessionError("a message's data must be an object", VALIDATION_ERROR)
        if kind == "reset":
            return {"type": "observation", "data": await self.reset(data)}
        if kind == "step":
            return {"type": "observation", "data": await self.step(data)}
        if kind == "state":
            return {"type": "state", "data": self.episode.state()}
        raise SessionError(f"Unknown message type: {kind}", UNKNOWN_TYPE)

    async def _request(self, request: Any) -> Any:
        if self.pool is None:
            self.pool = self.server.new_pool()
        try:
            self.pool.send_action(request, 0)
            answer = await self.pool.get_state(worker_id=0)
        except AioEnvError as exc:
            # The pool could not recover (its restarts spent, say): a fresh one next time.
            self.episode.needs_reset = True
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


class _Server:
    def __init__(self, source: EnvSource, options: ServeOptions) -> None:
        self.source = source
        self.options = options
        self.sessions: set[_Session] = set()
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

    def action(self, value: Any) -> Any:
        """A JSON action as the env takes it (:func:`value_from_json`, for the action
        space once it is known)."""
        return value_from_json(value, self.spaces[1] if self.spaces is not None else None)

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
    async def session(self) -> AsyncIterator[_Session]:
        if len(self.sessions) >= self.options.max_sessions:
            raise SessionError(
                f"the server serves at most {self.options.max_sessions} sessions at once",
                CAPACITY_REACHED,
            )
        session = _Session(self)
        self.sessions.add(session)
        try:
            yield session
        finally:
            self.sessions.discard(session)
            # Shielded: a client gone mid-request must not leave its worker behind.
            await asyncio.shield(session.aclose())

    # WebSocket sessions ------------------------------------------------------------
    async def websocket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            async with self.session() as session:
                await self._serve_session(websocket, session)
        except SessionError as refused:
            await _send_error(websocket, refused)
        except WebSocketDisconnect:
            pass
        with contextlib.suppress(Exception):
            await websocket.close()

    async def _serve_session(self, websocket: WebSocket, session: _Session) -> None:
        # The client is read all along, so one that leaves while its env is busy (a step
        # hung, with no deadline) takes its worker with it at once: the worker is ended
        # without waiting for the env (see _Session.abandoned).
        messages: asyncio.Queue[str | None] = asyncio.Queue()
        reader = asyncio.ensure_future(_read(websocket, messages))
        try:
            idle = self.options.idle_timeout
            while True:
                try:
                    raw = await asyncio.wait_for(messages.get(), idle)
                except asyncio.TimeoutError:
                    await _send_error(
                        websocket,
                        SessionError(f"session idle for {idle:g} s: closed", SESSION_ERROR),
                    )
                    return
                if raw is None:  # the client left
                    return
                try:
                    message = session_message(raw)
                except SessionError as error:
                    await _send_error(websocket, error)
                    continue
                kind = message.get("type")
                if kind == "close":
                    return
                answer = asyncio.ensure_future(session.answer(kind, message.get("data") or {}))
                racing: set[asyncio.Future[Any]] = {answer, reader}
                await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
                if not answer.done():  # the client left mid-request
                    session.abandoned = True
                    answer.cancel()
                    with contextlib.suppress(asyncio.CancelledError, SessionError):
                        await answer
                    return
                try:
                    reply = answer.result()
                except Exception as exc:  # an action the worker cannot take, say: still an answer
                    await _send_error(websocket, _session_error(exc))
                    continue
                await websocket.send_text(json.dumps(reply))
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    # HTTP: one fresh env per request ------------------------------------------------
    async def http_reset(self, request: Request) -> JSONResponse:
        return await self._stateless(request, step=False)

    async def http_step(self, request: Request) -> JSONResponse:
        return await self._stateless(request, step=True)

    async def http_state(self, request: Request) -> JSONResponse:
        return JSONResponse(Episode().state())

    async def _stateless(self, request: Request, step: bool) -> JSONResponse:
        """``/reset`` (a reset of the body's data) or ``/step`` (a reset with the body's
        seed, then the step of its action) in a session of its own: the body checked
        before a session is taken, the answer or the error that says why."""
        try:
            body = request_body(await request.body())
            action = step_body_action(body) if step else None
        except SessionError as error:
            return _http_error(error)
        try:
            async with self.session() as session:
                if action is None:
                    return JSONResponse(await session.reset(body))
                # A fresh env cannot step before its reset: the request's seed seeds it.
                await session.reset({"seed": body.get("seed")} if "seed" in body else {})
                return JSONResponse(await session.step(action))
        except Exception as exc:  # still an answer saying why, as a session's would be
            return _http_error(_session_error(exc))

    async def health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "healthy"})

    async def metadata(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {"name": self.options.name, "description": "a gymnasium env served by aioenv"}
        )

    async def schema(self, request: Request) -> JSONResponse:
        if self.spaces is None:
            try:
                async with self.session() as session:
                    session.pool = self.new_pool()
                    await self.learn_spaces(session.pool)
            except (SessionError, AioEnvError) as error:
                return JSONResponse({"detail": str(error)}, status_code=503)
        observation_space, action_space = self.spaces or (None, None)
        return JSONResponse(schema_document(observation_space, action_space))

    async def aclose(self) -> None:
        sessions, self.sessions = list(self.sessions), set()
        await asyncio.gather(*(session.aclose() for session in sessions))


async def _read(websocket: WebSocket, messages: asyncio.Queue[str | None]) -> None:
    """Queue the client's messages (a binary frame read as UTF-8 text), then None once it
    leaves."""
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", "replace")
            messages.put_nowait(text)
    finally:
        messages.put_nowait(None)


def _session_error(exc: Exception) -> SessionError:
    """What the protocol's error frame says of ``exc``: a SessionError as it is, anything
    else (an action the worker cannot take, say) by its type's name and its text."""
    return exc if isinstance(exc, SessionError) else SessionError(f"{type(exc).__name__}: {exc}")


def _http_error(error: SessionError) -> JSONResponse:
    status = {CAPACITY_REACHED: 503, VALIDATION_ERROR: 422}.get(error.code, 500)
    return JSONResponse({"detail": str(error), "code": error.code}, status_code=status)


async def _send_error(websocket: WebSocket, error: SessionError) -> None:
    frame = {"type": "error", "data": {"message": str(error), "code": error.code}}
    with contextlib.suppress(Exception):  # the client may be gone already
        await websocket.send_text(json.dumps(frame))


def build_app(source: EnvSource, options: ServeOptions | None = None) -> Starlette:
    """The ASGI app serving ``source`` (what ``make_pool`` takes: a gymnasium id, a
    factory) over OpenEnv's protocol. Every session's worker is closed when its client
    leaves, and every one left when the app shuts down."""
    server = _Server(source, options or ServeOptions())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await server.aclose()

    app = Starlette(
        routes=[
            WebSocketRoute("/ws", server.websocket),
            Route("/reset", server.http_reset, methods=["POST"]),
            Route("/step", server.http_step, methods=["POST"]),
            Route("/state", server.http_state, methods=["GET"]),
            Route("/health", server.health, methods=["GET"]),
            Route("/metadata", server.metadata, methods=["GET"]),
            Route("/schema", server.schema, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.aioenv_server = server
    return app

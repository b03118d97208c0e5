"""Serving envs over OpenEnv's protocol (the ``serve`` extra: Starlette and uvicorn).

``aioenv serve ID`` runs the server from the command line; :func:`build_app` gives the
same ASGI app to mount in a server of your own, and :func:`serve` runs it with uvicorn.
Importing this module imports Starlette; ``import aioenv`` does not.

This module holds the starlette app and its endpoints: each WebSocket session at ``/ws``
served by a session of :mod:`aioenv._serve` (its own pool, its answer to each message),
and the HTTP endpoints, each request in a session of its own. The options, the sessions
and what the protocol says (its error codes, the checks of a request's data, the
observation payload, a session's episode and the ``/schema`` document) are
:mod:`aioenv._serve`'s, which needs no web framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import signal
import threading
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from . import _serve
from ._serve import ServeOptions, SessionError
from .core._environment import EnvSource
from .core._errors import AioEnvError

__all__ = ["ServeOptions", "build_app", "serve"]

ServeOptions.__module__ = __name__


class _App(_serve.Server):
    """The server's endpoints: a WebSocket session's messages answered by its session,
    and the HTTP requests, each in a session of its own."""

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

    async def _serve_session(self, websocket: WebSocket, session: _serve.Session) -> None:
        # The client is read all along, so one that leaves while its env is busy (a step
        # hung, with no deadline) takes its worker with it at once: the worker is ended
        # without waiting for the env (see _serve.Session.abandoned).
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
                        SessionError(f"session idle for {idle:g} s: closed", _serve.SESSION_ERROR),
                    )
                    return
                if raw is None:  # the client left
                    return
                try:
                    message = _serve.session_message(raw)
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
    async def http_state(self, request: Request) -> JSONResponse:
        return JSONResponse(_serve.Session(self).state())

    async def stateless(self, request: Request, step: bool) -> JSONResponse:
        """``/reset`` (a reset of the body's data) or ``/step`` (a reset with the body's
        seed, then the step of its action) in a session of its own: the body checked
        before a session is taken, the answer or the error that says why."""
        try:
            body = _serve.request_body(await request.body())
            action = _serve.step_body_action(body) if step else None
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
        return JSONResponse(_serve.schema_document(observation_space, action_space))


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
    status = {_serve.CAPACITY_REACHED: 503, _serve.VALIDATION_ERROR: 422}.get(error.code, 500)
    return JSONResponse({"detail": str(error), "code": error.code}, status_code=status)


async def _send_error(websocket: WebSocket, error: SessionError) -> None:
    frame = {"type": "error", "data": {"message": str(error), "code": error.code}}
    with contextlib.suppress(Exception):  # the client may be gone already
        await websocket.send_text(json.dumps(frame))


def build_app(source: EnvSource, options: ServeOptions | None = None) -> Starlette:
    """The ASGI app serving ``source`` (what ``make_pool`` takes: a gymnasium id, a
    factory) over OpenEnv's protocol. Every session's worker is closed when its client
    leaves, and every one left when the app shuts down."""
    server = _App(source, options or ServeOptions())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await server.aclose()

    app = Starlette(
        routes=[
            WebSocketRoute("/ws", server.websocket),
            Route("/reset", functools.partial(server.stateless, step=False), methods=["POST"]),
            Route("/step", functools.partial(server.stateless, step=True), methods=["POST"]),
            Route("/state", server.http_state, methods=["GET"]),
            Route("/health", server.health, methods=["GET"]),
            Route("/metadata", server.metadata, methods=["GET"]),
            Route("/schema", server.schema, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.aioenv_server = server
    return app


def serve(
    source: EnvSource, options: ServeOptions, host: str = "127.0.0.1", port: int = 8000
) -> None:
    """Serve ``source`` until interrupted (SIGINT or SIGTERM), then close every worker.
    Stopped by SIGTERM, the process exits with status 143 (128 + SIGTERM, as a shell
    reports a process that signal ended), once the interpreter's exit handlers ran."""
    import uvicorn

    config = uvicorn.Config(
        build_app(source, options),
        host=host,
        port=port,
        log_level="info",
        ws_ping_interval=options.keepalive,
        ws_ping_timeout=options.keepalive,
    )
    if threading.current_thread() is not threading.main_thread():
        uvicorn.Server(config).run()
        return
    # uvicorn stops gracefully on SIGTERM, then raises the signal again with the handler it
    # found, so that the process ends as that signal ends it. SIGTERM's default ends it
    # before the interpreter's exit handlers run (multiprocessing's among them, which
    # remove the folder its forkserver's socket is in): exit through them instead.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        uvicorn.Server(config).run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)

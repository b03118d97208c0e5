"""Serving envs over OpenEnv's protocol (the ``serve`` extra: Starlette and uvicorn).

``aioenv serve ID`` runs the server from the command line; :func:`build_app` gives the
same ASGI app to mount in a server of your own, and :func:`serve` runs it with uvicorn.
Importing this module imports Starlette; ``import aioenv`` does not.
"""

from __future__ import annotations

import signal
import threading

from ._serve import ServeOptions, build_app
from .core._environment import EnvSource

__all__ = ["ServeOptions", "build_app", "serve"]

for _name in ("ServeOptions", "build_app"):
    globals()[_name].__module__ = __name__
del _name


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

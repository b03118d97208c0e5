"""Serving envs over OpenEnv's protocol (the ``serve`` extra: Starlette and uvicorn).

``aioenv serve ID`` runs the server from the command line; :func:`build_app` gives the
same ASGI app to mount in a server of your own, and :func:`serve` runs it with uvicorn.
Importing this module imports Starlette; ``import aioenv`` does not.
"""

from __future__ import annotations

from ._serve import ServeOptions, build_app, serve

__all__ = ["ServeOptions", "build_app", "serve"]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name

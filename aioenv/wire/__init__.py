"""What crosses a process boundary: both ends of the process worker's frames, observations
in shared memory, the requests a serving process answers, the Ray worker's messages, the
JSON of OpenEnv's protocol (``aioenv serve`` and ``RemoteEnv``) and what the protocol says
on the server's side. It imports only :mod:`aioenv.core`.
"""

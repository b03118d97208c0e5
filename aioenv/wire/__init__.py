"""What crosses a process boundary: both ends of the process worker's frames, observations
in shared memory, the requests a serving process answers and the Ray worker's messages.
It imports only :mod:`aioenv.core`.
"""

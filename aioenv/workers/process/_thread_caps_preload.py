"""Imported only by the multiprocessing forkserver, as a preload module, after numpy.

threadpoolctl finds the native thread pools loaded there once, so that every child forked
from the server, which caps them before it builds its envs (see
:mod:`aioenv.env_side._thread_caps`), finds them from warm caches: a few milliseconds less
per child. Nothing is capped here: the server's pools are what a child with
``threads_per_env=None`` keeps.
"""

import threadpoolctl

threadpoolctl.threadpool_info()

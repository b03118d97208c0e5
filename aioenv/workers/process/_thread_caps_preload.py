"""Imported only by aioenv's multiprocessing forkserver, as a preload module, after numpy.

numpy's OpenBLAS has loaded, with one thread where the server's start asked for that (see
:func:`aioenv.env_side._thread_caps.forkserver_load_code`): the variable that asked comes
out of the server's environment again. threadpoolctl then finds the native thread pools
loaded there once, so that every child forked from the server, which caps them before it
builds its envs (see :mod:`aioenv.env_side._thread_caps`), finds them from warm caches: a
few milliseconds less per child. Nothing is capped here.
"""

import threadpoolctl

from aioenv.env_side._thread_caps import forkserver_loaded

forkserver_loaded()
threadpoolctl.threadpool_info()

"""Imported only by the multiprocessing forkserver, as a preload module.

The server then ignores SIGINT before it saves its signal dispositions, so every worker it
forks starts with SIGINT ignored: a Ctrl-C that lands while a worker is still starting up
cannot print a traceback from it. (Workers ignore SIGINT anyway once running.)
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)

"""The env's side of every worker: the runners that build an env and answer its resets,
steps, rollouts and control requests, and the slots a serving process (a process worker's
child, a Ray actor) keeps. It imports only :mod:`aioenv.core` and :mod:`aioenv.wire`: this
is what a child process runs, and what sync, thread and coroutine workers and inline
vector envs run in the parent.
"""

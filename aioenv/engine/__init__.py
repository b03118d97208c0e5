"""The engine: how actions reach envs in child processes and their results come back,
through a buffer both sides map and a wake in the kernel, with no event loop and no
pickle on the way for the parts of a step whose size is fixed.

- :mod:`aioenv.engine._buffer`: one step's fixed-size data for a vector of envs (actions
  in; observations, rewards, terminated and truncated flags out) in one memory file.
- :mod:`aioenv.engine._wake`: the counter in the kernel (an eventfd, or a pipe) through
  which each side tells the other that its half is ready, waited on with the GIL
  released; its docstring argues the memory ordering.
- :mod:`aioenv.engine._lane`: a process worker's steps through a one-row buffer and two
  wakes, the answer's watched by the event loop (the pool's face of the engine).

``benchmarks/bare.py``'s ``BareEngine`` drives children through these two and nothing
else of aioenv: the reference that bounds what a vector step carried this way can reach.
"""

"""The vector face: ``AioVectorEnv`` (gymnasium's ``VectorEnv`` over a pool or inline envs)
and ``make_vec``; where its envs step, how its envs' data is laid out per worker, and the
pipelined ``send``/``recv``.
"""

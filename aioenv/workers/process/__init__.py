"""The process worker: the parent's half (``_worker``, the worker; ``_host``, the child's
process seen from the parent; ``_start``, how a child is started) beside the child's
program (``_child``, and the forkserver's preload modules). The child's modules import
only the env side.
"""

"""Native thread pools capped in every process aioenv starts for envs.

OpenMP, BLAS (OpenBLAS, MKL, BLIS, Accelerate), numexpr, torch and OpenCV each start one
thread per core by default. A machine running several env processes then has several
times as many busy threads as cores, and every step waits on threads that fight for them.
So each env process caps them, ``threads_per_env`` threads each (default 1).

The parent resolves the caps (:meth:`ThreadCaps.resolve`: a variable the user set in the
parent's environment wins over the default); the env process applies them
(:func:`cap_threads`) before it builds any env:

- the variables go into its environment, for libraries loaded later (torch reads
  ``OMP_NUM_THREADS`` when it is imported);
- threadpoolctl caps the OpenMP and BLAS libraries already loaded (numpy's BLAS, loaded
  before the caps in a forkserver child, no longer reads the variables);
- torch and OpenCV are capped right after they are imported, by the env or later, through
  an import hook, so an env that sets its own thread counts after importing them wins.
  Neither is ever imported for this. Where one got into ``sys.modules`` without an import
  (or before the hook), :func:`cap_imported`, after each build, caps it.

This module is imported on both sides; it imports nothing else from aioenv but core's
count check (:func:`~aioenv.core._seeds.checked_count`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from ..core._seeds import checked_count

__all__ = [
    "DEFAULT_THREADS_PER_ENV",
    "THREAD_VARIABLES",
    "ThreadCaps",
    "cap_threads",
    "cap_imported",
    "forkserver_load_code",
    "forkserver_loaded",
]

#: The threads each native thread pool of an env process may use, unless told otherwise
#: (the process and Ray workers' ``threads_per_env``): one, so env processes do not
#: fight over the cores.
DEFAULT_THREADS_PER_ENV = 1

#: The variables thread pools read when their library loads, each with the threadpoolctl
#: API that caps its library once loaded (None: threadpoolctl does not know it).
THREAD_VARIABLES: dict[str, str | None] = {
    "OMP_NUM_THREADS": "openmp",
    "MKL_NUM_THREADS": "mkl",
    "OPENBLAS_NUM_THREADS": "openblas",
    "BLIS_NUM_THREADS": "blis",
    "VECLIB_MAXIMUM_THREADS": None,
    "NUMEXPR_NUM_THREADS": None,
}


@dataclasses.dataclass(frozen=True)
class ThreadCaps:
    """The caps of one env process: ``variables``, the thread variables and their values
    there; ``threads``, the cap of torch and OpenCV (torch's is ``OMP_NUM_THREADS`` where
    that is a count)."""

    variables: tuple[tuple[str, str], ...]
    threads: int

    @classmethod
    def resolve(cls, threads: int | None, owner: str) -> ThreadCaps | None:
        """The caps for ``threads`` (``threads_per_env``; None: no caps), each variable set in
        this (the parent's) environment keeping its value; a value that is not an int >= 1
        is a ValueError naming ``owner`` (the worker) and saying what is allowed."""
        if threads is None:
            return None
        threads = checked_count(
            threads,
            f"{owner}: threads_per_env",
            meaning=" (the threads each native thread pool of an env process may use) or None "
            "(leave them as the libraries set them)",
        )
        variables = tuple((name, os.environ.get(name, str(threads))) for name in THREAD_VARIABLES)
        return cls(variables, threads)

    def limit(self, variable: str) -> int | None:
        """The thread count ``variable`` says, or None where it is not a count (say
        OpenMP's nested ``"4,2"``: that library is then left as it is)."""
        value = dict(self.variables).get(variable, "")
        return int(value) if value.isdecimal() and int(value) > 0 else None


#: In the environment of aioenv's forkserver server only, while it preloads numpy:
#: OPENBLAS_NUM_THREADS=1 is there for that load alone (see :func:`forkserver_load_code`).
_SERVER_LOAD_MARK = "AIOENV_FORKSERVER_OPENBLAS_LOAD"
#: The variables OpenBLAS takes its thread count from when it loads.
_OPENBLAS_LOAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
#: In a child of that server: the threads OpenBLAS would have loaded with, which a child
#: left uncapped gets back. None elsewhere.
_openblas_uncapped: int | None = None


def forkserver_load_code() -> str:
    """Python statements that aioenv's forkserver server runs first, before it preloads
    numpy: unless the user's environment sets OpenBLAS's thread count, OpenBLAS loads there
    with one thread. Why: a forked child's OpenBLAS starts its threads again, as many as it
    loaded with, once its count is set (the cap does that), and each new thread spins about
    0.1 s of CPU before it sleeps. Loaded with one thread, a child capped at ``k`` starts
    ``k - 1`` of them; loaded with one per core, every child start cost 0.1 s of CPU per
    core but one, for threads a capped child never uses (1.5 s on 16 cores)."""
    return (
        "import os; e = os.environ; "
        f"any(v in e for v in {_OPENBLAS_LOAD_VARIABLES!r}) or "
        f"e.update({{'OPENBLAS_NUM_THREADS': '1', {_SERVER_LOAD_MARK!r}: '1'}})"
    )


def forkserver_loaded() -> None:
    """In aioenv's forkserver server, numpy loaded: the variable :func:`forkserver_load_code`
    set comes out of the environment again (the children get the user's), and the count
    OpenBLAS would have chosen (one per core it may run on) is kept for the uncapped."""
    global _openblas_uncapped
    if os.environ.pop(_SERVER_LOAD_MARK, None) is None:
        return
    os.environ.pop("OPENBLAS_NUM_THREADS", None)
    affinity = getattr(os, "sched_getaffinity", None)
    _openblas_uncapped = len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def cap_threads(caps: ThreadCaps | None) -> None:
    """Cap this process's thread pools (see the module's docstring); call it before the
    envs are built. None caps nothing: a child of aioenv's forkserver gets OpenBLAS's own
    thread count back (see :func:`forkserver_load_code`)."""
    if caps is None:
        if _openblas_uncapped is not None:
            from threadpoolctl import ThreadpoolController

            ThreadpoolController().select(internal_api="openblas").limit(limits=_openblas_uncapped)
        return
    os.environ.update(caps.variables)
    from threadpoolctl import ThreadpoolController

    loaded = ThreadpoolController()
    for name, api in THREAD_VARIABLES.items():
        limit = caps.limit(name)
        if api is not None and limit is not None:
            loaded.select(internal_api=api).limit(limits=limit)  # lasts: no `with`
    sys.meta_path.insert(0, _CapOnImport(caps))
    cap_imported(caps)


def cap_imported(caps: ThreadCaps | None) -> None:
    """Cap torch and OpenCV where they are in ``sys.modules`` and the import hook has not
    capped them: call it after each build."""
    if caps is None:
        return
    for name in _CAPPERS:
        module = sys.modules.get(name)
        if module is not None and id(module) not in _capped:
            _cap(name, module, caps)


def _cap_torch(torch: Any, caps: ThreadCaps) -> None:
    torch.set_num_threads(caps.limit("OMP_NUM_THREADS") or caps.threads)  # OpenMP's count
    # Settable once per process, and only before torch's inter-op pool has run anything:
    # an env that already used it keeps it.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(caps.threads)


def _cap_cv2(cv2: Any, caps: ThreadCaps) -> None:
    cv2.setNumThreads(caps.threads)


_CAPPERS: dict[str, Callable[[Any, ThreadCaps], None]] = {"torch": _cap_torch, "cv2": _cap_cv2}
_capped: set[int] = set()  # ids of the modules capped in this process


def _cap(name: str, module: types.ModuleType, caps: ThreadCaps) -> None:
    _capped.add(id(module))
    with contextlib.suppress(Exception):  # a module without these calls is not the library
        _CAPPERS[name](module, caps)


class _CapOnImport:
    """A ``sys.meta_path`` finder that leaves finding torch and cv2 to the finders after it
    and caps the module once it has run."""

    def __init__(self, caps: ThreadCaps) -> None:
        self._caps = caps

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _CAPPERS:
            return None
        spec: importlib.machinery.ModuleSpec | None = None
        for other in list(sys.meta_path):  # the first other finder that finds it
            find_spec = getattr(other, "find_spec", None)
            if other is not self and find_spec is not None:
                spec = find_spec(fullname, path, target)
                if spec is not None:
                    break
        loader = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module  # this spec's own loader: patching it touches no other
        caps = self._caps

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            # cv2's package replaces itself in sys.modules with its native module.
            _cap(fullname, sys.modules.get(fullname, module), caps)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

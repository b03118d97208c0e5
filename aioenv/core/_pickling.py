"""How the parent pickles what it sends to a worker's process or Ray actor: an env source,
a policy, a registry spec. cloudpickle, with one difference: the code objects of functions
it ships by value (defined in ``__main__``, a notebook, a test module) keep their file
name.

cloudpickle 3.1.3 and later write every such code object's file name as ``<dynamic-code>``
(it makes their bytes the same wherever the function was defined). A remote traceback then
reads ``File "<dynamic-code>", line 13, in reset``: no file, no source line, and those are
what a user needs to find the bug. aioenv pickles for a process on the same machine, or a
Ray actor that runs the same code, so the real name costs nothing and is put back: each
code object travels as cloudpickle reduces it, with its file name beside it, and is
rebuilt with that name (:func:`rebuild_code`). With an older cloudpickle (which kept the
name) the result is the same.

Both sides use this module: it imports nothing of aioenv.
"""

from __future__ import annotations

import io
import types
from collections import ChainMap
from collections.abc import Callable
from typing import Any, ClassVar

import cloudpickle

__all__ = ["dumps", "rebuild_code"]

#: cloudpickle's own reducer of a code object: ``(types.CodeType, args)``.
_cloudpickle_code_reduce: Callable[[types.CodeType], tuple[Any, ...]] = (
    cloudpickle.Pickler.dispatch_table[types.CodeType]
)


def rebuild_code(reduced: tuple[Any, ...], filename: str) -> types.CodeType:
    """The code object that cloudpickle's ``reduced`` rebuilds, with its file name
    ``filename`` (run in the worker when it unpickles)."""
    constructor, args = reduced
    code: types.CodeType = constructor(*args)
    if code.co_filename != filename:
        code = code.replace(co_filename=filename)
    return code


def _reduce_code(code: types.CodeType) -> tuple[Any, ...]:
    return rebuild_code, (_cloudpickle_code_reduce(code), code.co_filename)


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    dispatch_table: ClassVar[ChainMap[Any, Any]] = ChainMap(
        {types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table
    )


def dumps(obj: Any) -> bytes:
    """``obj`` in cloudpickle's bytes (its newest protocol), code objects keeping their
    file names; the worker loads them with plain ``pickle.loads``/``cloudpickle.loads``."""
    with io.BytesIO() as file:
        _Pickler(file, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return file.getvalue()

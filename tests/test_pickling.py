"""What the parent pickles for a worker keeps its code objects' file names, whatever name
cloudpickle itself writes for functions it ships by value."""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import Any

from aioenv.core import _pickling

#: Unpickles stdin in a fresh interpreter (as a worker does: nothing of this module there)
#: and prints each shipped code object's name, file and first line.
READER = """
import pickle, sys
env_class, closure = pickle.loads(sys.stdin.buffer.read())
step = env_class.step.__code__
inner = next(c for c in step.co_consts if hasattr(c, "co_filename"))
for code in (step, inner, closure.__code__):
    print(code.co_name, code.co_filename, code.co_firstlineno)
print(env_class().step(1), closure(1))
"""


def _made_here() -> Any:
    """A class and a closure defined in a function: cloudpickle ships both by value."""

    class Env:
        def step(self, action: int) -> int:
            def inner(x: int) -> int:
                return x + 1

            return inner(action)

    offset = 3
    return Env, lambda x: x + offset


def test_code_shipped_by_value_keeps_its_file_name_and_lines() -> None:
    env_class, closure = _made_here()
    step = env_class.step.__code__
    inner = next(c for c in step.co_consts if hasattr(c, "co_filename"))
    done = subprocess.run(
        [sys.executable, "-c", READER],
        input=_pickling.dumps((env_class, closure)),
        capture_output=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == [
        f"step {__file__} {step.co_firstlineno}",
        f"inner {__file__} {inner.co_firstlineno}",
        f"<lambda> {__file__} {closure.__code__.co_firstlineno}",
        "2 4",
    ]


def test_what_pickles_by_reference_still_does() -> None:
    assert pickle.loads(_pickling.dumps(pickle.dumps)) is pickle.dumps
    assert pickle.loads(_pickling.dumps({"a": [1, 2.5]})) == {"a": [1, 2.5]}

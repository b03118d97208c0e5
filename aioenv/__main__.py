"""``python -m aioenv``: the command line (see :mod:`aioenv._cli`)."""

import sys

from ._cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())

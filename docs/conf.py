"""Sphinx configuration of aioenv's documentation (``make docs`` builds it into docs/_build)."""

from __future__ import annotations

import dataclasses
import pathlib

import aioenv
from aioenv.core._docs import option_docs
from aioenv.pool._options import PoolOptions

project = "aioenv"
author = "the aioenv developers"
copyright = "2026, the aioenv developers"
release = aioenv.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_generated"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"aioenv {release}"
html_static_path = ["_static"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True}
# aioenv.sb3's page builds without the sb3 extra (and torch) installed.
autodoc_mock_imports = ["stable_baselines3", "starlette", "uvicorn"]
# The docstrings name types that Sphinx cannot resolve into links (numpy arrays, private
# helpers behind public names); a missing link is not an error in the text.
nitpicky = False


def _pool_options_table() -> str:
    """The concepts guide's table of pool options: each option's default and doc as the
    class that defines it has them (see aioenv.core._docs)."""
    docs = option_docs(PoolOptions)
    lines = [".. list-table::", "   :header-rows: 1", "   :widths: 18 12 70", ""]
    lines += ["   * - option", "     - default", "     - meaning"]
    for field in dataclasses.fields(PoolOptions):
        name = field.name
        lines += [f"   * - ``{name}``", f"     - ``{field.default!r}``", f"     - {docs[name]}"]
    return "\n".join(lines) + "\n"


_GENERATED = pathlib.Path(__file__).parent / "_generated"
_GENERATED.mkdir(exist_ok=True)
(_GENERATED / "pool-options.rst").write_text(_pool_options_table())

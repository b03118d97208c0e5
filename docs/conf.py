"""Sphinx configuration of aioenv's documentation (``make docs`` builds it into docs/_build)."""

from __future__ import annotations

import aioenv

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
exclude_patterns = ["_build"]
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

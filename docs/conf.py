"""Sphinx configuration: the API reference is generated from the numpydoc docstrings.

Build (warnings are errors, as in CI): ``python -m sphinx -W -b html docs docs/_build/html``.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

from ipukern import __version__

project = "ipukern"
author = "the ipukern authors"
copyright = "2026, the ipukern authors"
version = release = __version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
# the compiled kernels are not needed to document the Python API (a docs-only checkout
# without a C compiler still builds the reference)
autodoc_mock_imports: list[str] = []

exclude_patterns = ["_build", "*.md"]
html_theme = "alabaster"
html_static_path: list[str] = []
nitpicky = False
# Shape descriptions such as "ndarray of shape (n_tiles,)" make the Python domain look up
# "n_tiles" as a cross-reference, which is ambiguous (several classes have that attribute).
# Only that kind of warning is silenced; every other warning fails the build.
suppress_warnings = ["ref.python"]

"""Sphinx configuration; `make docs` builds with -W, so a broken reference fails the build.

Theme: furo (maintained, with search, dark mode and a light/dark switch); sphinx-copybutton puts a
copy button on every code block and leaves the ``$ `` prompts out of what it copies.
tests/docs/test_site.py opens the built site in a real browser: every page, link and image, and the search.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent / "provider"))

from airflow_gpu import __version__  # noqa: E402

project = "airflow-provider-gpu"
author = "airflow-provider-gpu developers"
release = version = __version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx_copybutton", "catalog_table"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = f"airflow-provider-gpu {release}"
# Shell examples show `$ airflow-gpu ...`: a copy gives the command alone, not the prompt or its output.
copybutton_prompt_text = "$ "
copybutton_only_copy_prompt_lines = True
nitpicky = False

"""Sphinx configuration; `make docs` builds with -W, so a broken reference fails the build."""

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
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "catalog_table"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False

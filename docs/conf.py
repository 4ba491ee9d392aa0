"""Sphinx configuration; `make docs` builds with -W, so a broken reference fails the build.

Theme: furo (maintained, with search, dark mode and a light/dark switch); sphinx-copybutton puts a
copy button on every code block and leaves the ``$ `` prompts out of what it copies.
tests/docs/test_site.py opens the built site in a real browser: every page, link and image, and the search.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# autodoc imports the operators, hence Airflow, which reads (and first writes) $AIRFLOW_HOME/airflow.cfg:
# a build must not create or read a developer's ~/airflow, and Airflow's INFO lines are not the build's.
os.environ.setdefault("AIRFLOW_HOME", str(HERE / "_build" / "airflow-home"))
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent / "provider"))

from airflow_gpu import __version__  # noqa: E402

sys.path.insert(0, str(HERE / "_inventories"))
from provider_inventories import PROVIDERS, TASK_SDK, base_url, task_sdk_url  # noqa: E402

project = "airflow-provider-gpu"
author = "airflow-provider-gpu developers"
release = version = __version__
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
    "catalog_table",
    "operator_arguments",
    "troubleshooting_entries",
]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
exclude_patterns = ["_build", "_inventories"]
# The reference links to the official providers' API docs. Their inventories are shipped in
# _inventories/ (provider_inventories.py says how they were made and how to refresh them), never downloaded at
# build time: the build runs with no network, and -W would fail on a fetch error.
INVENTORIES = HERE / "_inventories"
intersphinx_mapping = {
    name: (base_url(distribution), str(INVENTORIES / f"{name}.inv")) for name, (distribution, _) in PROVIDERS.items()
}
# BaseOperator's arguments (task_id, retries, execution_timeout...) link to the Task SDK's API page.
intersphinx_mapping[TASK_SDK[0]] = (
    task_sdk_url(importlib.metadata.version(TASK_SDK[1])),
    str(INVENTORIES / f"{TASK_SDK[0]}.inv"),
)
html_theme = "furo"
html_title = f"airflow-provider-gpu {release}"
# Shell examples show `$ airflow-gpu ...`: a copy gives the command alone, not the prompt or its output.
copybutton_prompt_text = "$ "
copybutton_only_copy_prompt_lines = True
nitpicky = False

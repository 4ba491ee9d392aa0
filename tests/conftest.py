"""Test-wide set-up: Airflow must never touch the developer's ``~/airflow``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import hypothesis  # noqa: F401  # imported before Airflow: see the note below
import pytest

REPO = Path(__file__).resolve().parent.parent

# hypothesis's pytest plugin imports hypothesis at session end when no test did; pytest then
# rewrites its asserts with ast.parse, which CPython 3.11.7 fails ("AST constructor recursion
# depth mismatch") once Airflow has run in the process. Importing it first sidesteps that.


def pytest_configure(config: pytest.Config) -> None:
    # Importing airflow with AIRFLOW_HOME unset creates ~/airflow; SQLite needs an absolute path.
    home = Path(tempfile.mkdtemp(prefix="airflow-gpu-tests-"))
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow.db'}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end tests last: the Airflow stack they start lives until the session ends, and
    its scheduler would otherwise keep a core busy through every unit test after them."""
    e2e = REPO / "tests" / "e2e"
    items.sort(key=lambda item: item.path.is_relative_to(e2e))

"""Test-wide set-up: Airflow must never touch the developer's ``~/airflow``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    # Importing airflow with AIRFLOW_HOME unset creates ~/airflow; SQLite needs an absolute path.
    home = Path(tempfile.mkdtemp(prefix="airflow-gpu-tests-"))
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow.db'}"

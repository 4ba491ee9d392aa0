"""Test-wide set-up: Airflow must never touch the developer's ``~/airflow``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

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
    """Where the end-to-end tests go.

    With pytest-xdist (``make test`` runs ``-n 2``) they are one unit of work (below), run first by
    one worker on the one shared Airflow stack while the other worker runs the unit tests: the
    stack mostly waits on its emulators, so the two overlap instead of adding up. Without xdist
    they go last: the stack lives until the session ends, and its scheduler would otherwise keep a
    core busy through every unit test after them.
    """
    e2e = REPO / "tests" / "e2e"
    distributed = "PYTEST_XDIST_WORKER" in os.environ
    items.sort(key=lambda item: item.path.is_relative_to(e2e) != distributed)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's load scheduling, with every end-to-end test in one scope: one worker, one stack.

    (``xdist_group`` markers would say the same, but with pytest 9 xdist 3.8 can no longer rename
    the tests' node ids, which is how ``--dist loadgroup`` groups them.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class EndToEndTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/e2e" if nodeid.startswith("tests/e2e/") else nodeid

    return EndToEndTogether(config, log)

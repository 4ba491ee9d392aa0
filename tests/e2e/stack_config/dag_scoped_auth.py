"""The end-to-end stack's auth manager: Airflow's simple auth manager, with DAG access scoped per user.

The simple auth manager gives a role the same access to every DAG (its one per-DAG rule needs
multi-team mode, bundles bound to teams). Real deployments restrict DAGs per user (FAB's
per-DAG permissions, Keycloak): the report pages must answer 403 to a user who may not read the
DAG. This subclass keeps authentication, tokens, cookies and roles exactly as Airflow's, and
narrows ``is_authorized_dag`` for the users named in ``AIRFLOW_GPU_TEST_DAG_SCOPES``
(``user=dag_a|dag_b;other=dag_c``); everyone else is the simple auth manager's. It is loaded from
``$AIRFLOW_HOME/config`` (on every part's ``sys.path``) by ``[core] auth_manager``.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

SCOPES_ENV = "AIRFLOW_GPU_TEST_DAG_SCOPES"


def scopes() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for entry in filter(None, os.environ.get(SCOPES_ENV, "").split(";")):
        user, _, dags = entry.partition("=")
        found[user.strip()] = {d.strip() for d in dags.split("|") if d.strip()}
    return found


class DagScopedAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        allowed = scopes().get(user.username)
        if allowed is not None and (details is None or details.id not in allowed):
            return False
        return bool(super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details))

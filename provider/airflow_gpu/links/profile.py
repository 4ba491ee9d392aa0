"""The "GPU Profile" button on a GPU task instance's page, to the report's page for it.

Airflow 3 calls ``get_link`` on the worker when the task ends and keeps the URL in XCom
(``_link_GPUProfileLink``); the API server only reads it back. The worker does not know the
address users reach the UI at, so the URL is absolute from ``[api] base_url`` (the fallback is
the one Airflow's own task log URL uses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink, conf

from airflow_gpu.plugins.urls import absolute_task_url

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

#: What the Airflow task runner assumes for its own URLs when ``[api] base_url`` is not set.
DEFAULT_BASE_URL = "http://localhost:8080/"


class GPUProfileLink(BaseOperatorLink):
    """Links a task instance (mapped ones by map index) to its GPU profile page."""

    name = "GPU Profile"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        if getattr(operator, "gpu_profile", True) is False:  # not profiled: no link to an empty page
            return ""
        base_url = conf.get("api", "base_url", fallback=None) or DEFAULT_BASE_URL
        # The task runner passes its RuntimeTaskInstance as ti_key, whose map_index may be None.
        map_index = -1 if ti_key.map_index is None else ti_key.map_index
        return absolute_task_url(base_url, ti_key.dag_id, ti_key.run_id, ti_key.task_id, map_index)

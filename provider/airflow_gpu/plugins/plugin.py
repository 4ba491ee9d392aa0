"""The Airflow plugin: the report app under ``/gpu-profile`` and its "GPU Profile" tabs.

Loaded through the ``airflow.plugins`` entry point (and listed in the provider info) by every
Airflow process, the scheduler and workers included, so importing this module costs nothing
beyond Airflow's plugin base class: the app (FastAPI, the API server's auth, XCom models) sits
behind ``LazyApp`` and is imported on the first request, which only the API server receives.
Nothing here touches the database.

The tabs (``external_views``) are iframes of the app's pages; the UI fills ``{DAG_ID}``,
``{RUN_ID}``, ``{TASK_ID}`` (URL-encoded) and ``{MAP_INDEX}``, which it leaves literal on an
unmapped task instance's page (the app reads it as "not given"). In Airflow 3.3 a
``task_instance`` tab shows on every task, so the page has an empty state for the others.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.configuration import conf
from airflow.plugins_manager import AirflowPlugin

from airflow_gpu.plugins.urls import PREFIX, base_path

#: ``module:attribute`` of the FastAPI app the plugin mounts.
APP = "airflow_gpu.plugins.app:app"
#: The tabs' ``url_route``s: unique across plugins (a clash drops the later plugin's view).
TASK_ROUTE = "gpu-profile-task"
RUN_ROUTE = "gpu-profile-run"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyApp:
    """An ASGI app that imports ``target`` (``module:attribute``) on its first call and hands every call to it."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._app: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            module, _, attribute = self.target.partition(":")
            self._app = getattr(importlib.import_module(module), attribute)
        await self._app(scope, receive, send)


def tab_views(base_url: str | None) -> list[dict[str, str]]:
    """The tabs on the task-instance and DAG-run pages, under the path of ``[api] base_url``."""
    root = f"{base_path(base_url)}{PREFIX}"
    return [
        {
            "name": "GPU Profile",
            "href": f"{root}/dags/{{DAG_ID}}/runs/{{RUN_ID}}/tasks/{{TASK_ID}}?map_index={{MAP_INDEX}}",
            "destination": "task_instance",
            "url_route": TASK_ROUTE,
        },
        {
            "name": "GPU Profile",
            "href": f"{root}/dags/{{DAG_ID}}/runs/{{RUN_ID}}",
            "destination": "dag_run",
            "url_route": RUN_ROUTE,
        },
    ]


class GPUProfilePlugin(AirflowPlugin):
    """GPU profiles in the Airflow UI: a task instance's page, a DAG run's roll-up, and JSON twins."""

    name = "airflow_gpu"
    fastapi_apps = [{"app": LazyApp(APP), "url_prefix": PREFIX, "name": "GPU profile"}]
    external_views = tab_views(conf.get("api", "base_url", fallback=""))

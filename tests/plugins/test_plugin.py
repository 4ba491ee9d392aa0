"""The plugin as Airflow loads it: registered twice over, cheap to import, its tabs valid, its app mounted."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest
from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse
from airflow.plugins_manager import is_valid_plugin

from airflow_gpu.get_provider_info import get_provider_info
from airflow_gpu.links.profile import GPUProfileLink
from airflow_gpu.plugins.plugin import RUN_ROUTE, TASK_ROUTE, GPUProfilePlugin, LazyApp, tab_views

#: The ``external_views`` keys Airflow 3.3 reads (DESIGN.md, "Airflow 3 facts").
VIEW_KEYS = {"name", "href", "destination", "url_route", "category", "icon", "icon_dark_mode"}
TARGET = "airflow_gpu.plugins.plugin:GPUProfilePlugin"


def _import(dotted: str) -> Any:
    module, _, name = dotted.replace(":", ".").rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_entry_point_and_the_provider_info_name_the_real_classes() -> None:
    installed = {(ep.group, ep.name): ep for ep in distribution("airflow-provider-gpu").entry_points}
    assert installed["airflow.plugins", "airflow_gpu"].load() is GPUProfilePlugin
    info = get_provider_info()
    assert info["plugins"] == [{"name": GPUProfilePlugin.name, "plugin-class": TARGET.replace(":", ".")}]
    assert [_import(p["plugin-class"]) for p in info["plugins"]] == [GPUProfilePlugin]
    assert [_import(link) for link in info["extra-links"]] == [GPUProfileLink]
    assert is_valid_plugin(GPUProfilePlugin)


def test_the_tabs_follow_airflows_external_view_schema() -> None:
    views = GPUProfilePlugin.external_views
    for view in views:
        assert set(view) <= VIEW_KEYS
        ExternalViewResponse.model_validate(view)  # what the API server serves the UI
    assert [(v["destination"], v["url_route"]) for v in views] == [
        ("task_instance", TASK_ROUTE),
        ("dag_run", RUN_ROUTE),
    ]
    assert views[0]["href"] == "/gpu-profile/dags/{DAG_ID}/runs/{RUN_ID}/tasks/{TASK_ID}?map_index={MAP_INDEX}"
    assert views[1]["href"] == "/gpu-profile/dags/{DAG_ID}/runs/{RUN_ID}"
    # Served under a path, Airflow's base_url path leads the hrefs (the UI does not add it).
    assert tab_views("https://example.com/airflow/")[1]["href"] == "/airflow/gpu-profile/dags/{DAG_ID}/runs/{RUN_ID}"
    [app] = GPUProfilePlugin.fastapi_apps
    assert (app["url_prefix"], app["name"], type(app["app"])) == ("/gpu-profile", "GPU profile", LazyApp)


PROBE = """
import json, sys
HEAVY = ("fastapi", "airflow.api_fastapi.core_api.security", "airflow_gpu.plugins.app")
from airflow import plugins_manager as pm
plugins, errors = pm._get_plugins()
ours = [p for p in plugins if p.name == "airflow_gpu"]
views, _ = pm._get_ui_plugins()
before = [m for m in HEAVY if m in sys.modules]

from fastapi import FastAPI
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import init_plugins
parent = FastAPI()
init_plugins(parent)
status = TestClient(parent).get("/gpu-profile/dags/d/runs/r").status_code
print(json.dumps({"ours": [type(p).__name__ for p in ours], "errors": errors, "before": before, "status": status,
                  "hrefs": [v["href"] for v in views if v.get("url_route", "").startswith("gpu-profile")]}))
"""


@pytest.mark.slow  # Airflow's plugins manager and API server app, started in a fresh process
def test_airflow_loads_it_without_a_database_and_mounts_the_app_on_demand(tmp_path: Path) -> None:
    """Airflow's own plugins manager, in a fresh process whose database cannot be opened.

    Loading plugins (what the scheduler and workers do) imports neither FastAPI nor the app; the
    API server's ``init_plugins`` mounts it, and the first request imports it and is refused:
    no token, 401.
    """
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path}/missing/dir/airflow.db",
        "AIRFLOW__API__BASE_URL": "https://airflow.example.com/base/",
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["ours"] == ["GPUProfilePlugin"] and seen["errors"] == {}
    assert seen["before"] == []
    assert seen["status"] == 401
    assert seen["hrefs"] == [
        "/base/gpu-profile/dags/{DAG_ID}/runs/{RUN_ID}/tasks/{TASK_ID}?map_index={MAP_INDEX}",
        "/base/gpu-profile/dags/{DAG_ID}/runs/{RUN_ID}",
    ]

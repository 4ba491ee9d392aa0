"""The "GPU Profile" extra link: an absolute URL from ``[api] base_url`` that the report's app answers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from airflow.sdk import BaseOperator
from airflow.sdk.types import TaskInstanceKey
from fastapi import FastAPI
from fastapi.testclient import TestClient

from airflow_gpu.links.profile import GPUProfileLink
from airflow_gpu.plugins.app import app, can_read_dag_xcom, xcom_reader
from airflow_gpu.plugins.document import TaskEntry
from airflow_gpu.plugins.urls import PREFIX, parse_map_index
from tests.plugins.profiles import MemoryReader, document

RUN = "manual__2026-11-23T15:00:00+00:00"
QUOTED_RUN = "manual__2026-11-23T15%3A00%3A00%2B00%3A00"


@pytest.fixture
def base_url(monkeypatch: pytest.MonkeyPatch) -> str:
    url = "https://airflow.example.com/base/"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", url)
    return url


def _link(map_index: int) -> str:
    key = TaskInstanceKey(dag_id="gpu dag", task_id="score", run_id=RUN, try_number=2, map_index=map_index)
    return GPUProfileLink().get_link(BaseOperator(task_id="score"), ti_key=key)


def test_the_link_is_absolute_under_base_url_for_mapped_and_unmapped_instances(base_url: str) -> None:
    page = f"https://airflow.example.com/base/gpu-profile/dags/gpu%20dag/runs/{QUOTED_RUN}/tasks/score"
    assert _link(-1) == f"{page}?map_index=-1"
    assert _link(7) == f"{page}?map_index=7"
    assert (GPUProfileLink.name, GPUProfileLink().xcom_key) == ("GPU Profile", "_link_GPUProfileLink")


def test_without_base_url_the_link_uses_airflows_own_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__API__BASE_URL", raising=False)
    assert _link(-1).startswith("http://localhost:8080/gpu-profile/dags/gpu%20dag/runs/")


def test_a_runtime_task_instance_without_map_index_links_the_unmapped_page(base_url: str) -> None:
    """The task runner passes its RuntimeTaskInstance as ``ti_key``; its map_index may be None."""

    class RuntimeKey:
        dag_id, task_id, run_id, map_index = "d", "t", "r", None

    url = GPUProfileLink().get_link(BaseOperator(task_id="t"), ti_key=RuntimeKey())  # type: ignore[arg-type]
    assert url == "https://airflow.example.com/base/gpu-profile/dags/d/runs/r/tasks/t?map_index=-1"


@pytest.fixture
def client() -> Iterator[TestClient]:
    entries = [TaskEntry("score", i, document(1, workload=f"job-{i}")) for i in range(8)]
    app.dependency_overrides[can_read_dag_xcom] = lambda: None
    app.dependency_overrides[xcom_reader] = lambda: MemoryReader(entries, dag_id="gpu dag", run_id=RUN)
    parent = FastAPI()
    parent.mount("/base" + PREFIX, app)
    try:
        yield TestClient(parent)
    finally:
        app.dependency_overrides.clear()


def test_the_link_leads_to_that_task_instances_page(base_url: str, client: TestClient) -> None:
    url = urlsplit(_link(7))
    response = client.get(f"{url.path}?{url.query}")
    assert response.status_code == 200 and "job-7" in response.text and "score [7]" in response.text


def test_map_index_parsing() -> None:
    assert [parse_map_index(raw) for raw in (None, "", " {MAP_INDEX} ", "-1", "12")] == [None, None, None, -1, 12]
    for bad in ("x", "-2", "1.5"):
        with pytest.raises(ValueError):
            parse_map_index(bad)


@pytest.mark.slow  # a fresh Python process that imports Airflow
def test_a_worker_builds_the_link_without_the_api_servers_modules() -> None:
    probe = (
        "import sys, json\nimport airflow_gpu.links.profile\n"
        "heavy = ('fastapi', 'airflow.api_fastapi', 'airflow_gpu.plugins.app')\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_a_task_that_is_not_profiled_gets_no_link(base_url: str) -> None:
    """``gpu_profile=False`` (or an accelerator without NVML): no link to a page that can only be empty."""
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

    key = TaskInstanceKey(dag_id="d", task_id="t", run_id="r", try_number=1, map_index=-1)
    plain = GPUKubernetesOperator(task_id="t", name="t", accelerator="L4", cmds=["x"], gpu_profile=False)
    amd = GPUKubernetesOperator(task_id="t", name="t", accelerator="MI300X", cmds=["x"])
    profiled = GPUKubernetesOperator(task_id="t", name="t", accelerator="L4", cmds=["x"])
    assert GPUProfileLink().get_link(plain, ti_key=key) == GPUProfileLink().get_link(amd, ti_key=key) == ""
    assert GPUProfileLink().get_link(profiled, ti_key=key).startswith(base_url)

"""The GPU Profile report through the shared Airflow stack's own API server: who may read it, and
that what a workload or a DAG author wrote comes back escaped.

Authentication and tokens are Airflow's (simple auth manager, JWT); the one test-side piece is
``stack_config/dag_scoped_auth.py``, which narrows DAG access for the ``outsider`` user as FAB's
per-DAG permissions would.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

import pytest

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from tests.e2e.conftest import OUTSIDER
from tests.e2e.stack_dags.gpu_profile_hostile import HOSTILE_GPU, HOSTILE_WORKLOAD

pytestmark = pytest.mark.slow  # the shared Airflow stack
DAG_ID = "gpu_profile_hostile"


def fetch(stack: AirflowStack, path: str, token: str | None = None) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(f"{stack.url}/gpu-profile{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def token_of(stack: AirflowStack, user: str) -> str:
    answer = stack.request("POST", "/auth/token", {"username": user, "password": stack.passwords[user]}, auth=False)
    return str(answer["access_token"])


@pytest.fixture(scope="module")
def hostile_run(airflow_stack: tuple[AirflowStack, KubernetesEmulator]) -> tuple[AirflowStack, str]:
    stack = airflow_stack[0]
    stack.wait_for_dag(DAG_ID)
    run_id = stack.trigger(DAG_ID)
    wait_for(lambda: stack.run_state(DAG_ID, run_id) in ("success", "failed"), 180, f"{DAG_ID} to end", interval=0.5)
    assert stack.run_state(DAG_ID, run_id) == "success"
    return stack, run_id


def test_the_pages_answer_401_without_a_login_and_403_without_access_to_the_dag(
    hostile_run: tuple[AirflowStack, str],
) -> None:
    stack, run_id = hostile_run
    run = f"/dags/{DAG_ID}/runs/{quote(run_id, safe='')}"
    paths = [run, f"{run}/tasks/profiled", f"/api{run}", f"/api{run}/tasks/profiled?map_index=-1"]
    outsider = token_of(stack, OUTSIDER)
    for path in paths:
        assert fetch(stack, path)[0] == 401, path
        assert fetch(stack, path, outsider)[0] == 403, path
        assert fetch(stack, path, stack.token())[0] == 200, path
    # The outsider may read gpu_fanout: the same routes let them in there (a run without profiles).
    status, page, _ = fetch(stack, "/dags/gpu_fanout/runs/no-such-run", outsider)
    assert status == 200 and "GPU" in page


def test_what_a_workload_reported_comes_back_escaped(hostile_run: tuple[AirflowStack, str]) -> None:
    stack, run_id = hostile_run
    run = f"/dags/{DAG_ID}/runs/{quote(run_id, safe='')}"
    for path in (f"{run}/tasks/profiled", run):
        status, page, headers = fetch(stack, path, stack.token())
        assert status == 200
        assert "<script>alert" not in page and "<img src=x" not in page
        if path.endswith("/profiled"):  # the task page names the GPUs and the workload
            assert "&lt;script&gt;alert(" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
        policy = {k.lower(): v for k, v in headers.items()}["content-security-policy"]
        assert "script-src 'none'" in policy or ("default-src 'none'" in policy and "script-src" not in policy)
    page = fetch(stack, f"{run}/tasks/profiled", stack.token())[1]
    assert page.count("<svg") >= 3 and "<path" in page  # utilisation, memory and power over time
    answer: dict[str, Any] = json.loads(fetch(stack, f"/api{run}/tasks/profiled", stack.token())[1])
    profile = answer["profile"]
    assert [g["name"] for g in profile["gpus"]] == [HOSTILE_GPU]  # data stays data in the JSON twin
    assert profile["workload"] == HOSTILE_WORKLOAD and profile["source"] == "nvidia-smi"
    assert profile["summary"][0]["samples"] >= 2

"""A sync ``GPUKubernetesOperator`` against an API server that throttles, restarts or drops connections (issue
25, behaviour 3): one 429 (with ``Retry-After``), 5xx or reset on any call of the task must not fail it, nor
make a second pod; an error that does end the try leaves no pod running for nobody."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, config

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.operators.task_context import Store, Ti

pytestmark = pytest.mark.usefixtures("fast_api_backoff")
RESULT = "import time; time.sleep(2); print('::airflow-gpu-result::' + '{\"loss\": 0.5}')"


def operator(emulator: KubernetesEmulator, script: str = RESULT, **kwargs: Any) -> GPUKubernetesOperator:
    return GPUKubernetesOperator(
        task_id="train", name="train", accelerator="L4", cmds=["python3", "-c", script], gpu_profile=False,
        namespace="default", kubernetes_conn_id=None, config_file=str(emulator.kubeconfig_path),
        startup_check_interval_seconds=1, **kwargs,
    )  # fmt: skip


def context(**ti: Any) -> Any:
    return {"ti": Ti(task_id="train", **ti), "run_id": "manual__1", "dag": None, "task_state_store": Store()}


def pods_ever(emulator: KubernetesEmulator) -> list[str]:
    return [p["uid"] for p in emulator.pod_phase_times("default")]


def test_a_create_whose_response_was_lost_is_followed_not_made_twice(kubernetes_emulator: KubernetesEmulator) -> None:
    """The API server made the pod, then the connection reset: the retry meets 409 for the pod this try made.
    It used to be taken for another task's name, so a second pod was made (the first, if already ended, deleted
    as KPO's reattach does; with reattach off, left running beside it)."""
    kubernetes_emulator.inject_api_fault(verb="create", resource="pods", status=0, served=True, times=1)
    ti = context()
    assert operator(kubernetes_emulator).execute(ti) == {"loss": 0.5}
    assert len(pods_ever(kubernetes_emulator)) == 1


def test_throttling_5xx_and_resets_on_every_read_do_not_fail_the_task(kubernetes_emulator: KubernetesEmulator) -> None:
    """KPO's label search and polls, the end-of-pod read that classifies the pod and the log that holds its result
    meet 503 and 500 (no ``Retry-After``: urllib3 does not wait those out) and a reset."""
    for rule in (
        {"verb": "list", "resource": "pods", "status": 503, "times": 1},
        {"verb": "get", "resource": "pods", "status": 500, "times": 2},
        {"verb": "get", "resource": "pods", "status": 0, "times": 1},
        {"verb": "get", "resource": "pods/log", "status": 503, "times": 2},
    ):
        kubernetes_emulator.inject_api_fault(**rule)
    assert operator(kubernetes_emulator).execute(context()) == {"loss": 0.5}
    assert len(pods_ever(kubernetes_emulator)) == 1
    assert len(kubernetes_emulator.api_faults_injected) == 6


def test_a_pod_whose_first_read_failed_for_good_is_deleted(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod was made, but its first read (KPO's label search) fails past the retries: KPO's cleanup skips a
    pod it never read back, so it ran on, billed, for nobody. Now it is deleted."""
    from airflow_gpu.utils import api_retry

    monkeypatch.setattr(api_retry, "BUDGET_SECONDS", 3.0)
    kubernetes_emulator.inject_api_fault(verb="list", resource="pods", status=503, times=None)
    with pytest.raises(client.ApiException):
        operator(kubernetes_emulator, "import time; time.sleep(600)", reattach_on_restart=False).execute(context())
    kubernetes_emulator.clear_api_faults()
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    pods = api.list_namespaced_pod("default").items
    assert len(pods) <= 1 and len(pods_ever(kubernetes_emulator)) == 1  # made, then deleted (or going)
    assert all(p.metadata.deletion_timestamp is not None for p in pods), [p.metadata.name for p in pods]


def test_a_resume_whose_read_of_its_pod_meets_503s_reads_it_again(kubernetes_emulator: KubernetesEmulator) -> None:
    """The twenty-fourth soak (shard 44): the resume's first read of the pod it resumed for (KPO's
    ``hook.get_pod``, which asks once) met a 503 after the pod had succeeded, and failed the try."""
    from airflow.sdk.exceptions import TaskDeferred

    from tests.operators.test_kubernetes_drained_after_success import first_event

    ti = context()
    with pytest.raises(TaskDeferred) as deferred:
        operator(kubernetes_emulator, deferrable=True).execute(ti)
    event = first_event(deferred.value.trigger)
    assert event["status"] == "success", event
    kubernetes_emulator.inject_api_fault(verb="get", resource="pods", name=event["name"], status=503, times=2)
    resumed = operator(kubernetes_emulator, deferrable=True)
    assert resumed.trigger_reentry(ti, event, **deferred.value.kwargs) == {"loss": 0.5}
    assert len(kubernetes_emulator.api_faults_injected) == 2
    assert len(pods_ever(kubernetes_emulator)) == 1

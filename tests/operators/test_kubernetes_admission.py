"""A single-pod ``GPUKubernetesOperator`` refused at admission (issue 25, behaviour 1, for one pod).

The refusal is the API server's: the emulator's ResourceQuota and LimitRange admission answer the create
with 403 as ``resourcequota/controller.go`` and the LimitRanger word it, reached over HTTP by the unmodified
``kubernetes`` client KPO uses. The task fails with one line quoting it, naming the namespace and the quota
and saying what to do (not KPO's dump of the ``ApiException``); the spot policy reads it as what it is: not
a preemption (no spot budget spent), not resubmitted elsewhere, Airflow's retries allowed.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from kubernetes import client, config

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils.results import INTERRUPTIONS_XCOM_KEY
from tests.operators.task_context import Store, Ti


def core(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


def operator(emulator: KubernetesEmulator, **kwargs: Any) -> GPUKubernetesOperator:
    return GPUKubernetesOperator(
        task_id="train", name="train", accelerator="L4:2", cmds=["true"], gpu_profile=False, capacity="spot",
        namespace="default", kubernetes_conn_id=None, config_file=str(emulator.kubeconfig_path),
        startup_check_interval_seconds=1, **kwargs,
    )  # fmt: skip


def context() -> Any:
    return {"ti": Ti(task_id="train"), "run_id": "manual__1", "dag": None, "task_state_store": Store()}


def gpu_quota(emulator: KubernetesEmulator, gpus: int) -> None:
    api = core(emulator)
    api.create_namespaced_resource_quota(
        "default", {"metadata": {"name": "gpu-quota"}, "spec": {"hard": {"requests.nvidia.com/gpu": str(gpus)}}}
    )
    wait_for(lambda: api.read_namespaced_resource_quota("gpu-quota", "default").status.used, 10)


@pytest.mark.parametrize("deferrable", [False, True])
def test_a_pod_refused_by_a_quota_fails_in_one_line_that_says_why_and_what_to_do(
    kubernetes_emulator: KubernetesEmulator, deferrable: bool
) -> None:
    gpu_quota(kubernetes_emulator, 1)
    ctx = context()
    with pytest.raises(AirflowException) as raised:
        operator(kubernetes_emulator, deferrable=deferrable).execute(ctx)
    error = raised.value
    assert not isinstance(error, (AirflowFailException, TaskDeferred))  # Airflow's retries apply: quotas free up
    message = str(error)
    assert "\n" not in message and "HTTP response headers" not in message
    assert "in namespace default (ResourceQuota gpu-quota)" in message
    assert "is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=2" in message
    assert "limited: requests.nvidia.com/gpu=1" in message
    assert "raise ResourceQuota gpu-quota (kubectl describe resourcequota gpu-quota -n default)" in message
    assert "not a preemption" in message and "no spot budget spent" in message
    assert error.__cause__ is None and error.__suppress_context__  # no ApiException dump after the line
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []
    assert core(kubernetes_emulator).list_namespaced_pod("default").items == []


def test_a_pod_outside_the_limit_range_says_to_fit_it(kubernetes_emulator: KubernetesEmulator) -> None:
    core(kubernetes_emulator).create_namespaced_limit_range("default", {
        "metadata": {"name": "gpus"},
        "spec": {"limits": [{"type": "Container", "max": {"nvidia.com/gpu": "1"}}]},
    })  # fmt: skip
    with pytest.raises(AirflowException) as raised:
        operator(kubernetes_emulator).execute(context())
    message = str(raised.value)
    assert "in namespace default: " in message and "maximum nvidia.com/gpu usage per Container is 1" in message
    assert "fit its requests and limits to the LimitRange (kubectl describe limitrange -n default)" in message

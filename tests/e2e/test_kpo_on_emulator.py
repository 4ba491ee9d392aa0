"""The official ``KubernetesPodOperator`` runs against the emulator through ``airflow dags test``
(which is ``dag.test()``): to completion with its log lines in the task log, failing with the
pod's exit code, and deferrable, its trigger talking to the emulator through ``kubernetes_asyncio``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
from kubernetes import client, config

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

pytestmark = pytest.mark.slow

Airflow = Callable[..., subprocess.CompletedProcess[str]]


def _pods(emulator: KubernetesEmulator) -> list[client.V1Pod]:
    api = client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig_path)))
    return list(api.list_namespaced_pod("default", label_selector="dag_id=kpo_on_emulator").items)


def test_kpo_runs_a_pod_to_completion(airflow: Airflow, kubernetes_emulator: KubernetesEmulator) -> None:
    result = airflow("dags", "test", "kpo_on_emulator", KUBECONFIG=str(kubernetes_emulator.kubeconfig_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "[base] line-one" in result.stdout and "[base] line-two" in result.stdout
    (pod,) = _pods(kubernetes_emulator)
    assert pod.status.phase == "Succeeded"
    assert pod.metadata.labels["task_id"] == "hello"


def test_kpo_fails_with_the_pods_exit_code(airflow: Airflow, kubernetes_emulator: KubernetesEmulator) -> None:
    result = airflow(
        "dags", "test", "kpo_on_emulator", KUBECONFIG=str(kubernetes_emulator.kubeconfig_path), KPO_EXIT="3"
    )
    assert result.returncode != 0
    assert "'exit_code': 3" in result.stdout
    (pod,) = _pods(kubernetes_emulator)
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3


def test_deferrable_kpo_uses_kubernetes_asyncio(airflow: Airflow, kubernetes_emulator: KubernetesEmulator) -> None:
    result = airflow(
        "dags", "test", "kpo_on_emulator", KUBECONFIG=str(kubernetes_emulator.kubeconfig_path), KPO_DEFERRABLE="1"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Trigger completed" in result.stdout
    assert "[base] logs: line-one" in result.stdout
    (pod,) = _pods(kubernetes_emulator)
    assert pod.status.phase == "Succeeded"

"""``GPUKubernetesOperator`` end to end: a real ``airflow dags test`` (``dag.test()``) against the
Kubernetes emulator, with spot preemptions injected while the task runs."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for

pytestmark = pytest.mark.slow

Airflow = Callable[..., subprocess.CompletedProcess[str]]


def run_scenario(
    airflow: Airflow, emulator: KubernetesEmulator, tmp_path: Path, scenario: str, deferrable: bool = False
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    result_file = tmp_path / "result.json"
    completed = airflow(
        "dags", "test", "gpu_kubernetes",
        KUBECONFIG=str(emulator.kubeconfig_path), GPU_SCENARIO=scenario, RESULT_FILE=str(result_file),
        CHECKPOINT_FILE=str(tmp_path / "checkpoint.json"), GPU_DEFERRABLE="1" if deferrable else "0",
    )  # fmt: skip
    report = json.loads(result_file.read_text()) if result_file.exists() else {}
    return completed, report


class Preempter(threading.Thread):
    """Preempts the first ``times`` pods of the task once they have run for a moment."""

    def __init__(self, emulator: KubernetesEmulator, times: int) -> None:
        super().__init__(daemon=True)
        self.emulator, self.times, self.preempted = emulator, times, []
        self.api = client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig_path)))
        self.stop = threading.Event()

    def run(self) -> None:
        while len(self.preempted) < self.times and not self.stop.is_set():
            for pod in self.api.list_namespaced_pod("default", label_selector="task_id=train").items:
                name = pod.metadata.name
                if pod.status.phase == "Running" and name not in self.preempted:
                    time.sleep(0.8)  # let it make progress
                    self.emulator.preempt(name)
                    self.preempted.append(name)
            time.sleep(0.1)


def test_single_gpu_pod(airflow: Airflow, kubernetes_emulator: KubernetesEmulator, tmp_path: Path) -> None:
    completed, report = run_scenario(airflow, kubernetes_emulator, tmp_path, "single")
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert "accelerator=L4 capacity=any" in completed.stdout
    assert report == {"interruptions": [], "accelerator": {"accelerator": "L4", "capacity": "any"}}


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_preemption_resumes_from_checkpoint(
    airflow: Airflow, kubernetes_emulator: KubernetesEmulator, tmp_path: Path, deferrable: bool
) -> None:
    preempter = Preempter(kubernetes_emulator, times=2)
    preempter.start()
    completed, report = run_scenario(airflow, kubernetes_emulator, tmp_path, "preempt", deferrable)
    preempter.stop.set()
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert "result 465" in completed.stdout  # sum(1..30): the same answer as without preemptions
    assert completed.stdout.count("SIGTERM at step") == 2
    assert "notice True" in completed.stdout  # the preStop hook wrote the spot notice before SIGTERM
    interruptions = report["interruptions"]
    assert [i["reason"] for i in interruptions] == ["TerminationByKubelet", "TerminationByKubelet"]
    assert [i["pod"] for i in interruptions] == preempter.preempted
    assert [f["pod"] for f in kubernetes_emulator.faults] == preempter.preempted  # injected == seen
    assert report["accelerator"] == {"accelerator": "H100:8", "capacity": "spot"}
    if deferrable:
        assert completed.stdout.count("Pausing task as DEFERRED") >= 3  # one deferral per pod


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_pod_deleted_before_it_starts_is_resubmitted(
    airflow: Airflow, kubernetes_emulator: KubernetesEmulator, tmp_path: Path, deferrable: bool
) -> None:
    """apache/airflow#59626: a pod preempted before it starts is a 404, not a failed task."""
    api = client.CoreV1Api(config.new_client_from_config(str(kubernetes_emulator.kubeconfig_path)))
    spot_nodes = ["gpu-spot-1", "gpu-spot-2"]
    for node in spot_nodes:  # the first pod stays Pending...
        kubernetes_emulator.cordon(node)
    deleted: list[str] = []

    def delete_the_pending_pod() -> None:
        def pending() -> list[str]:
            pods = api.list_namespaced_pod("default", label_selector="task_id=train").items
            return [p.metadata.name for p in pods if p.status.phase == "Pending"]

        names = wait_for(pending, 120, "the task's pod to be Pending", interval=0.1)
        api.delete_namespaced_pod(names[0], "default", grace_period_seconds=0)  # ...and is gone
        deleted.append(names[0])
        for node in spot_nodes:
            kubernetes_emulator.cordon(node, unschedulable=False)

    deleter = threading.Thread(target=delete_the_pending_pod, daemon=True)
    deleter.start()
    try:
        completed, report = run_scenario(airflow, kubernetes_emulator, tmp_path, "vanish", deferrable)
    finally:
        for node in spot_nodes:
            kubernetes_emulator.cordon(node, unschedulable=False)
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert "ran attempt 2" in completed.stdout
    assert [(i["pod"], i["reason"]) for i in report["interruptions"]] == [(deleted[0], "PodDeleted")]


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_fallback_to_on_demand_then_next_candidate(
    airflow: Airflow, kubernetes_emulator: KubernetesEmulator, tmp_path: Path, deferrable: bool
) -> None:
    preempter = Preempter(kubernetes_emulator, times=1)
    preempter.start()
    completed, report = run_scenario(airflow, kubernetes_emulator, tmp_path, "fallback", deferrable)
    preempter.stop.set()
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert "result 465" in completed.stdout
    assert "falling back to on-demand capacity" in completed.stdout
    assert "trying the next accelerator candidate" in completed.stdout
    assert len(report["interruptions"]) == 1
    assert report["accelerator"] == {"accelerator": "L4:4", "capacity": "on-demand"}


def test_unschedulable_moves_to_the_next_candidate(
    airflow: Airflow, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    completed, report = run_scenario(airflow, kubernetes_emulator, tmp_path, "unschedulable")
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert "ran on L4:2" in completed.stdout
    assert report["accelerator"] == {"accelerator": "L4:2", "capacity": "on-demand"}
    api = client.CoreV1Api(config.new_client_from_config(str(kubernetes_emulator.kubeconfig_path)))
    assert all(p.spec.node_name for p in api.list_namespaced_pod("default").items)  # no pending pod left behind


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_application_failure_fails_without_retries(
    airflow: Airflow, kubernetes_emulator: KubernetesEmulator, tmp_path: Path, deferrable: bool
) -> None:
    completed, report = run_scenario(airflow, kubernetes_emulator, tmp_path, "app-failure", deferrable)
    # The task has retries=2, but a bug is not a preemption: failed at once, never up_for_retry.
    assert "new_state=failed" in completed.stdout
    assert "up_for_retry" not in completed.stdout
    assert "the application failed (container base failed: exit code 7)" in completed.stdout
    assert "retry_on_app_failure=False" in completed.stdout
    api = client.CoreV1Api(config.new_client_from_config(str(kubernetes_emulator.kubeconfig_path)))
    assert len(api.list_namespaced_pod("default", label_selector="task_id=train").items) <= 1  # no retry pods
    assert report["interruptions"] == []

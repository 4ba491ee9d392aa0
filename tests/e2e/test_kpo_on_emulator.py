"""The official ``KubernetesPodOperator``, unmodified, against the emulator on the shared Airflow
stack (tests/e2e/stack_dags/official_operators.py): to completion with its log lines in the task
log, failing with the pod's exit code, and deferrable, its trigger running in the real triggerer
and talking to the emulator through ``kubernetes_asyncio``."""

from __future__ import annotations

import pytest
from kubernetes import client, config

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.e2e.scenarios import ReleaseAfterDeferral, Scenario, ScenarioRun, scenarios

pytestmark = pytest.mark.slow


def _pods(emulator: KubernetesEmulator, dag_id: str) -> list[client.V1Pod]:
    api = client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig_path)))
    return list(api.list_namespaced_pod("default", label_selector=f"dag_id={dag_id}").items)


@scenarios(Scenario("kpo_on_emulator", "kubernetes"))
def test_kpo_runs_a_pod_to_completion(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    log = scenario_run.log("hello")
    assert "[base] line-one" in log and "[base] line-two" in log
    (pod,) = _pods(scenario_run.emulator, scenario_run.dag_id)
    assert pod.status.phase == "Succeeded"
    assert pod.metadata.labels["task_id"] == "hello"


@scenarios(Scenario("kpo_on_emulator_exit3", "kubernetes"))
def test_kpo_fails_with_the_pods_exit_code(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "failed"
    assert "'exit_code': 3" in scenario_run.log("hello")
    (pod,) = _pods(scenario_run.emulator, scenario_run.dag_id)
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3


@scenarios(Scenario("kpo_on_emulator_deferrable", "kubernetes", injector=ReleaseAfterDeferral))
def test_deferrable_kpo_uses_kubernetes_asyncio(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    log = scenario_run.log("hello")  # the worker's log and the triggerer's
    assert "Pausing task as DEFERRED" in log
    trigger = scenario_run.trigger_log("hello")  # KubernetesPodTrigger, in the triggerer, on the emulator
    assert "Checking pod 'hello-" in trigger and "Trigger fired event" in trigger
    assert "[base] logs: line-one" in log
    (pod,) = _pods(scenario_run.emulator, scenario_run.dag_id)
    assert pod.status.phase == "Succeeded"
